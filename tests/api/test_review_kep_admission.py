"""Review findings on pod admission's HTTP face (httpx against podnetwork.admission.app).

A malformed AdmissionReview gets HTTP 400 with a message, never a 500.
"""

from __future__ import annotations

import httpx
import pytest

from podnetwork import admission


def _namespaces(name: str) -> dict[str, object] | None:
    # As the controller's cache: a dict lookup (which raises TypeError for unhashable keys).
    return {"ns": {"metadata": {"name": "ns"}}}.get(name)


@pytest.mark.parametrize("namespace", [["ns"], {"name": "ns"}, 5])
@pytest.mark.parametrize("path", [admission.MUTATE_PATH, admission.VALIDATE_PATH])
async def test_an_admission_review_whose_namespace_is_not_a_string_is_a_400(path, namespace):
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "namespace": namespace, "operation": "CREATE",
        "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": {"metadata": {"name": "p"}}}}
    api = admission.app(_namespaces)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://x") as client:
        resp = await client.post(path, json=review)
    assert resp.status_code == 400, resp.text
    assert "namespace" in resp.json()["detail"]
