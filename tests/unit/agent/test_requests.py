"""The agent's reading of a CNI request: environment and configuration in, a request
or a CNI error with the spec's code out."""

from __future__ import annotations

import pytest

from bridge.agent.cni import request
from bridge.agent.delegates.invoke import CNIError

ADD_ENV = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "c1",
    "CNI_NETNS": "/var/run/netns/x",
    "CNI_IFNAME": "eth0",
    "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p",
}


def test_a_valid_add_names_the_pod_and_delegates_ignore_unknown_args() -> None:
    req = request.parse_request(ADD_ENV, b'{"cniVersion": "0.4.0", "runtimeConfig": {"portMappings": []}}')
    assert (req.pod_namespace, req.pod_name, req.cni_version) == ("ns", "p", "0.4.0")
    assert req.args.args[0] == ("IgnoreUnknown", "1")
    assert req.runtime_config == {"portMappings": []}


@pytest.mark.parametrize(
    ("change", "stdin", "code"),
    [
        ({"CNI_COMMAND": "NOPE"}, b"{}", 4),
        ({"CNI_CONTAINERID": ""}, b"{}", 4),
        ({"CNI_IFNAME": "bad/name"}, b"{}", 4),
        ({"CNI_NETNS": ""}, b"{}", 4),
        ({"CNI_ARGS": "K8S_POD_NAME=p"}, b"{}", 4),
        ({}, b"[1]", 6),
        ({}, b"{", 6),
        ({}, b'{"cniVersion": "0.2.0"}', 1),
        ({}, b'{"runtimeConfig": 3}', 7),
    ],
)
def test_a_malformed_request_is_a_cni_error_with_the_spec_code(change: dict[str, str], stdin: bytes, code: int) -> None:
    with pytest.raises(CNIError) as caught:
        request.parse_request({**ADD_ENV, **change}, stdin)
    assert caught.value.code == code and caught.value.msg


def test_del_needs_no_pod_and_no_netns() -> None:
    req = request.parse_request({"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0"}, b"{}")
    assert req.pod_name is None and req.args.netns == ""

