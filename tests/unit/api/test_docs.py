"""docs/api.md stays the reference of the models: it names every field, limit,
condition, reason and annotation, and its error examples are what the code says."""

from __future__ import annotations

import json

import pytest

from podnetwork.ground import constants
from podnetwork.kep import api, validation
from tests.unit.crd_support import ROOT

DOC = (ROOT / "docs" / "api.md").read_text()
MODELS = [api.PodNetworkSpec, api.PodNetworkAttachmentSpec, api.ParametersRef, api.Condition,
          api.Network, api.PodIP, api.Status]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_field_of_the_models_is_documented_in_a_table_row(model):
    for name, info in model.model_fields.items():
        assert f"| `{info.alias or name}` |" in DOC, f"{model.__name__}.{info.alias or name}"


def test_limits_of_the_models_are_the_documented_ones():
    def limit(model: type, field: str, kind: str) -> int:
        for meta in model.model_fields[field].metadata:
            if hasattr(meta, kind):
                return getattr(meta, kind)
        raise AssertionError(f"{model.__name__}.{field} has no {kind}")

    assert limit(api.PodNetworkSpec, "provider", "max_length") == 253
    assert "1..253 characters" in DOC
    assert limit(api.Status, "conditions", "max_length") == 5
    assert "at most 5" in DOC
    assert api.MAX_PARAMETERS_REFS == 16
    assert "at most 16" in DOC
    assert validation.LINUX_IFNAME_MAX_BYTES == 15
    assert validation.WINDOWS_IFNAME_MAX_CHARS == 255
    assert "1..15 bytes" in DOC and "1..255 characters" in DOC


def test_every_condition_type_and_reason_is_documented():
    for value in [*constants.ConditionType, *constants.ReadyReason, *constants.InUseReason]:
        assert f"`{value.value}`" in DOC, value


def test_every_annotation_finalizer_and_name_is_documented():
    for name in (
        constants.NETWORKS_ANNOTATION, constants.POD_IPS_ANNOTATION, constants.ATTACHMENTS_ANNOTATION,
        constants.REQUEUED_AT_ANNOTATION,
        constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION, constants.NODE_DEFAULT_PODNETWORK_ANNOTATION,
        constants.NODE_PODNETWORKS_ANNOTATION, constants.IN_USE_FINALIZER, constants.BRIDGE_PROVIDER,
        constants.FEATURE_GATE, constants.API_VERSION, constants.PODNETWORK_SHORT, constants.ATTACHMENT_SHORT,
        constants.CATEGORY,
    ):
        assert f"`{name}`" in DOC, name


def test_documented_error_messages_are_what_validation_says():
    def messages(nets: object, **spec: object) -> list[str]:
        pod = {"metadata": {"annotations": {constants.NETWORKS_ANNOTATION: json.dumps(nets)}}, "spec": spec}
        return [str(e) for e in validation.validate_pod(pod)]

    (host,) = messages([{"podNetworkName": "a"}], hostNetwork=True)
    assert f"``{host}``" in DOC
    assert messages([]) and messages([])[0].startswith("spec.networks: Required value")
    assert "`spec.networks: Required value`" in DOC
    gw = messages([{"podNetworkName": "a", "isDefaultGW4": True}, {"podNetworkName": "b", "isDefaultGW4": True}])
    assert gw[0].startswith("spec.networks[1].isDefaultGW4: Invalid value: true: only one network may hold "
                            "the default gateway")
    assert "Invalid value: true: only one network may hold the default gateway" in DOC
    (long,) = messages([{"podNetworkName": "a", "interfaceName": "x" * 16}])
    assert long.endswith("Too long: may not be more than 15 bytes")
    assert "`Too long: may not be more than 15 bytes`" in DOC
