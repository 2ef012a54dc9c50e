"""The driver's read views (bridge.dra.driver.views) use the API's JSON names: each field is one of the
v1 type's it reads (lightkube's models, generated from the Kubernetes OpenAPI document). They read
leniently, so no field is required; tests/unit/dra/test_schema_shape.py checks the written shapes."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from lightkube.models import core_v1, resource_v1
from pydantic import BaseModel

from bridge.dra.driver import views

PAIRS: list[tuple[type[BaseModel], Any]] = [
    (views.ResourceClaimStatus, resource_v1.ResourceClaimStatus),
    (views.AllocationResult, resource_v1.AllocationResult),
    (views.DeviceAllocationResult, resource_v1.DeviceAllocationResult),
    (views.DeviceRequestAllocationResult, resource_v1.DeviceRequestAllocationResult),
    (views.NodeSelector, core_v1.NodeSelector),
    (views.NodeSelectorTerm, core_v1.NodeSelectorTerm),
    (views.NodeSelectorRequirement, core_v1.NodeSelectorRequirement),
    (views.ResourceSliceSpec, resource_v1.ResourceSliceSpec),
    (views.ResourcePool, resource_v1.ResourcePool),
    (views.Device, resource_v1.Device),
    (views.PodSpec, core_v1.PodSpec),
    (views.PodStatus, core_v1.PodStatus),
    (views.ClaimReference, core_v1.PodResourceClaimStatus),
    (views.ClaimReference, core_v1.PodResourceClaim),
]


@pytest.mark.parametrize(("ours", "api"), PAIRS, ids=[f"{p[0].__name__}-{p[1].__name__}" for p in PAIRS])
def test_field_names_are_the_apis(ours: type[BaseModel], api: Any) -> None:
    api_fields = {f.encode_name for f in msgspec.structs.fields(api)}
    our_fields = {info.alias or name for name, info in ours.model_fields.items()}
    assert our_fields <= api_fields, f"not in the API: {our_fields - api_fields}"
    assert not [name for name, info in ours.model_fields.items() if info.is_required()]


def test_null_reads_as_absent_and_unknown_keys_are_dropped() -> None:
    got = views.ResourceSliceSpec.model_validate({"devices": None, "pool": {"name": "n1", "extra": 1}, "x": 2})
    assert got == views.ResourceSliceSpec(pool=views.ResourcePool(name="n1"))
