"""Property: for random valid PodNetworks and pods that DRANET can serve, the export parses
back into the DRA models unchanged, and reading it back gives each pod the same networks
with the same interface names, on classes that select the NAD's device."""

from __future__ import annotations

import json
from typing import Any

import celpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.dra import command, export
from bridge.dra import objects as dra
from podnetwork.cli import manifests
from tests.unit.dra.dra_support import nad, pod, podnetwork

_CEL = celpy.Environment()
_LABEL = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)
_IFNAME = st.from_regex(r"[a-z][a-z0-9]{0,9}", fullmatch=True)


@st.composite
def _network(draw: st.DrawFn) -> dict[str, Any]:
    device = draw(_IFNAME)
    plugin = draw(st.sampled_from(["host-device", "ipvlan"]))
    config: dict[str, Any] = (
        {"type": "host-device", "device": device}
        if plugin == "host-device"
        else {"type": "ipvlan", "master": device, "mode": draw(st.sampled_from(["l2", "l3", "l3s"]))}
    )
    ipam = draw(st.sampled_from(["none", "static"] + (["dhcp"] if plugin == "host-device" else [])))
    if ipam == "static":
        octet = draw(st.integers(1, 254))
        config["ipam"] = {"type": "static", "addresses": [{"address": f"10.{octet}.0.2/24"}]}
    elif ipam == "dhcp":
        config["ipam"] = {"type": "dhcp"}
    return {"device": device, "config": config}


@st.composite
def _inventory(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, list[tuple[str, str | None]]]]:
    names = draw(st.lists(_LABEL.filter(lambda n: n != "default"), min_size=1, max_size=4, unique=True))
    objs: list[dict[str, Any]] = []
    devices: dict[str, str] = {}
    for name in names:
        net = draw(_network())
        objs += [nad(name, net["config"]), podnetwork(name, name)]
        devices[name] = net["device"]
    pods: dict[str, list[tuple[str, str | None]]] = {}
    for pod_name in draw(st.lists(_LABEL, min_size=1, max_size=3, unique=True)):
        chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True))
        ifnames = draw(st.lists(st.one_of(st.none(), _IFNAME), min_size=len(chosen), max_size=len(chosen)))
        seen: set[str] = set()
        entries: list[tuple[str, str | None]] = []
        for net_name, ifname in zip(chosen, ifnames, strict=True):
            keep = ifname if ifname and ifname not in seen and ifname != "eth0" else None
            if keep:
                seen.add(keep)
            entries.append((net_name, keep))
        nets = [{"podNetworkName": "default"}] if draw(st.booleans()) else []
        nets += [{"podNetworkName": n, **({"interfaceName": i} if i else {})} for n, i in entries]
        objs.append(pod(pod_name, nets))
        pods[pod_name] = entries
    return objs, devices, pods


def _selects(cls: dict[str, Any], device: dict[str, Any]) -> bool:
    for selector in cls["spec"]["selectors"]:
        program = _CEL.program(_CEL.compile(selector["cel"]["expression"]))
        if not bool(program.evaluate({"device": celpy.json_to_cel(device)})):
            return False
    return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_inventory())
def test_the_export_parses_round_trips_and_reads_back_to_the_same_networks(
    case: tuple[list[dict[str, Any]], dict[str, str], dict[str, list[tuple[str, str | None]]]],
) -> None:
    objs, devices, pods = case
    inventory = export.Inventory()
    for obj in objs:
        inventory.add(obj)
    result = export.export(inventory)
    assert result.unexpressible == []

    loaded = manifests.load_text(command.dump_yaml(result.documents()), "export.yaml")
    assert loaded.errors == []
    docs = [d.obj for d in loaded.documents]
    assert docs == result.documents()
    classes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "DeviceClass"}
    templates = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceClaimTemplate"}
    for d in classes.values():
        assert dra.DeviceClass.model_validate(d).to_dict() == d
    for d in templates.values():
        assert dra.ResourceClaimTemplate.model_validate(d).to_dict() == d
    assert set(classes) == set(devices)
    for name, device in devices.items():
        assert _selects(classes[name], {"driver": "dra.net", "attributes": {"dra.net": {"ifName": device}}})
        assert not _selects(classes[name], {"driver": "dra.net", "attributes": {"dra.net": {"ifName": device + "x"}}})

    read_back: dict[str, list[tuple[str, str | None]]] = {}
    for d in docs:
        if d["kind"] != "Pod":
            continue
        assert "annotations" not in d["metadata"]
        entries = []
        for claim in d["spec"]["resourceClaims"]:
            template = templates[claim["resourceClaimTemplateName"]]
            devices_spec = template["spec"]["spec"]["devices"]
            (request,) = devices_spec["requests"]
            (config,) = devices_spec["config"]
            assert config["requests"] == [request["name"]]
            params = dra.DranetNetworkConfig.model_validate(config["opaque"]["parameters"])
            entries.append((request["exactly"]["deviceClassName"], params.interface.name))
        read_back[d["metadata"]["name"]] = entries
    assert read_back == pods
    assert json.dumps(docs)  # plain JSON values only


_PLUGINS = st.sampled_from([
    {"type": "bridge", "bridge": "br0", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}},
    {"type": "macvlan", "master": "eth0", "mode": "bridge"},
    {"type": "host-device", "device": "ens5"},
    {"type": "ipvlan", "master": "ens6"},
    {"plugins": [{"type": "macvlan", "master": "eth0"}, {"type": "tuning", "mtu": 1400}]},
])


@settings(max_examples=40, deadline=None)
@given(st.lists(_PLUGINS, min_size=1, max_size=4), st.data())
def test_the_cni_driver_carries_every_nad_configuration_as_is(configs: list[dict[str, Any]], data: st.DataObject) -> None:
    objs: list[dict[str, Any]] = []
    for i, config in enumerate(configs):
        objs += [nad(f"n{i}", config), podnetwork(f"n{i}", f"n{i}")]
    chosen = data.draw(st.lists(st.integers(0, len(configs) - 1), min_size=1, unique=True))
    objs.append(pod("p", [{"podNetworkName": f"n{i}", "interfaceName": f"if{i}"} for i in chosen]))
    inventory = export.Inventory()
    for obj in objs:
        inventory.add(obj)
    result = export.export(inventory, export.Settings(driver=export.CNI_DRIVER))
    assert result.unexpressible == []
    templates = {t.metadata.name: t for t in result.templates}
    (workload,) = result.workloads
    for i, claim in zip(chosen, workload.claims, strict=True):
        devices = templates[claim.template].spec.spec.devices
        assert devices is not None and devices.config is not None and devices.config[0].opaque is not None
        params = dra.CniParameters.model_validate(devices.config[0].opaque.parameters)
        assert params.if_name == f"if{i}"
        assert params.config == json.loads(nad(f"n{i}", configs[i])["spec"]["config"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_PLUGINS, st.booleans()), min_size=1, max_size=4), st.data())
def test_each_workload_is_exported_whole_or_reported_and_no_template_is_left_over(
    nets: list[tuple[dict[str, Any], bool]], data: st.DataObject
) -> None:
    objs: list[dict[str, Any]] = []
    for i, (config, enabled) in enumerate(nets):
        objs += [nad(f"n{i}", config), podnetwork(f"n{i}", f"n{i}", enabled=enabled)]
    pods = data.draw(st.lists(st.lists(st.integers(0, len(nets) - 1), min_size=1, unique=True), max_size=4))
    for k, chosen in enumerate(pods):
        objs.append(pod(f"p{k}", [{"podNetworkName": f"n{i}"} for i in chosen]))
    inventory = export.Inventory()
    for obj in objs:
        inventory.add(obj)
    result = export.export(inventory)
    exported = {str(w.ref) for w in result.workloads}
    reported = {str(u.ref) for u in result.unexpressible if u.ref.kind == "Pod"}
    assert exported | reported == {f"Pod default/p{k}" for k in range(len(pods))}
    assert not exported & reported
    used = {c.template for w in result.workloads for c in w.claims}
    assert {t.metadata.name for t in result.templates} == used
    classes = {c.metadata.name for c in result.device_classes}
    assert {c.pod_network for w in result.workloads for c in w.claims} <= classes
