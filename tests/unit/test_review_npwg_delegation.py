"""Review findings in bridge.npwg's delegation (3.4, 4.1.2.1.6.2): bad NAD content is a DelegationError."""

from __future__ import annotations

import pytest

from bridge import npwg


def _element_with_cni_args() -> npwg.NetworkSelectionElement:
    (element,) = npwg.parse_selection('[{"name": "net-a", "cni-args": {"spoofchk": "on"}}]', "ns")
    return element


@pytest.mark.parametrize(
    "nad_args",
    ['"args": "not-an-object"', '"args": {"cni": "not-an-object"}', '"args": []'],
)
def test_4_1_2_1_6_2_cni_args_onto_a_nad_whose_args_is_not_an_object_is_a_delegation_error(
    nad_args: str,
) -> None:
    config = f'{{"cniVersion": "1.0.0", "type": "bridge", {nad_args}}}'
    with pytest.raises(npwg.DelegationError, match="args"):
        npwg.delegate_config(_element_with_cni_args(), "net-a", "ns", config, None)


def test_4_1_2_1_6_2_cni_args_still_win_over_the_nads_args_cni() -> None:
    config = '{"cniVersion": "1.0.0", "type": "bridge", "args": {"cni": {"spoofchk": "off", "x": "1"}}}'
    out = npwg.delegate_config(_element_with_cni_args(), "net-a", "ns", config, None)
    assert out["args"] == {"cni": {"spoofchk": "on", "x": "1"}}
