"""The DeviceClass CEL that `podnetwork export-dra` writes, evaluated by the real kube-scheduler's
DRA allocator: the selectors of a host-device NAD pick exactly the device it names (by interface
name and by MAC, which the NAD may write in upper case and DRANET reports in lower case) among
devices of a ResourceSlice that each match all but one selector. The emulator tier cannot evaluate
CEL; no DRA driver runs here, so the claim is allocated and never prepared.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from bridge.dra.objects import DRANET_DRIVER
from tests.real.cluster_support import PODNETWORK, Api, Node, eventually, pod_manifest
from tests.real.objects_support import BRIDGE_PROVIDER, Made, nad_ref, podnetwork_body, pods, unique

pytestmark = pytest.mark.usefixtures("components")

RESOURCE = "/apis/resource.k8s.io/v1"


def device(name: str, if_name: str, mac: str) -> dict[str, object]:
    return {"name": name, "attributes": {"ifName": {"string": if_name}, "mac": {"string": mac}}}


def test_export_dras_device_class_selects_the_host_interface_its_nad_names(
        api: Api, made: Made, ns: str, node: Node, tmp_path: Path) -> None:
    network, mac = unique("hostdev"), "aa:bb:cc:00:11:22"
    nad = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
           "metadata": {"name": "hd", "namespace": ns},
           "spec": {"config": json.dumps({"cniVersion": "1.0.0", "type": "host-device", "device": "eth7",
                                          "hwaddr": mac.upper(), "ipam": {"type": "static",
                                          "addresses": [{"address": "10.9.0.2/24"}]}})}}
    pod = pod_manifest("dra", networks=[{"podNetworkName": "default"},
                                        {"podNetworkName": network, "interfaceName": "net1"}])
    pod["metadata"]["namespace"] = ns
    manifests = tmp_path / "in.yaml"
    manifests.write_text(yaml.safe_dump_all([
        nad, podnetwork_body(network, provider=BRIDGE_PROVIDER, refs=[nad_ref(ns, "hd")]), pod]))
    out = subprocess.run([str(PODNETWORK), "export-dra", "-f", str(manifests)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    exported = {o["kind"]: o for o in yaml.safe_load_all(out.stdout)}
    assert [s["cel"]["expression"] for s in exported["DeviceClass"]["spec"]["selectors"]] == [
        f'device.driver == "{DRANET_DRIVER}"', f'device.attributes["{DRANET_DRIVER}"].ifName == "eth7"',
        f'device.attributes["{DRANET_DRIVER}"].mac == "{mac}"']

    made.create(f"{RESOURCE}/deviceclasses", exported["DeviceClass"])
    made.create(f"{RESOURCE}/resourceslices", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": unique("nics")},
        "spec": {"driver": DRANET_DRIVER, "nodeName": node.name,
                 "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
                 # each decoy fails exactly one selector
                 "devices": [device("other-name", "eth8", mac), device("other-mac", "eth7", "aa:bb:cc:00:11:23"),
                             device("upper-mac", "eth7", mac.upper()), device("named", "eth7", mac)]}})
    api.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", exported["ResourceClaimTemplate"])
    made.pod(ns, exported["Pod"])

    def allocated() -> list[str]:
        claims = api.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims")["items"]
        return [r["device"] for c in claims
                for r in (c.get("status", {}).get("allocation") or {}).get("devices", {}).get("results", [])]

    assert eventually(allocated, "kube-scheduler allocates the pod's claim", timeout=60) == ["named"]
    # kube-scheduler writes the allocation before it binds the pod (PreBind, then Bind)
    assert eventually(lambda: api.get(f"{pods(ns)}/dra")["spec"].get("nodeName"), "kube-scheduler binds the pod",
                      timeout=60) == node.name
