"""Which allocated devices of a claim are this driver's on this node (bridge.dra.driver.claims), and the
record of prepared claims on disk (bridge.dracontract.state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.dra.driver import claims
from bridge.dracontract import state

DRIVER = "dra.multinetwork.x-k8s.io"
UID = "0b7e6c1e-7d8a-4c55-9d8e-2f0c6c0a1b2c"


def claim(*results: dict[str, str], uid: str = UID, node: str | None = "n1",
          allocated: bool = True) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if allocated:
        status["allocation"] = {"devices": {"results": list(results)}}
        if node is not None:
            status["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    return {"metadata": {"namespace": "ns", "name": "c", "uid": uid}, "status": status}


def result(request: str, device: str, *, pool: str = "n1", driver: str = DRIVER) -> dict[str, str]:
    return {"request": request, "driver": driver, "pool": pool, "device": device}


def test_the_drivers_devices_of_the_nodes_pool_with_their_requests() -> None:
    got = claims.allocated(claim(result("net0", "blue"), result("gpu", "g0", driver="gpu.example.com"),
                                 result("net1", "red"), result("net2", "blue")), uid=UID, driver=DRIVER, node="n1")
    assert got == [claims.Allocated(("net0", "net2"), "n1", "blue"), claims.Allocated(("net1",), "n1", "red")]


@pytest.mark.parametrize(("obj", "said"), [
    (claim(result("net0", "blue"), uid="other"), "deleted and made again"),
    (claim(allocated=False), "is not allocated"),
    (claim(result("net0", "blue"), node="n2"), "not for n1"),
    (claim(result("net0", "blue", pool="n2"), node=None), "another node's pool"),
    (claim(result("gpu", "g0", driver="gpu.example.com")), "no device of driver"),
    ({"metadata": {"namespace": "ns", "name": "c", "uid": UID},
      "status": {"allocation": {"devices": {"results": "net0"}}}}, "does not read as a resource.k8s.io/v1"),
], ids=["uid", "unallocated", "other-node", "other-pool", "other-driver", "malformed"])
def test_a_claim_that_is_not_this_nodes_is_refused_with_why(obj: dict[str, Any], said: str) -> None:
    with pytest.raises(claims.ClaimProblem, match=said) as caught:
        claims.allocated(obj, uid=UID, driver=DRIVER, node="n1")
    assert "ResourceClaim ns/c" in str(caught.value)


def test_null_lists_and_selectors_mean_what_their_absence_means() -> None:
    obj = claim(result("net0", "blue"), node=None)
    obj["status"]["allocation"]["nodeSelector"] = None
    assert claims.allocated(obj, uid=UID, driver=DRIVER, node="n1") == [claims.Allocated(("net0",), "n1", "blue")]


def prepared(uid: str = UID) -> state.PreparedClaim:
    return state.PreparedClaim(uid=uid, namespace="ns", name="c", prepared_at="2026-01-01T00:00:00Z", devices=[
        state.PreparedDevice(request_names=["net0"], pool="n1", device="blue", podnetwork="blue")])


def test_a_prepared_claim_is_kept_across_stores_and_forgotten_once(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    state.Store(folder).put(prepared())
    assert (folder.stat().st_mode & 0o777) == 0o700
    again = state.Store(folder)  # a restarted driver
    assert again.uids() == [UID]
    assert again.get(UID) == prepared()
    assert again.remove(UID) is True
    assert again.remove(UID) is False
    assert again.get(UID) is None
    assert list(folder.iterdir()) == []


def test_a_uid_that_could_name_another_file_is_refused(tmp_path: Path) -> None:
    store = state.Store(tmp_path)
    for uid in ("../x", "", "a/b", ".hidden"):
        with pytest.raises(state.StateError, match="not a Kubernetes uid"):
            store.get(uid)
    assert list(tmp_path.iterdir()) == []


def test_an_unreadable_record_is_an_error_that_names_the_file(tmp_path: Path) -> None:
    (tmp_path / f"{UID}.json").write_text("{")
    with pytest.raises(state.StateError, match=f"{UID}.json is not a prepared claim"):
        state.Store(tmp_path).get(UID)
