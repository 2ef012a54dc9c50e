"""What the driver's watch callbacks read from served objects (bridge.dra.driver.publisher, .reporter):
the Node's annotations decide whether its slices are recomputed, a pod with claims is queued by its key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bridge.dra.driver import publisher, reporter
from bridge.dracontract import state

NODE_ANNOTATION = "multinetwork.x-k8s.io/podnetworks"


def node(annotations: dict[str, str] | None, ready: str = "True") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "n1", "uid": "u-n1"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def test_a_node_heartbeat_does_not_recompute_the_slices_and_an_annotation_change_does() -> None:
    pub = publisher.Publisher(None, driver="d", node="n1")  # type: ignore[arg-type]  # the API is not called
    pub._node_event("ADDED", node({NODE_ANNOTATION: '["blue"]'}))
    assert pub._dirty.is_set()
    pub._dirty.clear()
    pub._node_event("MODIFIED", node({NODE_ANNOTATION: '["blue"]'}, ready="Unknown"))
    assert not pub._dirty.is_set()
    pub._node_event("MODIFIED", node({NODE_ANNOTATION: '["blue", "red"]'}))
    assert pub._dirty.is_set()
    pub._dirty.clear()
    pub._node_event("MODIFIED", node(None))
    assert pub._dirty.is_set()
    pub._dirty.clear()
    pub._node_event("DELETED", node(None))
    assert pub._dirty.is_set() and pub.node_obj is None


def test_a_pod_with_claims_is_queued_by_namespace_and_name_and_one_without_is_not(tmp_path: Path) -> None:
    rep = reporter.Reporter(None, state.Store(tmp_path), driver="d", node="n1")  # type: ignore[arg-type]
    rep._event("ADDED", {"metadata": {"namespace": "ns", "name": "p"}, "spec": {}})
    assert rep._pending == {}
    pod = {"metadata": {"namespace": "ns", "name": "p"},
           "spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "shared"}]}}
    rep._event("MODIFIED", pod)
    assert rep._pending == {"ns/p": pod} and rep._wake.is_set()
