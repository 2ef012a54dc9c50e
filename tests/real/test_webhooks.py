"""The pod webhooks of the controller and the bridge as `--manage-webhooks` registers them, called
by a real kube-apiserver: auto-population, static validation with field errors, the permission to
use a PodNetwork (asked of the real RBAC authorizer, for users the API server impersonates), the
networks held against changes through `pods/status` and Bindings, the namespaces left out, what
still goes through while the controller's webhook server is down, and the agent holding a pod to
the attachment admission checked when that attachment is replaced before the kubelet's ADD.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

import pytest

from bridge.operator import admission as bridge_admission
from podnetwork.ground import constants
from podnetwork.kep import admissionconfig
from tests.real.cluster_support import BUSYBOX, Api, Cluster, Node, eventually, pod_manifest, wait_phase
from tests.real.objects_support import (
    BRIDGE_PROVIDER,
    NPWG_SELECTION,
    Made,
    attachments,
    events_of,
    nad_body,
    nad_ref,
    nads,
    pods,
    unique,
)

pytestmark = pytest.mark.usefixtures("components")

NETWORKS = constants.NETWORKS_ANNOTATION
ADMISSIONREGISTRATION = "/apis/admissionregistration.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def unscheduled(name: str, **kw: Any) -> dict[str, Any]:
    """A pod no scheduler picks up: admission is all that happens to it."""
    return pod_manifest(name, schedulerName=f"nobody-{secrets.token_hex(2)}", **kw)


def create_as(api: Api, user: str, ns: str, body: Mapping[str, Any], *,
              groups: tuple[str, ...] = ()) -> tuple[int, Any]:
    """A pod CREATE made by `user`, whom the API server impersonates for cluster-admin."""
    headers = [("Content-Type", "application/json"), ("Impersonate-User", user),
               *(("Impersonate-Group", g) for g in groups)]
    response = api.http.post(pods(ns), content=json.dumps(body), headers=headers)
    return response.status_code, response.json()


def may_create_pods(api: Api, ns: str, user: str) -> None:
    """`user` may create pods in `ns` (a Role and RoleBinding there, gone with the namespace)."""
    name = unique("pods")
    api.create(f"{RBAC}/namespaces/{ns}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["pods", "pods/binding"], "verbs": ["create", "get"]}]})
    bind(api, ns, name, "Role", {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user})


def bind(api: Api, ns: str, role: str, kind: str, subject: Mapping[str, str]) -> None:
    api.create(f"{RBAC}/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": unique("rb")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [dict(subject)]})


def attachment_body(name: str, podnetwork: str) -> dict[str, Any]:
    return {"apiVersion": f"{constants.GROUP}/v1alpha1", "kind": "PodNetworkAttachment",
            "metadata": {"name": name}, "spec": {"podNetworkName": podnetwork}}


def binding(name: str, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Binding to a node that does not exist: no kubelet ever runs the pod."""
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "annotations": dict(annotations or {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": f"nowhere-{secrets.token_hex(2)}"}}


def test_the_registered_configurations_are_the_ones_the_project_builds(api: Api) -> None:
    # test_admission_cel.py proves these rules and matchConditions on copies: the same as registered
    built = [*admissionconfig.webhook_configurations({"url": "https://x"}),
             *bridge_admission.webhook_configurations({"url": "https://x"}, enforce_use=True)]
    for config in built:
        plural = "mutatingwebhookconfigurations" if config["kind"].startswith("Mutating") else \
            "validatingwebhookconfigurations"
        registered = api.get(f"{ADMISSIONREGISTRATION}/{plural}/{config['metadata']['name']}")
        assert len(registered["webhooks"]) == len(config["webhooks"])
        for ours, theirs in zip(config["webhooks"], registered["webhooks"], strict=True):
            for key in ("name", "rules", "matchConditions", "failurePolicy", "namespaceSelector", "sideEffects"):
                assert theirs.get(key) == ours.get(key), (config["metadata"]["name"], key)


def test_a_pod_naming_no_network_gets_default_and_an_invalid_one_is_refused_with_field_errors(
        api: Api, made: Made, ns: str) -> None:
    pod = made.pod(ns, unscheduled("plain"))
    assert json.loads(pod["metadata"]["annotations"][NETWORKS]) == [{"podNetworkName": "default"}]

    bad = unscheduled("bad", networks=[{"podNetworkName": "default"},
                                       {"podNetworkName": "default", "interfaceName": "a/b"}])
    code, body = api.request("POST", pods(ns), bad)
    assert code == 422, body
    assert body.get("reason") == "Invalid", body
    assert f'admission webhook "{admissionconfig.WEBHOOK_NAME_VALIDATE}" denied the request' in body["message"]
    causes = {(c["reason"], c["field"]) for c in body["details"]["causes"]}
    assert causes == {("FieldValueDuplicate", "spec.networks[1].podNetworkName"),
                      ("FieldValueInvalid", "spec.networks[1].interfaceName")}, body
    assert api.find(f"{pods(ns)}/bad") is None


def test_using_a_podnetwork_needs_the_use_permission_of_the_user_or_the_pods_service_account(
        api: Api, made: Made, ns: str) -> None:
    network = unique("use")
    made.podnetwork(network)
    role = made.create(f"{RBAC}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": unique("use")},
        "rules": [{"apiGroups": [constants.GROUP], "resources": ["podnetworks"], "resourceNames": [network],
                   "verbs": ["use"]}]})["metadata"]["name"]
    alice, bob = unique("alice"), unique("bob")
    for user in (alice, bob):
        may_create_pods(api, ns, user)
    api.create(f"/api/v1/namespaces/{ns}/serviceaccounts",
               {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "granted"}})
    bind(api, ns, role, "ClusterRole", {"kind": "ServiceAccount", "name": "granted", "namespace": ns})
    bind(api, ns, role, "ClusterRole", {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": bob})
    made.pod_namespaces.add(ns)
    wants = [{"podNetworkName": "default"}, {"podNetworkName": network}]

    def created(user: str, name: str, **kw: Any) -> Any:
        code, body = create_as(api, user, ns, unscheduled(name, networks=wants, **kw))
        assert code == 201, body
        return body

    # RBAC's caches fill from watches: the grants above take effect within moments
    eventually(lambda: created(alice, "as-granted", serviceAccountName="granted"),
               "alice's pod running as the granted ServiceAccount is admitted", timeout=60)
    eventually(lambda: created(bob, "by-bob"), "bob's pod is admitted", timeout=60)

    code, body = create_as(api, alice, ns, unscheduled("denied", networks=wants))
    assert code == 403, body
    assert f'admission webhook "{admissionconfig.WEBHOOK_NAME_VALIDATE}" denied the request' in body["message"]
    assert (f'neither the user "{alice}" nor the pod\'s ServiceAccount "system:serviceaccount:{ns}:default" '
            f'may use PodNetwork "{network}"') in body["message"]
    assert [(c["reason"], c["field"]) for c in body["details"]["causes"]] == \
        [("FieldValueForbidden", f"metadata.annotations[{NETWORKS}][1]")], body
    # default needs no permission
    code, body = create_as(api, alice, ns, unscheduled("on-default", networks=wants[:1]))
    assert code == 201, body


def test_naming_a_bridge_podnetworks_nad_by_hand_needs_the_use_permission_too(
        api: Api, made: Made, ns: str) -> None:
    nad = made.create(nads(ns), nad_body(unique("nad")))["metadata"]["name"]
    network = unique("npwg")
    made.podnetwork(network, provider=BRIDGE_PROVIDER, refs=[nad_ref(ns, nad)])
    alice = unique("alice")
    may_create_pods(api, ns, alice)
    made.pod_namespaces.add(ns)
    by_hand = unscheduled("by-hand", annotations={NPWG_SELECTION: f"{ns}/{nad}"})

    def refused() -> Any:
        code, body = create_as(api, alice, ns, by_hand)
        assert code == 403, body
        assert f'admission webhook "{bridge_admission.VALIDATE_WEBHOOK_NAME}" denied the request' in body["message"]
        return body

    # RBAC lets alice create pods, and the bridge learns of the PodNetwork, from watches: within moments
    body = eventually(refused, "the bridge refuses alice's hand-written selection", timeout=60)
    assert (f'may use PodNetwork "{network}" (named through NetworkAttachmentDefinition "{ns}/{nad}" '
            f'in {NPWG_SELECTION})') in body["message"]
    code, body = api.request("POST", pods(ns), by_hand)  # cluster-admin may use every PodNetwork
    assert code == 201, body

    # a Binding's annotations land on the pod: one carrying the selection is checked as well
    made.pod(ns, unscheduled("bound"))
    response = api.http.post(f"{pods(ns)}/bound/binding", headers={"Impersonate-User": alice},
                             content=json.dumps(binding("bound", {NPWG_SELECTION: f"{ns}/{nad}"})))
    assert response.status_code == 403, response.text
    assert "a Binding's annotations are copied onto the pod it binds" in response.json()["message"]
    assert not api.get(f"{pods(ns)}/bound")["spec"].get("nodeName")


def test_the_networks_cannot_change_through_pods_status_or_a_binding(api: Api, made: Made, ns: str) -> None:
    made.pod(ns, unscheduled("p"))
    elsewhere = json.dumps([{"podNetworkName": "default"}, {"podNetworkName": "blue"}])
    for change in ({NETWORKS: elsewhere}, {constants.ATTACHMENT_NETWORKS_ANNOTATION: '{"x":"blue"}'}):
        code, body = api.request("PATCH", f"{pods(ns)}/p/status", {"metadata": {"annotations": change}},
                                 content_type="application/merge-patch+json")
        assert code == 422, body
        assert f'admission webhook "{admissionconfig.WEBHOOK_NAME_VALIDATE}" denied the request' in body["message"]
    code, body = api.request("POST", f"{pods(ns)}/p/binding", binding("p", {NETWORKS: elsewhere}))
    assert code == 422, body
    assert 'Pod "p" cannot be bound this way' in body["message"], body
    pod = api.get(f"{pods(ns)}/p")
    assert json.loads(pod["metadata"]["annotations"][NETWORKS]) == [{"podNetworkName": "default"}]
    assert constants.ATTACHMENT_NETWORKS_ANNOTATION not in pod["metadata"]["annotations"]
    assert not pod["spec"].get("nodeName")
    # what kube-scheduler sends, and status alone, go through
    api.merge_patch(f"{pods(ns)}/p/status", {"status": {"conditions": [{"type": "example.com/x", "status": "True"}]}})
    api.create(f"{pods(ns)}/p/binding", binding("p"))
    assert api.get(f"{pods(ns)}/p")["spec"]["nodeName"].startswith("nowhere-")


def test_a_namespace_labelled_out_of_admission_gets_neither_population_nor_validation(
        api: Api, made: Made, ns: str) -> None:
    api.merge_patch(f"/api/v1/namespaces/{ns}", {"metadata": {"labels": {constants.ADMISSION_LABEL: "disabled"}}})
    invalid = [{"podNetworkName": "default"}, {"podNetworkName": "default"}]

    def untouched() -> Any:
        return "annotations" not in made.pod(ns, unscheduled(unique("plain")))["metadata"] or None

    # the API server's namespace informer decides the selector: the label takes effect within moments
    eventually(untouched, "a plain pod in the exempt namespace is left without networks", timeout=60)
    pod = made.pod(ns, unscheduled("invalid", networks=invalid))
    assert json.loads(pod["metadata"]["annotations"][NETWORKS]) == invalid


def test_while_the_controllers_webhooks_are_down_pod_create_is_refused_and_nothing_else_waits(
        api: Api, made: Made, ns: str, components: Cluster, node: Node) -> None:
    made.pod(ns, unscheduled("before"))
    controller = components.components["controller"]
    controller.stop()
    try:
        code, body = api.request("POST", pods(ns), unscheduled("during"))
        assert code == 500, body
        assert f'failed calling webhook "{admissionconfig.WEBHOOK_NAME_MUTATE}"' in body["message"], body

        api.merge_patch(f"{pods(ns)}/before", {"metadata": {"labels": {"unrelated": "change"}}})
        api.merge_patch(f"{pods(ns)}/before/status",
                        {"status": {"conditions": [{"type": "example.com/probe", "status": "True"}]}})
        api.merge_patch(f"{pods(ns)}/before/ephemeralcontainers", {"spec": {"ephemeralContainers": [
            {"name": "debug", "image": BUSYBOX, "imagePullPolicy": "Never", "command": ["true"]}]}})
        api.create(f"{pods(ns)}/before/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "before"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node.name}})
        # the kubelet reports the pod Running through pods/status while no controller answers
        running = wait_phase(api, ns, "before")
        assert running["spec"]["nodeName"] == node.name
        assert not controller.alive()
    finally:
        def admitted() -> bool:
            code, body = api.request("POST", pods(ns), unscheduled("after"), params={"dryRun": "All"})
            assert code == 201, body
            return json.loads(body["metadata"]["annotations"][NETWORKS]) == [{"podNetworkName": "default"}]

        components.restart_component("controller", admitted, timeout=90)


def test_an_attachment_replaced_after_admission_to_name_another_podnetwork_fails_the_agents_add(
        api: Api, made: Made, ns: str, node: Node) -> None:
    checked, other = unique("checked"), unique("other")
    made.podnetwork(checked)
    made.podnetwork(other)
    made.create(attachments(ns), attachment_body("att", checked))
    pod = made.pod(ns, unscheduled("held", networks=[{"podNetworkName": "default"},
                                                     {"podNetworkAttachmentName": "att"}]))
    assert json.loads(pod["metadata"]["annotations"][constants.ATTACHMENT_NETWORKS_ANNOTATION]) == \
        {"att": checked}, "admission recorded what it checked"

    # The window this closes: deleted and re-created before the controller's in-use finalizer
    # arrives (if it did, it is taken off here, so that the window is there every time).
    api.delete(f"{attachments(ns)}/att")
    code, body = api.request("PATCH", f"{attachments(ns)}/att", {"metadata": {"finalizers": None}},
                             content_type="application/merge-patch+json")
    assert code in (200, 404), body
    eventually(lambda: api.find(f"{attachments(ns)}/att") is None, "the attachment is gone")
    made.create(attachments(ns), attachment_body("att", other))

    api.create(f"{pods(ns)}/held/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "held"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node.name}})

    def refused_by_the_agent() -> list[str]:
        return [e["message"] for e in events_of(api, ns, "held", "FailedCreatePodSandBox")
                if "PodNetworkAttachmentChanged" in e["message"]]

    (message, *_) = eventually(refused_by_the_agent, "the runtime reports the agent's refusal", timeout=60)
    assert f"names PodNetwork '{other}', but the pod was admitted with it naming '{checked}'" in message, message
    assert api.get(f"{pods(ns)}/held")["status"]["phase"] == "Pending"
