"""Which networks an ADD attaches, from which source, with which configuration (no real plugins:
a recording executor stands in for them; tests/cni runs the real ones)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.daemon import agent
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.kube import objects

NAD_CONF = {"cniVersion": "1.0.0", "type": "bridge", "capabilities": {"portMappings": True, "mac": True}}


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        conf = json.loads(stdin)
        self.calls.append((env["CNI_COMMAND"], env.get("CNI_IFNAME", ""), conf))
        if env["CNI_COMMAND"] == "ADD":
            result = {"cniVersion": conf["cniVersion"], "interfaces": [{"name": env["CNI_IFNAME"], "sandbox": "/ns"}],
                      "ips": [{"address": f"10.0.{len(self.calls)}.2/24", "interface": 0}]}
            return 0, json.dumps(result).encode(), b""
        return 0, b"", b""

    def adds(self) -> list[tuple[str, str]]:
        return [(ifname, conf["name"]) for cmd, ifname, conf in self.calls if cmd == "ADD"]


def nad(name: str, namespace: str = "ns", config: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"kind": "NetworkAttachmentDefinition", "metadata": {"name": name, "namespace": namespace},
            "spec": {"config": json.dumps(config or NAD_CONF)}}


def podnetwork(name: str, nad_name: str, provider: str = "multinetwork.x-k8s.io/npwg-bridge") -> dict[str, Any]:
    return {"kind": "PodNetwork", "metadata": {"name": name},
            "spec": {"enabled": True, "provider": provider, "parametersRefs": [
                {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": nad_name, "namespace": "ns"}]}}


def pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}}}


def make(tmp_path: Path, objs: list[dict[str, Any]], default: Any = None) -> tuple[agent.Agent, Recorder]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "bridge").write_text("#!/bin/sh\n")
    (bin_dir / "bridge").chmod(0o755)
    rec = Recorder()
    config = agent.AgentConfig(socket_path=tmp_path / "s", cache_dir=tmp_path / "cache", bin_dirs=(bin_dir,),
                               conf_dir=tmp_path / "net.d", default_network=default)
    return agent.Agent(objects.MemoryObjects(objs), config, executor=rec), rec


ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0",
       "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"}
RUNTIME = {"cniVersion": "1.0.0", "name": "multinetwork", "type": "multinetwork",
           "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}}


async def add(a: agent.Agent) -> dict[str, Any] | None:
    return await a.handle(ENV, json.dumps(RUNTIME).encode())


async def test_without_a_default_conf_the_default_podnetworks_nad_is_attached_first(tmp_path: Path) -> None:
    a, rec = make(tmp_path, [pod({"k8s.v1.cni.cncf.io/networks": "blue"}), nad("kubenet"), nad("blue"),
                             podnetwork("default", "kubenet")])
    await add(a)
    assert rec.adds() == [("eth0", "kubenet"), ("net1", "blue")]
    await a.status.idle()  # written after the answer (bridge.agent.pods.publisher)
    status = json.loads((await a.objects.get_pod("ns", "p")).metadata.annotations["k8s.v1.cni.cncf.io/network-status"])
    assert [(s["name"], s["default"]) for s in status] == [("ns/kubenet", True), ("ns/blue", False)]
    assert await a.default_network_problem() is None


async def test_the_runtimes_runtime_config_reaches_the_default_network_only(tmp_path: Path) -> None:
    a, rec = make(tmp_path, [pod({"k8s.v1.cni.cncf.io/networks": "blue"}), nad("blue")],
                  default={"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge", "capabilities": {"portMappings": True}})
    await add(a)
    (_, _, default_conf), (_, _, blue_conf) = [c for c in rec.calls if c[0] == "ADD"]
    assert default_conf["runtimeConfig"] == {"portMappings": RUNTIME["runtimeConfig"]["portMappings"]}
    assert "runtimeConfig" not in blue_conf, "NPWG 7.5"


async def test_spec_style_networks_win_over_the_npwg_annotation_and_go_through_the_translation(tmp_path: Path) -> None:
    kep = [{"podNetworkName": "default"}, {"podNetworkName": "red", "interfaceName": "red0"}]
    a, rec = make(tmp_path, [pod({"multinetwork.x-k8s.io/networks": json.dumps(kep), "k8s.v1.cni.cncf.io/networks": "blue"}),
                             nad("red"), nad("blue"), podnetwork("red", "red")],
                  default={"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"})
    await add(a)
    assert rec.adds() == [("eth0", "kubenet"), ("red0", "red")]


async def test_an_attachment_with_selection_options_passes_its_per_pod_keys(tmp_path: Path) -> None:
    kep = [{"podNetworkName": "default"}, {"podNetworkAttachmentName": "db"}]
    attachment = {"kind": "PodNetworkAttachment", "metadata": {"name": "db", "namespace": "ns"},
                  "spec": {"podNetworkName": "red", "parametersRefs": [
                      {"group": "bridge.multinetwork.x-k8s.io", "kind": "NetworkSelectionOptions", "name": "db-opts"}]}}
    options = {"kind": "NetworkSelectionOptions", "metadata": {"name": "db-opts", "namespace": "ns"},
               "spec": {"mac": "02:00:00:00:00:09"}}
    a, rec = make(tmp_path, [pod({"multinetwork.x-k8s.io/networks": json.dumps(kep)}), nad("red"), podnetwork("red", "red"),
                             attachment, options], default={"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"})
    await add(a)
    (_, _, red_conf) = [c for c in rec.calls if c[0] == "ADD"][1]
    assert red_conf["runtimeConfig"] == {"mac": "02:00:00:00:00:09"}


def _attachment(name: str, network: str) -> dict[str, Any]:
    return {"kind": "PodNetworkAttachment", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"podNetworkName": network}}


ADMITTED = "multinetwork.x-k8s.io/attachment-networks"
KUBENET = {"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"}


async def test_an_attachment_replaced_after_admission_to_name_another_network_is_refused_before_any_plugin_runs(
    tmp_path: Path,
) -> None:
    # Admitted with `fast` naming `blue` (which the pod may use); `fast` was then deleted and
    # re-created naming `red`, before the pod started (docs/controller.md "Permission to use").
    kep = [{"podNetworkName": "default"}, {"podNetworkAttachmentName": "fast"}]
    annotations = {"multinetwork.x-k8s.io/networks": json.dumps(kep), ADMITTED: '{"fast":"blue"}'}
    a, rec = make(tmp_path, [pod(annotations), nad("blue"), nad("red"), podnetwork("blue", "blue"),
                             podnetwork("red", "red"), _attachment("fast", "red")], default=KUBENET)
    with pytest.raises(CNIError) as caught:
        await add(a)
    assert caught.value.code == ErrorCode.DELEGATION_FAILED  # the pod's networks cannot be translated
    assert "PodNetworkAttachmentChanged" in caught.value.msg
    assert ("PodNetworkAttachment ns/fast names PodNetwork 'red', but the pod was admitted with it naming 'blue'"
            in str(caught.value.details))
    assert rec.calls == [] and list(a.cache.container_ids()) == []


async def test_an_attachment_that_still_names_its_admitted_network_is_attached(tmp_path: Path) -> None:
    kep = [{"podNetworkName": "default"}, {"podNetworkAttachmentName": "fast"}]
    annotations = {"multinetwork.x-k8s.io/networks": json.dumps(kep), ADMITTED: '{"fast":"blue"}'}
    a, rec = make(tmp_path, [pod(annotations), nad("blue"), podnetwork("blue", "blue"), _attachment("fast", "blue")],
                  default=KUBENET)
    await add(a)
    assert rec.adds() == [("eth0", "kubenet"), ("net1", "blue")]


async def test_an_admission_record_that_cannot_be_read_attaches_nothing(tmp_path: Path) -> None:
    kep = [{"podNetworkName": "default"}, {"podNetworkAttachmentName": "fast"}]
    annotations = {"multinetwork.x-k8s.io/networks": json.dumps(kep), ADMITTED: '["fast"]'}
    a, rec = make(tmp_path, [pod(annotations), nad("blue"), podnetwork("blue", "blue"), _attachment("fast", "blue")],
                  default=KUBENET)
    with pytest.raises(CNIError) as caught:
        await add(a)
    assert caught.value.code == ErrorCode.INVALID_CONFIG and ADMITTED in caught.value.msg
    assert "must be a JSON object of strings" in str(caught.value.details)
    assert rec.calls == []


async def test_an_invalid_npwg_annotation_is_ignored_as_the_spec_says(tmp_path: Path) -> None:
    a, rec = make(tmp_path, [pod({"k8s.v1.cni.cncf.io/networks": '[{"name": "Not_A_Name"}]'})],
                  default={"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"})
    await add(a)
    assert rec.adds() == [("eth0", "kubenet")]


@pytest.mark.parametrize(
    ("objs", "needle"),
    [
        ([pod({"k8s.v1.cni.cncf.io/networks": "missing"})], "NetworkAttachmentDefinition ns/missing not found"),
        ([pod({"multinetwork.x-k8s.io/networks": '[{"podNetworkName": "ghost"}]'})], "PodNetworkNotFound"),
        ([pod({"multinetwork.x-k8s.io/networks": '[{"podNetworkName": "other"}]'}), podnetwork("other", "x", provider="example.com/p")],
         "NotBridgeProvider"),
        ([pod({"multinetwork.x-k8s.io/networks": '{"podNetworkName": "x"}'})], "must be a JSON list"),
        ([pod({"k8s.v1.cni.cncf.io/networks": '[{"name": "blue", "mac": "02:00:00:00:00:01"}]'}),
          nad("blue", config={"cniVersion": "1.0.0", "type": "bridge"})], "capability"),
    ],
)
async def test_a_network_that_cannot_be_attached_fails_the_add_before_any_plugin_runs(
    tmp_path: Path, objs: list[dict[str, Any]], needle: str
) -> None:
    a, rec = make(tmp_path, objs, default={"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"})
    with pytest.raises(CNIError) as caught:
        await add(a)
    assert needle in str(caught.value)
    assert rec.calls == [] and list(a.cache.container_ids()) == []


async def test_a_default_podnetwork_from_another_provider_is_the_nodes_network_and_without_one_says_so(
        tmp_path: Path) -> None:
    # Not the bridge's: the node's own CNI configuration (test_default_network_on_the_node.py), and
    # this node has none, so the problem names the directory and the ways out.
    a, _ = make(tmp_path, [pod(), nad("kubenet"), podnetwork("default", "kubenet", provider="example.com/p")])
    problem = await a.default_network_problem()
    assert problem and "example.com/p" in problem and str(tmp_path / "net.d") in problem
    assert "--default-network-conf" in problem


class FailingDel(Recorder):
    """Fails the DEL of one interface while `broken` is set."""

    def __init__(self, ifname: str) -> None:
        super().__init__()
        self.ifname = ifname
        self.broken = True

    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        if self.broken and env["CNI_COMMAND"] == "DEL" and env["CNI_IFNAME"] == self.ifname:
            self.calls.append(("DEL", env["CNI_IFNAME"], json.loads(stdin)))
            return 1, b'{"code": 11, "msg": "device busy"}', b""
        return await super().run(plugin, env, stdin, timeout)


async def test_del_tears_down_past_a_failure_reports_it_and_a_retry_finishes(tmp_path: Path) -> None:
    a, _ = make(tmp_path, [pod({"k8s.v1.cni.cncf.io/networks": "blue,red"}), nad("blue"), nad("red")],
                default={"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"})
    rec = FailingDel("net1")
    a.runner.executor = rec
    await add(a)
    with pytest.raises(CNIError) as caught:
        await a.handle({**ENV, "CNI_COMMAND": "DEL"}, b'{"cniVersion": "1.0.0"}')
    assert "DEL failed for 1 attachment(s)" in caught.value.msg and "ns/blue (net1)" in caught.value.details
    assert [ifname for cmd, ifname, _ in rec.calls if cmd == "DEL"] == ["net2", "net1", "eth0"], "NPWG 7.2: all attempted"
    record = a.cache.load("c1")
    assert record is not None and [x.ifname for x in record.attachments] == ["net1"]

    rec.broken = False
    rec.calls.clear()
    await a.handle({**ENV, "CNI_COMMAND": "DEL"}, b'{"cniVersion": "1.0.0"}')
    assert [ifname for cmd, ifname, _ in rec.calls if cmd == "DEL"] == ["net1"]
    assert a.cache.load("c1") is None


async def test_gc_tears_down_the_containers_the_runtime_no_longer_lists(tmp_path: Path) -> None:
    a, rec = make(tmp_path, [pod()], default={"cniVersion": "1.1.0", "name": "kubenet", "type": "bridge"})
    for cid in ("keep", "gone"):
        await a.handle({**ENV, "CNI_CONTAINERID": cid}, b'{"cniVersion": "1.1.0"}')
    rec.calls.clear()
    gc_conf = {"cniVersion": "1.1.0", "name": "multinetwork", "cni.dev/valid-attachments": [{"containerID": "keep", "ifname": "eth0"}]}
    await a.handle({"CNI_COMMAND": "GC"}, json.dumps(gc_conf).encode())
    assert [(cmd, conf["name"]) for cmd, _, conf in rec.calls] == [("DEL", "kubenet"), ("GC", "kubenet")]
    assert rec.calls[1][2]["cni.dev/valid-attachments"] == [{"containerID": "keep", "ifname": "eth0"}]
    assert list(a.cache.container_ids()) == ["keep"]
