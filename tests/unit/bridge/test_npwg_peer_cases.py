"""bridge.npwg against the facts of its peers' own test suites.

Each table row is one case of a peer's test: its input, and what this project does
with it. Where the peer's outcome differs, the row says so and docs/npwg-conformance.md
gives the reason. The peer's file is cited above each table; the code is ours.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge import npwg
from bridge.npwg import InvalidSelection

# --- Selection (4.1) --------------------------------------------------------------------------
# Facts from kubeovn/kube-ovn pkg/util/network_attachment_test.go (TestParsePodNetworkObjectName,
# TestParsePodNetworkAnnotation), which carries Multus's selection parser and its cases
# (k8snetworkplumbingwg/multus-cni pkg/k8sclient/k8sclient.go parsePodNetworkObjectName).
# The JSON cases are what Go's json.Marshal makes of Multus's NetworkSelectionElement: its
# `DeprecatedInterfaceRequest` field is written as the pre-spec key "interfaceRequest".

_MULTUS_ELEMENT = {"name": "lb-svc-attachment", "namespace": "kube-system", "ips": ["192.168.50.6"],
                   "mac": "00:0c:29:9a:96:74", "interface": "eth0", "interfaceRequest": "eth0"}

# (annotation, pod namespace, expected [(namespace, name, interface, ips, mac)] or the key refused)
SELECTION_CASES = [
    pytest.param("kube-system/lb-svc-attachment", "kube-system",
                 [("kube-system", "lb-svc-attachment", None, None, None)], id="base"),
    pytest.param("lb-svc-attachment", "kube-system",
                 [("kube-system", "lb-svc-attachment", None, None, None)], id="baseWithoutNS"),
    pytest.param("kube-system/lb-svc-attachment@eth0", "kube-system",
                 [("kube-system", "lb-svc-attachment", "eth0", None, None)], id="baseWithIF"),
    pytest.param("kube-system/lb-svc-attachment/1", "kube-system", "name", id="errFormat two slashes"),
    pytest.param("mellanox.com/cx5_sriov_switchdev", "kube-system", "name", id="errFormatNS"),
    pytest.param("kube-system/lb-svc-attachment@eth0@1", "kube-system", "interface", id="errFormatIF two @"),
    # errNull: the peer expects no element and no error; so do we.
    pytest.param("", "kube-system", [], id="errNull"),
    # correctJson: accepted by the peer; here too, "interfaceRequest" ignored with a warning.
    pytest.param(json.dumps([_MULTUS_ELEMENT]), "kube-system",
                 [("kube-system", "lb-svc-attachment", "eth0", ["192.168.50.6"], "00:0c:29:9a:96:74")],
                 id="correctJson"),
    pytest.param(json.dumps([{**_MULTUS_ELEMENT, "ips": ["192.168.50.6/20"]}]), "kube-system",
                 [("kube-system", "lb-svc-attachment", "eth0", ["192.168.50.6/20"], "00:0c:29:9a:96:74")],
                 id="correctJsonIP"),
    # correctJsonIfReq: "interface" empty (omitted), only the pre-spec "interfaceRequest". The
    # peer (Multus's pre-3.2 compatibility) takes it as the interface; we ignore it (a
    # deviation, docs/npwg-conformance.md), so the interface is the runtime's choice.
    pytest.param(json.dumps([{k: v for k, v in _MULTUS_ELEMENT.items() if k != "interface"}]), "kube-system",
                 [("kube-system", "lb-svc-attachment", None, ["192.168.50.6"], "00:0c:29:9a:96:74")],
                 id="correctJsonIfReq"),
    pytest.param(json.dumps(_MULTUS_ELEMENT), "kube-system", "json", id="errJson an object, not a list"),
    pytest.param(json.dumps([{**_MULTUS_ELEMENT, "mac": "123"}]), "kube-system", "mac", id="errJSONMac"),
    pytest.param(json.dumps([{**_MULTUS_ELEMENT, "ips": ["192.168.6"]}]), "kube-system", "ips",
                 id="errJsonIP1"),
    pytest.param(json.dumps([{**_MULTUS_ELEMENT, "ips": ["192.168.6/20"]}]), "kube-system", "ips",
                 id="errJsonIP2"),
]


@pytest.mark.parametrize(("annotation", "namespace", "expected"), SELECTION_CASES)
def test_multus_selection_cases(annotation: str, namespace: str, expected: list[tuple[Any, ...]] | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(InvalidSelection) as exc:
            npwg.parse_selection(annotation, namespace)
        assert exc.value.key == (None if expected == "json" else expected), str(exc.value)
        return
    elements = npwg.parse_selection(annotation, namespace)
    assert [(e.namespace, e.name, e.interface, e.ips, e.mac) for e in elements] == expected
    warnings = npwg.ignored_key_warnings(elements)
    pre_spec = "interfaceRequest" in annotation
    assert len(warnings) == (1 if pre_spec else 0)
    if pre_spec:
        assert "'interfaceRequest'" in warnings[0]


# Facts from k8snetworkplumbingwg/network-resources-injector pkg/webhook/webhook_test.go,
# DescribeTable("Network selection elements parsing"), pod namespace "default":
# (annotation, expected [(namespace, name, interface)] or the index of the invalid item).
INJECTOR_CASES = [
    pytest.param("", [], id="empty config"),
    pytest.param("ns1/net1@eth0", [("ns1", "net1", "eth0")], id="csv - correct ns/net@if format"),
    pytest.param("net1@eth0", [("default", "net1", "eth0")], id="csv - correct net@if format"),
    pytest.param("net1", [("default", "net1", None)], id="csv - correct name-only format"),
    pytest.param("ns1/net1", [("ns1", "net1", None)], id="csv - correct ns/net format"),
    pytest.param("ns1/net1,net2", [("ns1", "net1", None), ("default", "net2", None)],
                 id="csv - correct multiple networks format"),
    pytest.param("ns1/net1/if1", 0, id="csv - incorrect format forward slashes"),
    pytest.param("net1@if1@if2", 0, id="csv - incorrect format @'s"),
    pytest.param("ns/net1,net2,net3@if1@if2", 2, id="csv - incorrect mixed with correct"),
    pytest.param('{"name": "net1"}', None, id="json - not an array"),
    pytest.param('[{"name": "net1"},{"name": "net2", "namespace": "ns1"}]',
                 [("default", "net1", None), ("ns1", "net2", None)], id="json - correct example"),
]


@pytest.mark.parametrize(("annotation", "expected"), INJECTOR_CASES)
def test_network_resources_injector_selection_cases(
    annotation: str, expected: list[tuple[str, str, str | None]] | int | None
) -> None:
    if expected is None or isinstance(expected, int):
        with pytest.raises(InvalidSelection) as exc:
            npwg.parse_selection(annotation, "default")
        assert exc.value.index == expected, str(exc.value)
        return
    assert [(e.namespace, e.name, e.interface) for e in npwg.parse_selection(annotation, "default")] == expected


# --- Status (5) -------------------------------------------------------------------------------
# Facts from k8snetworkplumbingwg/network-attachment-definition-client
# pkg/utils/net-attach-def_test.go (CreateNetworkStatus, CreateNetworkStatuses). The peer
# reports bare addresses, one status per sandbox interface, IPs without an interface index
# on the last sandbox interface, and every default route's gateway; we follow 5.3.x
# (docs/npwg-conformance.md, "Status annotation").

_SINGLE = {"cniVersion": "1.0.0",
           "interfaces": [{"name": "net1", "mac": "92:79:27:01:7c:cf", "sandbox": "/proc/1123/ns/net", "mtu": 9000}],
           "ips": [{"address": "1.1.1.3/24"}, {"address": "2001::1/64"}]}
_MULTIPLE = {"cniVersion": "1.1.0",
             "interfaces": [{"name": "foo", "mac": "00:AA:BB:CC:DD:33"},
                            {"name": "example0", "mac": "00:AA:BB:CC:DD:01", "sandbox": "/path/to/network/namespace",
                             "mtu": 1500},
                            {"name": "example1", "mac": "00:AA:BB:CC:DD:02", "sandbox": "/path/to/network/namespace",
                             "mtu": 1500}],
             "ips": [{"address": "192.0.2.1/24", "interface": 1}, {"address": "192.0.2.2/24", "interface": 1},
                     {"address": "192.0.2.3/24", "interface": 2}],
             "dns": {"nameservers": ["8.8.8.8", "8.8.4.4"], "search": ["example.com"], "options": ["ndots:2"]}}
_NO_SANDBOX = {"cniVersion": "1.1.0", "interfaces": [{"name": "foo"}],
               "ips": [{"address": "10.244.196.152/32"}, {"address": "fd10:244::c497/128"}]}
_DEFAULT_ROUTE = {**_SINGLE, "routes": [{"dst": "0.0.0.0/0", "gw": "10.10.10.10"}]}
_OTHER_ROUTE = {**_SINGLE, "routes": [{"dst": "10.10.10.0/24", "gw": "10.10.10.10"}]}

# (name, result, default, the selection's default-route, the runtime's CNI_IFNAME, expected entry)
STATUS_CASES = [
    # "create network status from cni result": the peer gives IPs 1.1.1.3 and 2001::1. Their
    # entries carry no interface index, so 5.3.3.1 rule 1 (the sandbox interface's IPs) gives none.
    pytest.param("test-net-attach-def", _SINGLE, False, None, "net1",
                 {"name": "test-net-attach-def", "interface": "net1", "mac": "92:79:27:01:7c:cf",
                  "default": False}, id="single sandbox interface, IPs without index"),
    # "for a secondary network" / "for the cluster default network": the peer writes one status
    # per sandbox interface; 5.3.2.1 takes the first, and its IPs by index.
    pytest.param("test-multi-net-attach-def", _MULTIPLE, False, None, "net1",
                 {"name": "test-multi-net-attach-def", "interface": "example0", "mac": "00:AA:BB:CC:DD:01",
                  "ips": ["192.0.2.1/24", "192.0.2.2/24"], "default": False,
                  "dns": {"nameservers": ["8.8.8.8", "8.8.4.4"], "search": ["example.com"]}},
                 id="multiple interfaces, secondary network"),
    pytest.param("test-multi-net-attach-def", _MULTIPLE, True, None, "eth0",
                 {"name": "test-multi-net-attach-def", "interface": "example0", "mac": "00:AA:BB:CC:DD:01",
                  "ips": ["192.0.2.1/24", "192.0.2.2/24"], "default": True,
                  "dns": {"nameservers": ["8.8.8.8", "8.8.4.4"], "search": ["example.com"]}},
                 id="multiple interfaces, cluster default network"),
    # "single interface which omits the sandbox info": the peer's entry has name, IPs and
    # default only, no interface and no mac: so does ours (5.3.3.1 rule 2), whatever CNI_IFNAME was.
    pytest.param("test-default-net-without-sandbox", _NO_SANDBOX, True, None, "eth0",
                 {"name": "test-default-net-without-sandbox", "ips": ["10.244.196.152/32", "fd10:244::c497/128"],
                  "default": True}, id="no sandbox interface"),
    # "features routes with default route": the peer reports the gateway always; 5.3.6.4 only
    # when the selection asked for the default route.
    pytest.param("n", _DEFAULT_ROUTE, False, [], "net1",
                 {"name": "n", "interface": "net1", "mac": "92:79:27:01:7c:cf", "default": False,
                  "default-route": ["10.10.10.10"]}, id="default route gateway, asked"),
    pytest.param("n", _DEFAULT_ROUTE, False, None, "net1",
                 {"name": "n", "interface": "net1", "mac": "92:79:27:01:7c:cf", "default": False},
                 id="default route gateway, not asked"),
    # "routes that are not the default route": no gateway reported.
    pytest.param("n", _OTHER_ROUTE, False, [], "net1",
                 {"name": "n", "interface": "net1", "mac": "92:79:27:01:7c:cf", "default": False,
                  "default-route": []}, id="only a non-default route"),
]


@pytest.mark.parametrize(("name", "result", "default", "default_route", "ifname", "expected"), STATUS_CASES)
def test_nad_client_status_cases(
    name: str, result: dict[str, Any], default: bool, default_route: list[str] | None, ifname: str,
    expected: dict[str, Any],
) -> None:
    entry = npwg.status_entry(name, result, default=default, interface=ifname, default_route=default_route)
    assert entry == expected


# --- Delegation (3.4) -------------------------------------------------------------------------
# Facts from containernetworking/cni libcni/conf_test.go ("LoadConf", "LoadNetworkConf"): a
# config list is found before a single config of the same name, a single config by its name,
# and a file in a subdirectory is not found. Our 3.4.1 order is the same.

# (files in the conf dir, the NAD's name, the plugin types expected or None for "not found")
DISK_CASES = [
    pytest.param({"50-whatever.conflist": {"name": "some-network", "cniVersion": "0.4.0",
                                           "plugins": [{"type": "host-local"}, {"type": "bridge"}]},
                  "49-whatever.conf": {"name": "some-network", "cniVersion": "0.4.0", "type": "bridge"}},
                 "some-network", ["host-local", "bridge"], id="the config list first"),
    pytest.param({"49-whatever.conf": {"name": "some-network", "cniVersion": "0.4.0", "type": "bridge"}},
                 "some-network", ["bridge"], id="falls back to the config file"),
    pytest.param({"50-whatever.json": {"name": "some-plugin", "type": "foobar"}},
                 "some-plugin", ["foobar"], id=".json instead of .conf"),
    pytest.param({"subdir1/subdir2/90-deep.conf": {"name": "deep", "type": "bridge"}},
                 "deep", None, id="not in a nested subdir"),
    pytest.param({"50-whatever.conf": {"name": "some-plugin", "type": "foobar"}},
                 "some-other-plugin", None, id="no config of that name"),
]


@pytest.mark.parametrize(("files", "nad_name", "types"), DISK_CASES)
def test_libcni_config_lookup_cases(
    tmp_path: Path, files: dict[str, dict[str, Any]], nad_name: str, types: list[str] | None
) -> None:
    for rel, content in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content))
    if types is None:
        with pytest.raises(npwg.DelegationError, match=r"3\.4\.1"):
            npwg.delegate_config(None, nad_name, "ns", None, tmp_path)
        return
    config = npwg.delegate_config(None, nad_name, "ns", None, tmp_path)
    assert [p["type"] for p in npwg.plugins_of(config)] == types
