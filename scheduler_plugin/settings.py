"""Settings of the scheduler extender, and the `--feature-gates` syntax of Kubernetes components."""

from __future__ import annotations

from dataclasses import dataclass

from podnetwork.ground import constants

#: kube-scheduler sends whole NodeLists when `nodeCacheCapable` is false; 16 MiB holds
#: several thousand nodes and stops a runaway client from exhausting memory.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024

#: Connections served at once, idle keep-alive ones included; a request on one more gets
#: HTTP 503. kube-scheduler asks one question at a time (its scheduling cycle is serial)
#: over a couple of kept-alive connections; with probes and scrapes, 16 leaves room, and
#: bounds the memory of requests in flight to 16 bodies.
DEFAULT_MAX_CONNECTIONS = 16

#: Feature gates this component knows, with their defaults (KEP "Feature gate").
KNOWN_FEATURE_GATES: dict[str, bool] = {constants.FEATURE_GATE: True}


@dataclass(frozen=True)
class Settings:
    """How the extender behaves. Every field can be set from `podnetwork scheduler-extender`."""

    multi_network: bool = True
    """The `MultiNetwork` feature gate. Default true. When false, `/filter` passes every
    node for every pod, as kube-scheduler would without the KEP."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Largest request body accepted, in bytes. Default 16 MiB. Larger bodies get HTTP 413
    before any of them is parsed."""

    baseline_endpoint: bool = False
    """Serve `POST /baseline/filter`, which parses the request like `/filter` and passes
    every node. Default false. Only the benchmark turns it on, to measure the cost of the
    decision against the cost of the protocol."""


def parse_feature_gates(text: str) -> dict[str, bool]:
    """Parse `Name=true,Other=false` as Kubernetes components do; unknown names are errors."""
    gates = dict(KNOWN_FEATURE_GATES)
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip().lower()
        if not sep or value not in ("true", "false"):
            raise ValueError(f"feature gate {item!r} must look like Name=true or Name=false")
        if name not in KNOWN_FEATURE_GATES:
            known = ", ".join(sorted(KNOWN_FEATURE_GATES))
            raise ValueError(f"unknown feature gate {name!r}; known gates: {known}")
        gates[name] = value == "true"
    return gates
