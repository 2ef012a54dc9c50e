"""The committed `_pb2` modules are what protoc makes of the committed `.proto` files, and the protos carry
the kubelet v1.36.2 definitions' names and numbers (../shared/specs/kubelet-plugins/)."""

from __future__ import annotations

from pathlib import Path

from bridge.dra.driver.protos import HERE, dra_v1_pb2, generate, pluginregistration_v1_pb2


def test_the_generated_modules_match_the_protos(tmp_path: Path) -> None:
    written = generate(tmp_path)
    assert [p.name for p in written] == ["dra_v1_pb2.py", "dra_v1_pb2.pyi", "pluginregistration_v1_pb2.py",
                                         "pluginregistration_v1_pb2.pyi"]
    for path in written:
        assert path.read_text() == (HERE / path.name).read_text(), (
            f"{path.name} differs from what protoc makes: run `python -m bridge.dra.driver.protos`")


def fields(message: object) -> list[tuple[str, int]]:
    descriptor = message.DESCRIPTOR  # type: ignore[attr-defined]
    return [(f.name, f.number) for f in descriptor.fields]


def test_the_wire_names_and_numbers_are_the_kubelets() -> None:
    assert dra_v1_pb2.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1"
    assert [m.name for m in dra_v1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"].methods] == [
        "NodePrepareResources", "NodeUnprepareResources"]
    assert fields(dra_v1_pb2.Claim) == [("namespace", 1), ("uid", 2), ("name", 3)]
    assert fields(dra_v1_pb2.Device) == [("request_names", 1), ("pool_name", 2), ("device_name", 3),
                                         ("cdi_device_ids", 4), ("share_id", 5)]
    assert fields(dra_v1_pb2.NodePrepareResourceResponse) == [("devices", 1), ("error", 2)]
    assert fields(dra_v1_pb2.NodeUnprepareResourceResponse) == [("error", 1)]
    assert pluginregistration_v1_pb2.DESCRIPTOR.package == "pluginregistration"
    assert fields(pluginregistration_v1_pb2.PluginInfo) == [("type", 1), ("name", 2), ("endpoint", 3),
                                                            ("supported_versions", 4)]
    assert fields(pluginregistration_v1_pb2.RegistrationStatus) == [("plugin_registered", 1), ("error", 2)]
