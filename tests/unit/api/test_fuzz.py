"""Fuzzing the annotation parser and the validators, and round-tripping the models.

Whatever a user writes, `networks.parse` returns networks or raises
`InvalidObject`, and the validators return field errors: never another
exception, never a traceback in front of the user.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podnetwork.ground import constants
from podnetwork.ground.fielderrors import FieldError, InvalidObject
from podnetwork.kep import api, networks, validation

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
KEYS = ["podNetworkName", "podNetworkAttachmentName", "interfaceName", "isDefaultGW4", "isDefaultGW6"]
names = st.sampled_from(["default", "dataplane", "a", "", "Bad_Name", "x" * 254, "net1", "eth0"])
ifnames = st.sampled_from(["eth0", "net1", "", ".", "..", "a/b", "a b", "a:b", "x" * 15, "x" * 16, "é" * 8])
entries = st.fixed_dictionaries(
    {},
    optional={
        "podNetworkName": names,
        "podNetworkAttachmentName": names,
        "interfaceName": ifnames | st.text(max_size=20),
        "isDefaultGW4": st.booleans(),
        "isDefaultGW6": st.booleans(),
    },
)
#: Near-valid lists: the right keys with plausible values, so the static rules run.
network_lists = st.lists(entries | json_values, max_size=6)


def assert_parse_contract(text: Any) -> None:
    try:
        result = networks.parse(text)
    except InvalidObject as exc:
        assert exc.errors and all(isinstance(e, FieldError) for e in exc.errors)
        for e in exc.errors:
            str(e)
    else:
        assert all(isinstance(n, api.Network) for n in result)


@FUZZ
@given(st.text(max_size=300))
def test_parse_of_any_text_returns_networks_or_raises_invalid_object(text):
    assert_parse_contract(text)


@FUZZ
@given(json_values | network_lists)
def test_parse_of_any_json_returns_networks_or_raises_invalid_object(value):
    assert_parse_contract(json.dumps(value))


@FUZZ
@given(json_values)
def test_parse_of_a_non_string_annotation_raises_invalid_object(value):
    assert_parse_contract(value)


def pod_with(annotation: Any, spec: Any, metadata_extra: Any = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "annotations": {constants.NETWORKS_ANNOTATION: annotation}}
    if isinstance(metadata_extra, dict):
        metadata.update(metadata_extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


specs = st.fixed_dictionaries(
    {}, optional={"hostNetwork": st.booleans() | json_values, "os": st.just({"name": "windows"}) | json_values}
) | json_values


@FUZZ
@given(network_lists.map(json.dumps) | st.text(max_size=100) | json_values, specs, json_values)
def test_validate_pod_returns_field_errors_for_any_pod(annotation, spec, extra):
    errors = validation.validate_pod(pod_with(annotation, spec, extra))
    assert all(isinstance(e, FieldError) and str(e) for e in errors)


@FUZZ
@given(json_values)
def test_validate_pod_accepts_any_json_as_the_pod(value):
    if isinstance(value, dict):
        errors = validation.validate_pod(value)
        assert all(isinstance(e, FieldError) for e in errors)


@FUZZ
@given(st.dictionaries(st.sampled_from(["apiVersion", "kind", "metadata", "spec", "status"]), json_values))
def test_podnetwork_and_attachment_validators_return_field_errors_for_any_object(obj):
    for check in (validation.validate_podnetwork, validation.validate_attachment):
        errors = check(obj)
        assert all(isinstance(e, FieldError) and str(e) for e in errors)


@FUZZ
@given(network_lists)
def test_valid_network_lists_format_and_parse_back_unchanged(value):
    try:
        nets = networks.parse(json.dumps(value))
    except InvalidObject:
        return
    assert networks.parse(networks.format(nets)) == nets


# --- round trip of valid objects -------------------------------------------------

T = "2024-05-01T10:00:00Z"
VALID_OBJECTS = [
    (api.PodNetwork, {"apiVersion": constants.API_VERSION, "kind": "PodNetwork",
                      "metadata": {"name": "default"}, "spec": {"enabled": True}}),
    (api.PodNetwork, {
        "apiVersion": constants.API_VERSION, "kind": "PodNetwork",
        "metadata": {"name": "dataplane", "uid": "u1", "generation": 2, "resourceVersion": "7",
                     "labels": {"a": "b"}, "finalizers": [constants.IN_USE_FINALIZER],
                     "managedFields": [{"manager": "kubectl"}]},
        "spec": {"enabled": False, "provider": constants.BRIDGE_PROVIDER,
                 "parametersRefs": [{"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions",
                                     "name": "dataplane", "namespace": "default"}]},
        "status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "AdministrativelyDisabled",
             "message": "spec.enabled is false", "lastTransitionTime": T, "observedGeneration": 2},
            {"type": "ParamsReady", "status": "True", "reason": "Ready", "message": "",
             "lastTransitionTime": T},
        ]},
    }),
    (api.PodNetworkAttachment, {
        "apiVersion": constants.API_VERSION, "kind": "PodNetworkAttachment",
        "metadata": {"name": "fast", "namespace": "default"},
        "spec": {"podNetworkName": "dataplane",
                 "parametersRefs": [{"group": "", "kind": "ConfigMap", "name": "fast-params"}]},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "PodNetworkNotReady",
                                   "message": "PodNetwork dataplane is not Ready", "lastTransitionTime": T}]},
    }),
    (api.Network, {"podNetworkAttachmentName": "fast", "interfaceName": "net2", "isDefaultGW6": True}),
    (api.PodIP, {"ip": "10.0.0.20", "podNetwork": "dataplane1", "interfaceName": "net1"}),
    (api.PodIP, {"ip": "192.168.5.54", "podNetwork": "default"}),
]


def test_valid_objects_round_trip_unchanged():
    for model, obj in VALID_OBJECTS:
        assert model.model_validate(obj).model_dump(by_alias=True, exclude_none=True) == obj
        assert model.model_validate(obj).to_dict() == obj


def test_round_trip_of_the_podnetwork_default_adds_only_the_defaulted_field():
    obj = {"apiVersion": constants.API_VERSION, "kind": "PodNetwork", "metadata": {"name": "default"}}
    assert api.PodNetwork.model_validate(obj).to_dict() == {**obj, "spec": {"enabled": True}}


conditions = st.builds(
    dict,
    type=st.sampled_from([t.value for t in constants.ConditionType]),
    status=st.sampled_from(["True", "False", "Unknown"]),
    reason=st.sampled_from([r.value for r in constants.ReadyReason]),
    message=st.text(max_size=30),
    lastTransitionTime=st.just(T),
)


@FUZZ
@given(
    enabled=st.booleans(),
    provider=st.none() | st.text(min_size=1, max_size=253),
    refs=st.none() | st.lists(st.fixed_dictionaries(
        {"group": st.text(max_size=20), "kind": st.text(min_size=1, max_size=20),
         "name": st.text(min_size=1, max_size=20)},
        optional={"namespace": st.text(min_size=1, max_size=20)}), max_size=3),
    conds=st.lists(conditions, max_size=3, unique_by=lambda c: c["type"]),
)
def test_generated_podnetworks_round_trip(enabled, provider, refs, conds):
    spec: dict[str, Any] = {"enabled": enabled}
    if provider is not None:
        spec["provider"] = provider
    if refs is not None:
        spec["parametersRefs"] = refs
    obj = {"apiVersion": constants.API_VERSION, "kind": "PodNetwork", "metadata": {"name": "n"}, "spec": spec}
    if conds:
        obj["status"] = {"conditions": conds}
    assert api.PodNetwork.model_validate(obj).to_dict() == obj
    assert validation.validate_podnetwork(obj) == []
