"""The kubelet's plugin APIs as protobuf messages: `dra_v1_pb2` (service DRAPlugin, v1) and
`pluginregistration_v1_pb2` (service Registration).

The `.proto` files beside this module are ours, written from the kubelet v1.36.2 definitions'
names and numbers (../shared/specs/kubelet-plugins/); the `_pb2` modules are protoc's output,
committed so that running the driver needs no compiler. `python -m bridge.dra.driver.protos`
regenerates them (grpcio-tools, a test dependency); tests/unit/dra/driver/test_protos.py fails when
they differ from what it generates. Only messages are generated: the services are wired by hand in
`bridge.dra.driver.wire`, typed, from the method paths.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTOS = ("dra_v1.proto", "pluginregistration_v1.proto")


def generate(out: Path) -> list[Path]:
    """protoc's Python modules and stubs of `PROTOS` written into `out`; the paths written."""
    # a test dependency: only regeneration needs it
    from grpc_tools import protoc  # type: ignore[import-untyped]

    args = ["protoc", f"-I{HERE}", f"--python_out={out}", f"--pyi_out={out}",
            *(str(HERE / p) for p in PROTOS)]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed: {' '.join(args)}")
    return sorted(p for p in out.iterdir() if p.name.endswith(("_pb2.py", "_pb2.pyi")))


__all__ = ["HERE", "PROTOS", "generate"]
