"""The emitted objects have the shape of the DRA v1 API: field names and required fields.

The reference is lightkube's `resource_v1` and `core_v1` models, generated from the
Kubernetes OpenAPI document (lightkube-models 1.37): each field of those msgspec structs has its JSON
name, and a field without a default is required. Each of our models must use only
those names and require at least what the API requires; every exported object must
load into lightkube's model and dump back unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from lightkube.models import core_v1, resource_v1
from lightkube.resources import resource_v1 as resources
from pydantic import BaseModel

from bridge.dra import export
from bridge.dra import objects as dra
from podnetwork.cli import manifests
from podnetwork.ground import workloads

EXAMPLES = Path(__file__).parents[3] / "examples" / "dra"

#: Our model -> the API type it stands for.
PAIRS: list[tuple[type[BaseModel], Any]] = [
    (dra.DeviceClass, resources.DeviceClass),
    (dra.DeviceClassSpec, resource_v1.DeviceClassSpec),
    (dra.DeviceSelector, resource_v1.DeviceSelector),
    (dra.CELDeviceSelector, resource_v1.CELDeviceSelector),
    (dra.DeviceClassConfiguration, resource_v1.DeviceClassConfiguration),
    (dra.OpaqueDeviceConfiguration, resource_v1.OpaqueDeviceConfiguration),
    (dra.ResourceClaimTemplate, resources.ResourceClaimTemplate),
    (dra.ResourceClaimTemplateSpec, resource_v1.ResourceClaimTemplateSpec),
    (dra.ResourceClaimSpec, resource_v1.ResourceClaimSpec),
    (dra.DeviceClaim, resource_v1.DeviceClaim),
    (dra.DeviceRequest, resource_v1.DeviceRequest),
    (dra.ExactDeviceRequest, resource_v1.ExactDeviceRequest),
    (dra.DeviceClaimConfiguration, resource_v1.DeviceClaimConfiguration),
    (dra.NetworkDeviceData, resource_v1.NetworkDeviceData),
    (dra.PodResourceClaim, core_v1.PodResourceClaim),
]


def _api_fields(cls: Any) -> dict[str, bool]:
    """JSON name -> required, for a lightkube model (a msgspec Struct)."""
    return {f.encode_name: f.required for f in msgspec.structs.fields(cls)}


def _our_fields(model: type[BaseModel]) -> dict[str, bool]:
    return {info.alias or name: info.is_required() for name, info in model.model_fields.items()}


@pytest.mark.parametrize(("ours", "api"), PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_field_names_are_the_apis_and_required_fields_are_required(ours: type[BaseModel], api: Any) -> None:
    api_fields = _api_fields(api)
    our_fields = _our_fields(ours)
    assert set(our_fields) <= set(api_fields), f"not in the API: {set(our_fields) - set(api_fields)}"
    required = {name for name, req in api_fields.items() if req}
    assert required <= set(our_fields), f"required by the API, missing: {required - set(our_fields)}"
    for name in required:
        # apiVersion/kind have defaults in our models (the one value they may take).
        assert our_fields[name] or name in ("apiVersion", "kind"), f"{name} is required by the API"


def _exported(driver: str) -> export.Export:
    inventory = export.Inventory()
    for doc in manifests.load([str(EXAMPLES)]):
        inventory.add(doc.obj)
    return export.export(inventory, export.Settings(driver=driver))


@pytest.mark.parametrize("driver", [export.DRANET_DRIVER])
def test_every_exported_object_loads_into_the_api_model_unchanged(driver: str) -> None:
    result = _exported(driver)
    assert result.device_classes and result.templates and result.workloads
    for obj in result.documents():
        if obj["kind"] == "DeviceClass":
            assert resources.DeviceClass.from_dict(obj).to_dict() == obj
        elif obj["kind"] == "ResourceClaimTemplate":
            assert resources.ResourceClaimTemplate.from_dict(obj).to_dict() == obj
        else:
            for claim in _pod_spec(obj)["resourceClaims"]:
                assert core_v1.PodResourceClaim.from_dict(claim).to_dict() == claim
    for entry in result.network_data:
        data = entry.data.to_dict()
        assert resource_v1.NetworkDeviceData.from_dict(data).to_dict() == data


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    path = workloads.KINDS[workloads.WorkloadKind(obj["kind"])].template_path
    node = obj
    for key in path:
        node = node[key]
    spec: dict[str, Any] = node["spec"]
    return spec


def test_the_models_refuse_a_misspelt_field() -> None:
    with pytest.raises(ValueError, match="deviceclassName"):
        dra.ExactDeviceRequest.model_validate({"deviceclassName": "x"})
    with pytest.raises(ValueError, match="interfacename"):
        dra.NetworkDeviceData.model_validate({"interfacename": "net1"})


def test_network_data_keeps_the_kep_4817_limits() -> None:
    with pytest.raises(ValueError, match="16"):
        dra.NetworkDeviceData(ips=[f"10.0.0.{i}/24" for i in range(17)])
