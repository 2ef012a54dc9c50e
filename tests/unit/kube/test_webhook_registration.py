"""The webhook configurations as the operators register them (`podnetwork.kube.registration`):
the objects of both commands with a Service and a caBundle, when a stored one is already right
(fields the API server adds do not count), the guard against putting an older CA back, and when a
Service has a ready endpoint."""

from __future__ import annotations

import base64
import copy
import datetime
from typing import Any

import pytest

from bridge.operator import admission as bridge_admission
from podnetwork.kep import admission
from podnetwork.kube import registration, webhooksecret
from podnetwork.kube.registration import (
    Owner,
    covers,
    desired,
    newer_bundle,
    patch,
    ready_endpoint,
    up_to_date,
)

SERVICE = {"service": {"namespace": "multinetwork-system", "name": "podnetwork-webhook", "port": 443}}
OWNER = Owner("podnetwork-controller", "uid-1")


def wanted() -> list[dict[str, Any]]:
    return desired(admission.webhook_configurations(SERVICE), "Q0E=", "podnetwork-controller", OWNER)


def as_stored(obj: dict[str, Any]) -> dict[str, Any]:
    """What kube-apiserver keeps of `obj`: its defaults added, its metadata filled in."""
    stored = copy.deepcopy(obj)
    stored["metadata"].update(uid="u", resourceVersion="42", generation=1, creationTimestamp="2026-01-01T00:00:00Z")
    for hook in stored["webhooks"]:
        hook.setdefault("matchPolicy", "Equivalent")
        hook.setdefault("objectSelector", {})
        if obj["kind"].startswith("Mutating"):
            hook.setdefault("reinvocationPolicy", "Never")
    return stored


def test_both_commands_register_their_service_with_the_ca_bundle_the_labels_and_the_owner() -> None:
    bridge = desired(bridge_admission.webhook_configurations(
        {"service": {"namespace": "multinetwork-system", "name": "podnetwork-bridge-webhook", "port": 443}}),
        "Q0E=", "podnetwork-bridge", Owner("podnetwork-bridge", "uid-2"))
    for obj, component, paths in [*((o, "podnetwork-controller", {admission.MUTATE_PATH, admission.VALIDATE_PATH})
                                     for o in wanted()),
                                  (bridge[0], "podnetwork-bridge", {bridge_admission.MUTATE_PATH})]:
        meta = obj["metadata"]
        assert meta["labels"] == {"app.kubernetes.io/part-of": "podnetwork", "app.kubernetes.io/managed-by": component}
        (reference,) = meta["ownerReferences"]
        assert reference["kind"] == "ClusterRole" and reference["apiVersion"] == "rbac.authorization.k8s.io/v1"
        assert "blockOwnerDeletion" not in reference  # needs the owner's finalizers permission
        for hook in obj["webhooks"]:
            config = hook["clientConfig"]
            assert config["caBundle"] == "Q0E=" and "url" not in config
            assert config["service"]["port"] == 443 and config["service"]["path"] in paths
            assert hook["failurePolicy"] == "Fail"
            # The operators' own namespace is exempt: they start without their own webhooks.
            exempt = hook["namespaceSelector"]["matchExpressions"][1]
            assert exempt["operator"] == "NotIn" and "multinetwork-system" in exempt["values"]


def test_desired_leaves_the_builders_objects_alone() -> None:
    built = admission.webhook_configurations(SERVICE)
    before = copy.deepcopy(built)
    desired(built, "Q0E=", "podnetwork-controller", OWNER)
    assert built == before


def test_a_stored_configuration_with_the_api_servers_defaults_is_up_to_date() -> None:
    for obj in wanted():
        assert up_to_date(as_stored(obj), obj)


@pytest.mark.parametrize(("change", "why"), [
    (lambda o: o["webhooks"][0]["clientConfig"].update(caBundle="T0xE"), "another CA bundle"),
    (lambda o: o["webhooks"][0]["clientConfig"]["service"].update(path="/old"), "another path"),
    (lambda o: o["webhooks"][0].update(failurePolicy="Ignore"), "fail-open by hand"),
    (lambda o: o["webhooks"].append(copy.deepcopy(o["webhooks"][0])), "a webhook more"),
    (lambda o: o["metadata"]["labels"].pop("app.kubernetes.io/managed-by"), "a label gone"),
    (lambda o: o["metadata"]["ownerReferences"][0].update(uid="uid-of-a-deleted-role"), "an owner re-created"),
    (lambda o: o["metadata"].pop("ownerReferences"), "no owner"),
])
def test_a_stored_configuration_that_differs_in_what_we_set_is_not_up_to_date(change: Any, why: str) -> None:
    obj = wanted()[0]
    stored = as_stored(obj)
    change(stored)
    assert not up_to_date(stored, obj), why


def test_the_patch_replaces_the_webhooks_and_is_guarded_by_the_resource_version_read() -> None:
    obj = wanted()[1]
    body = patch(obj, "42")
    assert body["metadata"] == {"labels": obj["metadata"]["labels"], "ownerReferences": obj["metadata"]["ownerReferences"],
                                "resourceVersion": "42"}
    assert body["webhooks"] == obj["webhooks"]
    without_owner = desired(admission.webhook_configurations({"url": "https://10.0.0.5:9443"}), "Q0E=", "x", None)[0]
    assert "ownerReferences" not in patch(without_owner, None)["metadata"]
    assert "resourceVersion" not in patch(without_owner, None)["metadata"]


def test_covers_compares_dicts_by_key_and_lists_item_by_item() -> None:
    assert covers({"a": 1, "b": [{"c": 2, "d": 3}]}, {"b": [{"c": 2}]})
    assert not covers({"b": [{"c": 2}, {"c": 3}]}, {"b": [{"c": 2}]})
    assert not covers({"a": "1"}, {"a": 1})
    assert not covers(None, {"a": 1})
    assert covers({}, {})


def bundle_made(at: datetime.datetime) -> str:
    data = webhooksecret.decide(None, ["svc.ns.svc"], at).write
    assert data is not None
    return data["ca.crt"]


def test_a_registered_bundle_with_a_newer_ca_is_not_replaced_by_an_older_read() -> None:
    now = datetime.datetime.now(datetime.UTC)
    older, newer = bundle_made(now - datetime.timedelta(days=1)), bundle_made(now)
    rotated = base64.b64encode(base64.b64decode(newer) + base64.b64decode(older)).decode()
    assert newer_bundle(rotated, older)  # a replica that read the Secret before the rotation waits
    assert not newer_bundle(older, rotated)  # the rotating replica writes
    assert not newer_bundle(rotated, rotated)
    assert not newer_bundle(None, older) and not newer_bundle("", older)
    assert not newer_bundle("bm90IFBFTQ==", older)  # an unreadable bundle is replaced


def slice_of(service: str, *ready: bool | None) -> dict[str, Any]:
    return {"metadata": {"labels": {registration.SERVICE_NAME_LABEL: service}},
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {} if r is None else {"ready": r}}
                          for r in ready]}


def test_a_service_has_a_ready_endpoint_only_in_its_own_slices() -> None:
    assert not ready_endpoint([], "podnetwork-webhook")
    assert not ready_endpoint([slice_of("podnetwork-webhook", False, False)], "podnetwork-webhook")
    assert not ready_endpoint([slice_of("other", True)], "podnetwork-webhook")
    assert ready_endpoint([slice_of("podnetwork-webhook", False), slice_of("podnetwork-webhook", True)],
                          "podnetwork-webhook")
    # The EndpointSlice API: an unset ready condition is to be read as ready.
    assert ready_endpoint([slice_of("podnetwork-webhook", None)], "podnetwork-webhook")


@pytest.mark.parametrize(("host", "dialled"), [("0.0.0.0", "127.0.0.1"), ("", "127.0.0.1"), ("::", "::1"),
                                               ("10.0.0.5", "10.0.0.5"), ("[fd00::5]", "fd00::5")])
def test_the_self_check_dials_the_loopback_for_a_wildcard_listen_address(host: str, dialled: str) -> None:
    assert registration.loopback(host) == dialled


def test_only_a_configuration_carrying_our_managed_by_label_is_ours_to_withdraw() -> None:
    (mutating,) = desired(bridge_admission.webhook_configurations(SERVICE), "Q0E=", "podnetwork-bridge", None)
    assert registration.ours(as_stored(mutating), "podnetwork-bridge")
    assert not registration.ours(as_stored(mutating), "podnetwork-controller")
    foreign = as_stored(mutating)
    del foreign["metadata"]["labels"]
    assert not registration.ours(foreign, "podnetwork-bridge")
    assert not registration.ours({"metadata": "not an object"}, "podnetwork-bridge")


def test_the_bridge_withdraws_its_validating_configuration_exactly_when_the_flag_is_off() -> None:
    names = {(c["kind"], c["metadata"]["name"]) for c in bridge_admission.webhook_configurations(SERVICE, enforce_use=True)}
    (retired,) = bridge_admission.retired_configurations(enforce_use=False)
    assert retired in names and retired[0] == "ValidatingWebhookConfiguration"
    assert bridge_admission.retired_configurations(enforce_use=True) == []
    kept = {(c["kind"], c["metadata"]["name"]) for c in bridge_admission.webhook_configurations(SERVICE)}
    assert retired not in kept  # never registered and withdrawn by one bridge
