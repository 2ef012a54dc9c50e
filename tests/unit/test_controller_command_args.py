"""`podnetwork controller` arguments: feature gates and usage errors."""

from __future__ import annotations

import pytest

from podnetwork import cli
from podnetwork.commands import controller as command


def test_feature_gates_parse_like_kube_components():
    assert command.parse_feature_gates("MultiNetwork=false, Other=true") == {"MultiNetwork": False, "Other": True}
    assert command.multinetwork_enabled({}) is True
    assert command.multinetwork_enabled(command.parse_feature_gates("MultiNetwork=false")) is False
    with pytest.raises(ValueError, match=r"'MultiNetwork': expected NAME=true"):
        command.parse_feature_gates("MultiNetwork")


def test_bad_feature_gate_is_a_usage_error(capsys):
    assert cli.main(["controller", "--feature-gates", "MultiNetwork=maybe"]) == 2
    assert "expected NAME=true or NAME=false" in capsys.readouterr().out
