"""The CEL the project installs with `crds/`, evaluated by a real kube-apiserver: the CRDs'
`x-kubernetes-validations` (PodNetwork's immutable provider and parametersRefs beside its mutable
`enabled`, PodNetworkAttachment's immutable spec, NetworkSelectionOptions' pairs of keys, with the
escaped names of keys that hold a dash) and the ValidatingAdmissionPolicy that keeps namespaces from
being labelled out of pod admission without verb `exempt`, asked of the real RBAC authorizer for
users the API server impersonates. (The policy protecting `default` from deletion is proven in
test_controller.py.) tests/unit/api/test_crds.py runs the same rules offline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from podnetwork.ground import constants
from tests.real.cluster_support import Api, eventually
from tests.real.objects_support import PODNETWORKS, Made, attachments, unique

RBAC = "/apis/rbac.authorization.k8s.io/v1"
OPTIONS = "/apis/bridge.multinetwork.x-k8s.io/v1alpha1/namespaces/{ns}/networkselectionoptions"
EXEMPT = {"metadata": {"labels": {constants.ADMISSION_LABEL: "disabled"}}}


def patch(api: Api, path: str, body: Any, *, user: str | None = None,
          params: Mapping[str, str] | None = None) -> tuple[int, Any]:
    """A merge patch, by cluster-admin or by `user` (whom the API server impersonates)."""
    headers = {"Content-Type": "application/merge-patch+json"}
    if user is not None:
        headers["Impersonate-User"] = user
    response = api.http.patch(path, content=json.dumps(body), headers=headers, params=params)
    return response.status_code, response.json()


def refused(answer: tuple[int, Any], message: str) -> None:
    code, body = answer
    assert code == 422, body
    assert message in body["message"], body


def test_a_podnetwork_may_change_enabled_but_never_its_provider_or_parameters_refs(
        api: Api, made: Made) -> None:
    refs = [{"group": "example.com", "kind": "things", "name": "a"}]
    with_refs = made.podnetwork(unique("rules"), refs=refs)["metadata"]["name"]
    bare = made.create(PODNETWORKS, {"apiVersion": f"{constants.GROUP}/v1alpha1", "kind": "PodNetwork",
                                     "metadata": {"name": unique("bare")}})
    assert bare["spec"] == {"enabled": True}, "the schema's defaults"
    for name in (with_refs, bare["metadata"]["name"]):
        code, body = patch(api, f"{PODNETWORKS}/{name}", {"spec": {"enabled": False}})
        assert code == 200, body
        assert body["spec"]["enabled"] is False
        code, body = patch(api, f"{PODNETWORKS}/{name}", {"metadata": {"labels": {"a": "b"}}})
        assert code == 200, body

    provider = "spec.provider is immutable; create a new PodNetwork to change it"
    parameters = "spec.parametersRefs is immutable; create a new PodNetwork to change it"
    path = f"{PODNETWORKS}/{with_refs}"
    refused(patch(api, path, {"spec": {"provider": "example.com/other"}}), provider)
    refused(patch(api, path, {"spec": {"provider": None}}), provider)
    refused(patch(api, f"{PODNETWORKS}/{bare['metadata']['name']}", {"spec": {"provider": "example.com/x"}}),
            provider)
    refused(patch(api, path, {"spec": {"parametersRefs": [{**refs[0], "name": "b"}]}}), parameters)
    refused(patch(api, path, {"spec": {"parametersRefs": None}}), parameters)
    refused(patch(api, f"{PODNETWORKS}/{bare['metadata']['name']}", {"spec": {"parametersRefs": refs}}),
            parameters)
    kept = api.get(path)["spec"]
    assert (kept["provider"], kept["parametersRefs"], kept["enabled"]) == ("example.com/elsewhere", refs, False)


def test_a_podnetwork_attachments_spec_is_immutable_and_its_metadata_is_not(
        api: Api, made: Made, ns: str) -> None:
    collection = attachments(ns)
    made.create(collection, {"apiVersion": f"{constants.GROUP}/v1alpha1", "kind": "PodNetworkAttachment",
                             "metadata": {"name": "att"}, "spec": {"podNetworkName": "blue"}})
    immutable = "spec is immutable; delete and recreate the PodNetworkAttachment to change it"
    refused(patch(api, f"{collection}/att", {"spec": {"podNetworkName": "red"}}), immutable)
    refused(patch(api, f"{collection}/att", {"spec": {"parametersRefs": [
        {"group": "example.com", "kind": "things", "name": "a"}]}}), immutable)
    code, body = patch(api, f"{collection}/att", {"metadata": {"labels": {"a": "b"}}})
    assert code == 200, body
    assert body["spec"] == {"podNetworkName": "blue"}


def test_network_selection_options_refuse_keys_the_npwg_spec_forbids_together_and_take_each_alone(
        api: Api, ns: str) -> None:
    def create(name: str, spec: dict[str, Any]) -> tuple[int, Any]:
        return api.request("POST", OPTIONS.format(ns=ns), {
            "apiVersion": "bridge.multinetwork.x-k8s.io/v1alpha1", "kind": "NetworkSelectionOptions",
            "metadata": {"name": name}, "spec": spec})

    # `ipam-claim-reference` is `ipam__dash__claim__dash__reference` in CEL: the API server reads it so
    refused(create("both", {"ips": ["10.1.1.1/24"], "ipam-claim-reference": "claim"}),
            "ips and ipam-claim-reference may not be set together (NPWG 4.1.2.1.11)")
    refused(create("burst", {"bandwidth": {"ingressBurst": 10}}), "ingressBurst requires ingressRate (NPWG 4.1.2.1.8)")
    refused(create("burst", {"bandwidth": {"egressBurst": 10, "ingressRate": 5}}),
            "egressBurst requires egressRate (NPWG 4.1.2.1.8)")
    for i, spec in enumerate([
            {"ips": ["10.1.1.1/24"]}, {"ipam-claim-reference": "claim"},
            {"bandwidth": {"ingressRate": 5, "ingressBurst": 10, "egressRate": 5, "egressBurst": 10}}, {}]):
        code, body = create(f"alone-{i}", spec)
        assert code == 201, body


def test_labelling_a_namespace_out_of_admission_needs_verb_exempt_granted_cluster_wide(
        api: Api, made: Made, ns: str) -> None:
    tenant = unique("tenant")
    subject = {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": tenant}
    # the tenant may update its own namespace, and holds `exempt` there too: a RoleBinding in it
    # cannot grant what the policy asks cluster-wide
    own = made.create(f"{RBAC}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": unique("own")},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "update", "patch"]},
                  {"apiGroups": [constants.GROUP], "resources": ["namespaces"], "verbs": ["exempt"]}]})
    api.create(f"{RBAC}/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "own"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": own["metadata"]["name"]},
        "subjects": [subject]})
    path = f"/api/v1/namespaces/{ns}"

    def labelled_by_tenant() -> tuple[int, Any]:
        answer = patch(api, path, EXEMPT, user=tenant)
        assert answer[0] != 403 or "ValidatingAdmissionPolicy" in answer[1]["message"], answer  # RBAC's cache not yet filled
        return answer

    code, body = eventually(labelled_by_tenant, "the tenant may patch its namespace", timeout=60)
    assert code == 403, body
    assert "admission-exemption.multinetwork.x-k8s.io" in body["message"], body
    assert f"labelling namespace {ns} multinetwork.x-k8s.io/admission=disabled" in body["message"], body
    code, body = patch(api, path, {"metadata": {"labels": {"team": "a"}}}, user=tenant)
    assert code == 200, "other labels need nothing"

    exempt = made.create(f"{RBAC}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": unique("exempt")},
        "rules": [{"apiGroups": [constants.GROUP], "resources": ["namespaces"], "resourceNames": [ns],
                   "verbs": ["exempt"]}]})["metadata"]["name"]
    made.create(f"{RBAC}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": exempt},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": exempt},
        "subjects": [subject]})

    def allowed() -> Any:
        code, body = patch(api, path, EXEMPT, user=tenant)
        return body if code == 200 else None

    body = eventually(allowed, "the tenant granted exempt cluster-wide labels its namespace out", timeout=60)
    assert body["metadata"]["labels"][constants.ADMISSION_LABEL] == "disabled"

    # taking the label away needs nothing; a user who may only update namespaces does it
    remover = unique("remover")
    api.create(f"{RBAC}/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "remover"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": own["metadata"]["name"]},
        "subjects": [{**subject, "name": remover}]})
    eventually(lambda: patch(api, path, {"metadata": {"labels": {constants.ADMISSION_LABEL: None}}},
                             user=remover)[0] == 200, "the label is removed", timeout=60)


def test_creating_the_projects_own_namespace_needs_verb_exempt(api: Api, made: Made) -> None:
    creator = unique("creator")
    role = made.create(f"{RBAC}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": creator},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create"]}]})["metadata"]["name"]
    made.create(f"{RBAC}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": creator},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": creator}]})

    def create(name: str, user: str | None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json", **({"Impersonate-User": user} if user else {})}
        response = api.http.post("/api/v1/namespaces", params={"dryRun": "All"}, headers=headers,
                                 content=json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": name}}))
        return response.status_code, response.json()

    eventually(lambda: create(unique("any"), creator)[0] == 201, "the creator may create namespaces", timeout=60)
    code, body = create("multinetwork-system", creator)
    assert code == 403, body
    assert "the namespace multinetwork-system is left out of pod admission" in body["message"], body
    code, body = create("multinetwork-system", None)  # cluster-admin holds every verb
    assert code == 201, body
    assert api.find("/api/v1/namespaces/multinetwork-system") is None, "a dry run creates nothing"
