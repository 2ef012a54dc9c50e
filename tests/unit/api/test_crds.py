"""The CRDs in crds/: their schemas accept the KEP's examples and ours, refuse bad
objects, and their CEL rules and the default-PodNetwork admission policy say no
with the right message."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest

from podnetwork.ground import constants
from tests.unit.crd_support import (
    CRDS,
    EXAMPLES,
    FORMATS,
    cel_errors,
    cel_rules,
    crd,
    defaulted,
    load_yaml_documents,
    schema_errors,
    to_json_schema,
    vap_errors,
    version_of,
)

PN_CRD = crd("podnetworks.yaml")
PNA_CRD = crd("podnetworkattachments.yaml")
CRD_OF = {constants.PODNETWORK_KIND: PN_CRD, constants.ATTACHMENT_KIND: PNA_CRD}

T = "2022-11-17T18:38:01Z"


def from_kep(obj: dict[str, Any]) -> dict[str, Any]:
    """A KEP example as it must be written for our CRDs (see docs/api.md):
    our group/version instead of `v1`; the conditions as `metav1.Condition` (the
    type the KEP's Go code declares), so without `lastProbeTime` and with the
    `reason` and `message` that type requires."""
    obj = copy.deepcopy(obj)
    obj["apiVersion"] = constants.API_VERSION
    for cond in (obj.get("status") or {}).get("conditions", []):
        cond.pop("lastProbeTime")
        cond.setdefault("reason", cond["type"])
        cond.setdefault("message", "")
    return obj


# The KEP's examples, verbatim except for the conversion above.
KEP_PODNETWORK_GENERIC = {
    "apiVersion": "v1", "kind": "PodNetwork", "metadata": {"name": "dataplane"},
    "spec": {"enabled": True, "provider": "foo.io/bar"},
    "status": {"conditions": [
        {"lastProbeTime": None, "lastTransitionTime": T, "status": "True", "type": "Ready"},
    ]},
}
KEP_PODNETWORK_PARAMS = {
    "apiVersion": "v1", "kind": "PodNetwork", "metadata": {"name": "dataplane"},
    "spec": {
        "enabled": True, "provider": "k8s.cni.cncf.io/multus",
        "parametersRefs": [
            {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions",
             "name": "parametersA", "namespace": "default"},
            {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions",
             "name": "complementaryParametersB", "namespace": "default"},
        ],
    },
    "status": {"conditions": [
        {"lastProbeTime": None, "lastTransitionTime": T, "status": "True", "type": "Ready"},
        {"lastProbeTime": None, "lastTransitionTime": T, "status": "True", "type": "ParamsReady"},
    ]},
}
KEP_ATTACHMENT = {
    "apiVersion": "v1", "kind": "PodNetworkAttachment",
    "metadata": {"name": "pod1", "namespace": "default"},
    "spec": {
        "podNetworkName": "dataplane",
        "parametersRefs": [
            {"group": "k8s.cni.cncf.io", "kind": "podParams", "name": "parametersA", "namespace": "default"},
        ],
    },
    "status": {"conditions": [
        {"lastProbeTime": None, "lastTransitionTime": T, "status": "True", "type": "Ready"},
        {"lastProbeTime": None, "lastTransitionTime": T, "status": "True", "type": "ParamsReady"},
    ]},
}
KEP_EXAMPLES = [KEP_PODNETWORK_GENERIC, KEP_PODNETWORK_PARAMS, KEP_ATTACHMENT]


def our_examples() -> list[dict[str, Any]]:
    docs = [d for path in sorted(EXAMPLES.glob("*.yaml")) for d in load_yaml_documents(path)]
    return [d for d in docs if d["kind"] in CRD_OF]


def test_examples_directory_has_both_kinds():
    assert {d["kind"] for d in our_examples()} == set(CRD_OF)


@pytest.mark.parametrize("obj", [from_kep(o) for o in KEP_EXAMPLES] + our_examples(),
                         ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_schema_accepts_kep_examples_and_ours(obj):
    assert schema_errors(CRD_OF[obj["kind"]], obj) == []


def test_kep_examples_as_written_are_refused_for_their_conditions():
    # lastProbeTime is not a metav1.Condition field; reason and message are required.
    errors = schema_errors(PN_CRD, {**KEP_PODNETWORK_GENERIC, "apiVersion": constants.API_VERSION})
    assert sorted(errors) == [
        "status.conditions.0: 'message' is a required property",
        "status.conditions.0: 'reason' is a required property",
        "status.conditions.0: Additional properties are not allowed ('lastProbeTime' was unexpected)",
    ]


def test_podnetwork_without_spec_is_defaulted_to_enabled():
    obj = {"apiVersion": constants.API_VERSION, "kind": "PodNetwork", "metadata": {"name": "default"}}
    assert defaulted(PN_CRD, obj)["spec"] == {"enabled": True}
    assert schema_errors(PN_CRD, obj) == []


def cond(type_: str = "Ready", **over: Any) -> dict[str, Any]:
    return {"type": type_, "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": T, **over}


def pn(spec: dict[str, Any] | None = None, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": constants.API_VERSION, "kind": "PodNetwork",
                           "metadata": {"name": "n"}, "spec": spec if spec is not None else {}}
    if conditions is not None:
        obj["status"] = {"conditions": conditions}
    return obj


def pna(spec: dict[str, Any] | None) -> dict[str, Any]:
    return {"apiVersion": constants.API_VERSION, "kind": "PodNetworkAttachment",
            "metadata": {"name": "a", "namespace": "ns"}, "spec": spec}


REF = {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": "n"}

INVALID = [
    ("empty provider", PN_CRD, pn({"provider": ""}), "spec.provider: '' should be non-empty"),
    ("provider of 254 characters", PN_CRD, pn({"provider": "p" * 254}), ("spec.provider: 'pppp", "is too long")),
    ("enabled not a boolean", PN_CRD, pn({"enabled": "yes"}), "spec.enabled: 'yes' is not of type 'boolean'"),
    ("unknown spec field", PN_CRD, pn({"primary": True}), "('primary' was unexpected)"),
    ("parametersRef without name", PN_CRD, pn({"parametersRefs": [{"group": "g", "kind": "k"}]}),
     "spec.parametersRefs.0: 'name' is a required property"),
    ("parametersRef name not a string", PN_CRD, pn({"parametersRefs": [{**REF, "name": 5}]}),
     "spec.parametersRefs.0.name: 5 is not of type 'string'"),
    ("17 parametersRefs", PN_CRD, pn({"parametersRefs": [REF] * 17}), ("spec.parametersRefs: [{", "is too long")),
    ("six conditions", PN_CRD, pn(conditions=[cond(f"T{i}") for i in range(6)]),
     ("status.conditions: [{", "is too long")),
    ("two conditions of one type", PN_CRD, pn(conditions=[cond(), cond(status="False")]),
     "status.conditions[1]: Duplicate value: {'type': 'Ready'}"),
    ("condition status not True/False/Unknown", PN_CRD, pn(conditions=[cond(status="true")]),
     "status.conditions.0.status: 'true' is not one of ['True', 'False', 'Unknown']"),
    ("condition reason with a space", PN_CRD, pn(conditions=[cond(reason="Not ready")]),
     "status.conditions.0.reason: 'Not ready' does not match"),
    ("condition time not RFC 3339", PN_CRD, pn(conditions=[cond(lastTransitionTime="yesterday")]),
     "status.conditions.0.lastTransitionTime: 'yesterday' is not a 'date-time'"),
    ("negative observedGeneration", PN_CRD, pn(conditions=[cond(observedGeneration=-1)]),
     "status.conditions.0.observedGeneration: -1 is less than the minimum of 0"),
    ("attachment without spec", PNA_CRD, pna(None), "spec: None is not of type 'object'"),
    ("attachment without podNetworkName", PNA_CRD, pna({"parametersRefs": [REF]}),
     "spec: 'podNetworkName' is a required property"),
    ("attachment with empty podNetworkName", PNA_CRD, pna({"podNetworkName": ""}),
     "spec.podNetworkName: '' should be non-empty"),
    ("attachment naming a PodNetwork with capitals", PNA_CRD, pna({"podNetworkName": "DataPlane"}),
     "spec.podNetworkName: 'DataPlane' does not match"),
    ("attachment with enabled", PNA_CRD, pna({"podNetworkName": "d", "enabled": True}),
     "('enabled' was unexpected)"),
]


@pytest.mark.parametrize(("desc", "crd_doc", "obj", "expected"), INVALID, ids=[r[0] for r in INVALID])
def test_schema_refuses_invalid_objects(desc, crd_doc, obj, expected):
    errors = schema_errors(crd_doc, obj)
    parts = expected if isinstance(expected, tuple) else (expected,)
    assert any(all(p in e for p in parts) for e in errors), errors


def test_attachment_spec_is_required():
    obj = pna({"podNetworkName": "d"})
    del obj["spec"]
    assert schema_errors(PNA_CRD, obj) == ["<root>: 'spec' is a required property"]


# --- names, scope, printer columns ------------------------------------------------

@pytest.mark.parametrize(
    ("crd_doc", "kind", "plural", "short", "scope"),
    [
        (PN_CRD, constants.PODNETWORK_KIND, constants.PODNETWORK_PLURAL, constants.PODNETWORK_SHORT, "Cluster"),
        (PNA_CRD, constants.ATTACHMENT_KIND, constants.ATTACHMENT_PLURAL, constants.ATTACHMENT_SHORT, "Namespaced"),
    ],
)
def test_crd_names_scope_and_status_subresource(crd_doc, kind, plural, short, scope):
    spec = crd_doc["spec"]
    assert crd_doc["metadata"]["name"] == f"{plural}.{constants.GROUP}"
    assert spec["group"] == constants.GROUP
    assert spec["scope"] == scope
    assert spec["names"]["kind"] == kind
    assert spec["names"]["plural"] == plural
    assert spec["names"]["shortNames"] == [short]
    assert spec["names"]["categories"] == [constants.CATEGORY]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (constants.VERSION, True, True)
    assert version["subresources"] == {"status": {}}


def columns(crd_doc: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["jsonPath"] for c in version_of(crd_doc)["additionalPrinterColumns"]}


def test_kubectl_get_shows_ready_provider_inuse_enabled_and_age_columns():
    ready = '.status.conditions[?(@.type=="Ready")].status'
    in_use = '.status.conditions[?(@.type=="InUse")].status'
    assert columns(PN_CRD) == {"Ready": ready, "Provider": ".spec.provider", "InUse": in_use,
                               "Enabled": ".spec.enabled", "Age": ".metadata.creationTimestamp"}
    assert columns(PNA_CRD) == {"PodNetwork": ".spec.podNetworkName", "Ready": ready, "InUse": in_use,
                                "Age": ".metadata.creationTimestamp"}
    assert constants.ConditionType.IN_USE.value == "InUse"


# --- CEL immutability, Gateway-API style rows --------------------------------------

PN_PROVIDER_MSG = "spec.provider is immutable; create a new PodNetwork to change it"
PN_REFS_MSG = "spec.parametersRefs is immutable; create a new PodNetwork to change it"
PNA_MSG = "spec is immutable; delete and recreate the PodNetworkAttachment to change it"

DATAPLANE = {"enabled": True, "provider": constants.BRIDGE_PROVIDER, "parametersRefs": [REF]}

CEL_ROWS = [
    {"desc": "PodNetwork create is not a transition", "crd": PN_CRD, "old": None,
     "new": pn(DATAPLANE), "wantErrors": []},
    {"desc": "PodNetwork may be disabled", "crd": PN_CRD, "old": pn(DATAPLANE),
     "new": pn({**DATAPLANE, "enabled": False}), "wantErrors": []},
    {"desc": "PodNetwork may be enabled again, also by dropping the defaulted field",
     "crd": PN_CRD, "old": pn({"enabled": False}), "new": pn({}), "wantErrors": []},
    {"desc": "PodNetwork status may change", "crd": PN_CRD, "old": pn(DATAPLANE),
     "new": pn(DATAPLANE, [cond()]), "wantErrors": []},
    {"desc": "PodNetwork provider may not change", "crd": PN_CRD, "old": pn(DATAPLANE),
     "new": pn({**DATAPLANE, "provider": "foo.io/bar"}), "wantErrors": [PN_PROVIDER_MSG]},
    {"desc": "PodNetwork provider may not be added", "crd": PN_CRD, "old": pn({}),
     "new": pn({"provider": "foo.io/bar"}), "wantErrors": [PN_PROVIDER_MSG]},
    {"desc": "PodNetwork provider may not be removed", "crd": PN_CRD, "old": pn({"provider": "foo.io/bar"}),
     "new": pn({}), "wantErrors": [PN_PROVIDER_MSG]},
    {"desc": "PodNetwork parametersRefs may not change", "crd": PN_CRD, "old": pn(DATAPLANE),
     "new": pn({**DATAPLANE, "parametersRefs": [{**REF, "name": "other"}]}), "wantErrors": [PN_REFS_MSG]},
    {"desc": "PodNetwork parametersRefs may not be added", "crd": PN_CRD, "old": pn({}),
     "new": pn({"parametersRefs": [REF]}), "wantErrors": [PN_REFS_MSG]},
    {"desc": "PodNetwork parametersRefs may not be removed", "crd": PN_CRD, "old": pn(DATAPLANE),
     "new": pn({"provider": constants.BRIDGE_PROVIDER}), "wantErrors": [PN_REFS_MSG]},
    {"desc": "PodNetwork parametersRefs may not be reordered", "crd": PN_CRD,
     "old": pn({"parametersRefs": [REF, {**REF, "name": "b"}]}),
     "new": pn({"parametersRefs": [{**REF, "name": "b"}, REF]}), "wantErrors": [PN_REFS_MSG]},
    {"desc": "PodNetwork provider and parametersRefs both changed give both messages", "crd": PN_CRD,
     "old": pn(DATAPLANE), "new": pn({"provider": "x.io/y"}), "wantErrors": [PN_PROVIDER_MSG, PN_REFS_MSG]},
    {"desc": "PodNetworkAttachment create is not a transition", "crd": PNA_CRD, "old": None,
     "new": pna({"podNetworkName": "dataplane"}), "wantErrors": []},
    {"desc": "PodNetworkAttachment unchanged spec", "crd": PNA_CRD, "old": pna({"podNetworkName": "dataplane"}),
     "new": pna({"podNetworkName": "dataplane"}) | {"status": {"conditions": [cond()]}}, "wantErrors": []},
    {"desc": "PodNetworkAttachment podNetworkName may not change", "crd": PNA_CRD,
     "old": pna({"podNetworkName": "dataplane"}), "new": pna({"podNetworkName": "other"}),
     "wantErrors": [PNA_MSG]},
    {"desc": "PodNetworkAttachment parametersRefs may not be added", "crd": PNA_CRD,
     "old": pna({"podNetworkName": "dataplane"}),
     "new": pna({"podNetworkName": "dataplane", "parametersRefs": [REF]}), "wantErrors": [PNA_MSG]},
]


@pytest.mark.parametrize("row", CEL_ROWS, ids=[r["desc"] for r in CEL_ROWS])
def test_cel_rules_refuse_changes_to_what_is_immutable(row):
    assert schema_errors(row["crd"], row["new"]) == []
    assert cel_errors(row["crd"], row["new"], row["old"]) == row["wantErrors"]


def test_every_cel_rule_is_exercised_by_a_row():
    wanted = {m for r in CEL_ROWS for m in r["wantErrors"]}
    rules = {m for c in (PN_CRD, PNA_CRD) for _, _, m in cel_rules(c)}
    assert rules == wanted


# --- the default PodNetwork cannot be deleted ---------------------------------------

POLICY, BINDING = load_yaml_documents(CRDS / "default-podnetwork-protection.yaml")
RESOURCE = {"group": constants.GROUP, "version": constants.VERSION, "resource": constants.PODNETWORK_PLURAL}
DEFAULT_MSG = ('the PodNetwork "default" is the cluster default network and may not be deleted; '
               "to replace it, follow the network migration procedure in docs/api.md")

VAP_ROWS = [
    {"desc": "delete of default is denied", "operation": "DELETE", "resource": RESOURCE,
     "oldObject": pn() | {"metadata": {"name": "default"}}, "wantErrors": [DEFAULT_MSG]},
    {"desc": "delete of another PodNetwork is allowed", "operation": "DELETE", "resource": RESOURCE,
     "oldObject": pn() | {"metadata": {"name": "dataplane"}}, "wantErrors": []},
    {"desc": "update of default is not this policy's business", "operation": "UPDATE", "resource": RESOURCE,
     "object": pn({"enabled": False}) | {"metadata": {"name": "default"}},
     "oldObject": pn() | {"metadata": {"name": "default"}}, "wantErrors": []},
    {"desc": "delete of an attachment named default is allowed", "operation": "DELETE",
     "resource": {**RESOURCE, "resource": constants.ATTACHMENT_PLURAL},
     "oldObject": pna({"podNetworkName": "x"}) | {"metadata": {"name": "default", "namespace": "ns"}},
     "wantErrors": []},
]


@pytest.mark.parametrize("row", VAP_ROWS, ids=[r["desc"] for r in VAP_ROWS])
def test_the_protection_policy_denies_deleting_only_the_default_podnetwork(row):
    request = {"object": None, **row}
    assert vap_errors(POLICY, request) == row["wantErrors"]


def test_policy_binding_denies_with_that_policy():
    assert POLICY["apiVersion"] == BINDING["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert (POLICY["kind"], BINDING["kind"]) == ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    assert BINDING["spec"]["policyName"] == POLICY["metadata"]["name"]
    assert BINDING["spec"]["validationActions"] == ["Deny"]
    assert POLICY["spec"]["failurePolicy"] == "Fail"
    assert POLICY["spec"]["validations"][0]["reason"] == "Forbidden"


# --- a tenant cannot take its namespace out of pod admission --------------------------

EXEMPTION, EXEMPTION_BINDING = load_yaml_documents(CRDS / "admission-exemption-protection.yaml")
NAMESPACES = {"group": "", "version": "v1", "resource": "namespaces"}
LABEL = "multinetwork.x-k8s.io/admission"


def namespace(name: str, label: str | None = None, **other: str) -> dict[str, Any]:
    labels = {"kubernetes.io/metadata.name": name, **other}
    if label is not None:
        labels[LABEL] = label
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def may_exempt(*names: str) -> Any:
    """An authorizer granting verb `exempt` on `namespaces` of our group for these names only, as a
    ClusterRole with resourceNames and a ClusterRoleBinding would."""
    def authorized(attrs: dict[str, str]) -> bool:
        return (attrs == {"group": constants.GROUP, "resource": "namespaces", "name": attrs.get("name", ""),
                          "verb": "exempt"} and attrs["name"] in names)
    return authorized


def exemption_errors(operation: str, new: dict[str, Any], old: dict[str, Any] | None = None,
                     authorized: Any = None) -> list[str]:
    return vap_errors(EXEMPTION, {"operation": operation, "resource": NAMESPACES, "object": new, "oldObject": old},
                      authorized)


DISABLED_MSG = ('labelling namespace team-a multinetwork.x-k8s.io/admission=disabled takes its pods out of pod '
                "admission (networks, their validation, the permission to use PodNetworks); it needs verb "
                '"exempt" on resource "namespaces" in API group "multinetwork.x-k8s.io" with resourceName team-a, '
                'granted cluster-wide (docs/controller.md "What admission does not see")')


def test_a_tenant_cannot_label_its_namespace_out_of_pod_admission():
    # Whoever may update (or create) the namespace, without the cluster-wide grant: refused.
    assert exemption_errors("UPDATE", namespace("team-a", "disabled"), namespace("team-a")) == [DISABLED_MSG]
    assert exemption_errors("CREATE", namespace("team-a", "disabled")) == [DISABLED_MSG]
    # A grant for another namespace does not do.
    assert exemption_errors("UPDATE", namespace("team-a", "disabled"), namespace("team-a"),
                            may_exempt("team-b")) == [DISABLED_MSG]


def test_the_cluster_wide_grant_exempts_and_keeping_or_removing_the_label_needs_nothing():
    grant = may_exempt("team-a")
    assert exemption_errors("UPDATE", namespace("team-a", "disabled"), namespace("team-a"), grant) == []
    assert exemption_errors("CREATE", namespace("team-a", "disabled"), None, grant) == []
    # An exempt namespace's other updates (labels, the namespace controller's) pass without it.
    assert exemption_errors("UPDATE", namespace("team-a", "disabled", tier="gold"),
                            namespace("team-a", "disabled")) == []
    assert exemption_errors("UPDATE", namespace("team-a"), namespace("team-a", "disabled")) == []
    # Only `disabled` leaves the namespace out (the webhooks' namespaceSelector: NotIn [disabled]).
    assert exemption_errors("UPDATE", namespace("team-a", "enabled"), namespace("team-a")) == []


def test_creating_the_projects_own_namespace_needs_the_grant_too():
    assert exemption_errors("CREATE", namespace("multinetwork-system")) == [
        "the namespace multinetwork-system is left out of pod admission (the project's own); creating it needs "
        'verb "exempt" on resource "namespaces" in API group "multinetwork.x-k8s.io" with resourceName '
        'multinetwork-system, granted cluster-wide (docs/controller.md "What admission does not see")']
    assert exemption_errors("CREATE", namespace("multinetwork-system"), None, may_exempt("multinetwork-system")) == []
    assert exemption_errors("UPDATE", namespace("multinetwork-system", tier="x"), namespace("multinetwork-system")) == []


def test_the_exemption_policy_binds_deny_and_names_what_the_webhooks_leave_out():
    assert EXEMPTION_BINDING["spec"] == {"policyName": EXEMPTION["metadata"]["name"], "validationActions": ["Deny"]}
    assert EXEMPTION["spec"]["failurePolicy"] == "Fail"
    from bridge.operator import admission as bridge_admission
    from podnetwork.kep import admission
    selectors = [hook["namespaceSelector"] for config in admission.webhook_configurations({"url": "https://x"})
                 for hook in config["webhooks"]]
    selectors.append(bridge_admission.webhook_configuration({"url": "https://x"})["webhooks"][0]["namespaceSelector"])
    for selector in selectors:
        # Exactly what the policy guards: the label's `disabled`, and the project's own namespace by name
        # (kube-system exists in every cluster, and kubernetes.io/metadata.name is the API server's).
        assert selector == {"matchExpressions": [
            {"key": LABEL, "operator": "NotIn", "values": ["disabled"]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": ["kube-system", "multinetwork-system"]}]}


def schema_nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for name, sub in (node.get("properties") or {}).items():
        found += schema_nodes(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        found += schema_nodes(node["items"], f"{path}[*]")
    return found


@pytest.mark.parametrize("crd_doc", [PN_CRD, PNA_CRD], ids=["podnetworks", "podnetworkattachments"])
def test_schemas_are_structural(crd_doc):
    # The API server's structural-schema rules that a hand-written CRD can break:
    # every node has a type, a list-map's keys are required, defaults are valid.
    for path, node in schema_nodes(version_of(crd_doc)["schema"]["openAPIV3Schema"]):
        assert node.get("type") in ("object", "array", "string", "integer", "boolean"), path
        if node.get("x-kubernetes-list-type") == "map":
            assert set(node["x-kubernetes-list-map-keys"]) <= set(node["items"]["required"]), path
        if "default" in node:
            jsonschema.validate(node["default"], to_json_schema(node), format_checker=FORMATS)
