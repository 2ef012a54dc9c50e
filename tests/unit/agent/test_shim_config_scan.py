"""The shim (bridge.agent.shim.shim) reads the configuration's own top-level keys and nothing nested or quoted."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.agent.shim import shim


def _runtime_stdin(pod_annotations: dict[str, str]) -> bytes:
    # What libcni hands the plugin: Go's encoding/json sorts map keys, so "runtimeConfig"
    # (with containerd's pod-annotations capability) comes before "socketPath".
    conf = {
        "cniVersion": "1.0.0",
        "name": "multinetwork",
        "runtimeConfig": {"io.kubernetes.cri.pod-annotations": pod_annotations},
        "socketPath": "/run/multinetwork/agent.sock",
        "type": "multinetwork",
    }
    return json.dumps(conf, sort_keys=True).encode()


def test_a_pod_annotation_named_socketpath_does_not_redirect_the_shim() -> None:
    stdin = _runtime_stdin({"socketPath": "/tmp/attacker.sock"})
    assert shim.string_field(stdin, "socketPath") == "/run/multinetwork/agent.sock"


def test_a_nested_cniversion_before_the_top_level_one_is_not_taken_for_it() -> None:
    stdin = json.dumps({"args": {"cni": {"cniVersion": "9.9.9"}}, "cniVersion": "0.4.0"}).encode()
    assert shim.string_field(stdin, "cniVersion") == "0.4.0"


def test_a_key_name_inside_a_string_value_is_not_a_key() -> None:
    stdin = b'{"name": "x\\", \\"socketPath\\": \\"/tmp/evil", "socketPath": "/run/a.sock"}'
    assert shim.string_field(stdin, "socketPath") == "/run/a.sock"


_leaf = st.text(max_size=12)
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | _leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["socketPath", "a", "b"]), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=150)
@given(st.dictionaries(st.sampled_from(["socketPath", "args", "prevResult", "zzz"]), _values, max_size=4))
def test_the_scanner_finds_only_what_a_json_parser_finds_at_the_top_level(conf: dict) -> None:
    data = json.dumps(conf).encode()
    found = shim.string_field(data, "socketPath")
    top = conf.get("socketPath")
    assert found is None or found == top
