"""What the agent does with the inputs its NPWG peers accept and the spec leaves open: CNI 1.1
`cniVersions` (chosen as libcni chooses), results of an unknown version, NADs with an empty
`name`, reserved selection keys the spec does not define, results without a sandbox interface.
No real plugins: a recording executor stands in for them (tests/cni runs the real ones)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.delegates import conflist
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from tests.unit.agent.test_networks import Recorder, add, make, nad, pod

KUBENET = {"cniVersion": "1.0.0", "name": "kubenet", "type": "bridge"}

# --- Version selection ------------------------------------------------------------------------
# Facts from containernetworking/cni libcni/conf_test.go, Describe("Version selection"): the
# configuration list, and the version libcni runs it at (or "error").
_LIST = {"name": "test", "plugins": [{"type": "foo"}]}
VERSION_CASES = [
    pytest.param({**_LIST, "cniVersions": ["1.1.0", "0.4.0", "1.0.0"]}, "1.1.0",
                 id="correctly selects the maximum version"),
    pytest.param({**_LIST, "cniVersions": ["99.0.0", "1.1.0", "0.4.0", "1.0.0"]}, "1.1.0",
                 id="selects the highest version supported"),
    pytest.param({**_LIST, "cniVersions": ["1.1.0", "0.4.0", "1.0.f"]}, ErrorCode.INVALID_CONFIG,
                 id="fails when invalid versions are specified"),
    pytest.param({**_LIST, "cniVersion": "1.0.0", "cniVersions": ["0.1.0", "0.4.0"]}, "1.0.0",
                 id="merges cniVersions and cniVersion"),
    # libcni: "falls back to cniVersion" loads 1.2.3 and fails when a plugin runs; the agent
    # chooses it too, and conflist.load refuses it before anything runs.
    pytest.param({**_LIST, "cniVersion": "1.2.3"}, "1.2.3", id="falls back to cniVersion"),
    # libcni: "handles an empty cniVersions array" gives the version "" and leaves the failure
    # to the plugin; the agent refuses a list that gives it no version it speaks.
    pytest.param({**_LIST, "cniVersions": []}, ErrorCode.INCOMPATIBLE_VERSION,
                 id="handles an empty cniVersions array"),
    pytest.param({**_LIST, "cniVersions": ["2.0.0"]}, ErrorCode.INCOMPATIBLE_VERSION,
                 id="only versions newer than the agent speaks"),
    pytest.param({**_LIST, "cniVersions": "1.0.0"}, ErrorCode.INVALID_CONFIG, id="cniVersions is not a list"),
]


@pytest.mark.parametrize(("conf", "expected"), VERSION_CASES)
def test_libcni_version_selection_cases(conf: dict[str, Any], expected: str | int) -> None:
    if isinstance(expected, str):
        assert conflist.chosen_version(conf) == expected
        return
    with pytest.raises(CNIError) as caught:
        conflist.chosen_version(conf)
    assert caught.value.code == expected
    assert "cniVersion" in caught.value.msg + caught.value.details


def test_a_list_chosen_at_a_version_newer_than_the_agent_speaks_is_refused_at_load() -> None:
    with pytest.raises(CNIError) as caught:
        conflist.load({**_LIST, "cniVersion": "1.2.3"})
    assert caught.value.code == ErrorCode.INCOMPATIBLE_VERSION


async def test_a_nad_with_cni_versions_runs_every_plugin_at_the_highest_version_the_agent_speaks(
    tmp_path: Path,
) -> None:
    blue = {"cniVersions": ["0.4.0", "1.1.0", "9.0.0"], "name": "blue",
            "plugins": [{"type": "bridge"}, {"type": "bridge"}]}
    a, rec = make(tmp_path, [pod({"k8s.v1.cni.cncf.io/networks": "blue"}), nad("blue", config=blue)], default=KUBENET)
    await add(a)
    blue_calls = [conf for cmd, _, conf in rec.calls if cmd == "ADD" and conf["name"] == "blue"]
    assert [conf["cniVersion"] for conf in blue_calls] == ["1.1.0", "1.1.0"]
    assert all("cniVersions" not in conf for conf in blue_calls)


async def test_a_default_network_given_by_cni_versions_makes_the_agents_conflist_speak_the_chosen_version(
    tmp_path: Path,
) -> None:
    a, _ = make(tmp_path, [pod()], default={"cniVersions": ["1.0.0", "0.4.0"], "name": "kubenet", "type": "bridge"})
    assert await a.default_network_problem() is None
    assert a.own_conflist({"cniVersions": ["1.0.0", "0.4.0"], "name": "kubenet", "type": "bridge"})["cniVersion"] == "1.0.0"


# --- Results of an unknown version ------------------------------------------------------------


class Answering(Recorder):
    """Answers ADD with `result` (for the interface named `on`, else as Recorder does)."""

    def __init__(self, result: dict[str, Any], on: str = "net1") -> None:
        super().__init__()
        self.result = result
        self.on = on

    async def run(self, plugin: Path, env: Mapping[str, str], stdin: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        if env["CNI_COMMAND"] == "ADD" and env["CNI_IFNAME"] == self.on:
            self.calls.append(("ADD", env["CNI_IFNAME"], json.loads(stdin)))
            return 0, json.dumps(self.result).encode(), b""
        return await super().run(plugin, env, stdin, timeout)


@pytest.mark.parametrize("version", ["1.2.3", "1.0"])
async def test_a_result_of_a_cni_version_the_agent_does_not_read_fails_the_add_and_rolls_back(
    tmp_path: Path, version: str
) -> None:
    a, _ = make(tmp_path, [pod({"k8s.v1.cni.cncf.io/networks": "blue"}), nad("blue")], default=KUBENET)
    rec = Answering({"cniVersion": version, "interfaces": [{"name": "net1", "sandbox": "/ns"}],
                     "ips": [{"address": "10.0.9.2/24", "interface": 0}]})
    a.runner.executor = rec
    with pytest.raises(CNIError) as caught:
        await add(a)
    assert caught.value.code == ErrorCode.INCOMPATIBLE_VERSION and repr(version) in caught.value.msg
    assert [(cmd, ifname) for cmd, ifname, _ in rec.calls if cmd == "DEL"] == [("DEL", "net1"), ("DEL", "eth0")]
    await a.status.idle()
    pod_now = await a.objects.get_pod("ns", "p")
    assert "k8s.v1.cni.cncf.io/network-status" not in (pod_now.metadata.annotations or {})


# --- 3.4.2: an empty name ---------------------------------------------------------------------


async def test_spec_3_4_2_a_nad_config_with_an_empty_name_runs_under_the_nads_name(tmp_path: Path) -> None:
    a, rec = make(tmp_path, [pod({"k8s.v1.cni.cncf.io/networks": "blue"}),
                             nad("blue", config={"cniVersion": "1.0.0", "name": "", "type": "bridge"})],
                  default=KUBENET)
    await add(a)
    assert rec.adds() == [("eth0", "kubenet"), ("net1", "blue")]


# --- 4.1.2.1: reserved keys the spec does not define --------------------------------------------


async def test_spec_4_1_2_1_pre_spec_keys_are_ignored_and_the_agent_logs_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    selection = [{"name": "blue", "interfaceRequest": "eth9", "ipRequest": ["10.0.0.5/24"]}]
    a, rec = make(tmp_path, [pod({"k8s.v1.cni.cncf.io/networks": json.dumps(selection)}), nad("blue")],
                  default=KUBENET)
    with caplog.at_level(logging.WARNING, logger="bridge.agent.cni.selection"):
        await add(a)
    assert rec.adds() == [("eth0", "kubenet"), ("net1", "blue")], "attached, the ignored keys doing nothing"
    (warning,) = [r.getMessage() for r in caplog.records if "ignoring key" in r.getMessage()]
    assert "pod ns/p" in warning and "'interfaceRequest'" in warning and "'ipRequest'" in warning
    assert "4.1.2.1" in warning


# --- 5.3.2: no sandbox interface ----------------------------------------------------------------


async def test_spec_5_3_2_a_result_without_a_sandbox_interface_gives_a_status_without_interface_or_mac(
    tmp_path: Path,
) -> None:
    a, _ = make(tmp_path, [pod({"k8s.v1.cni.cncf.io/networks": "blue"}), nad("blue")], default=KUBENET)
    a.runner.executor = Answering({"cniVersion": "1.0.0", "interfaces": [{"name": "host9", "mac": "02:00:00:00:00:09"}],
                            "ips": [{"address": "10.0.9.2/24"}]})
    await add(a)
    await a.status.idle()  # written after the answer (bridge.agent.pods.publisher)
    annotations = (await a.objects.get_pod("ns", "p")).metadata.annotations or {}
    blue = json.loads(annotations["k8s.v1.cni.cncf.io/network-status"])[1]
    assert blue == {"name": "ns/blue", "ips": ["10.0.9.2/24"], "default": False}


