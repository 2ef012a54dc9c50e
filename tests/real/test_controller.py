"""The PodNetwork controller against a real API server: conditions through the status
subresource, the in-use finalizer through a real deletionTimestamp, the `default` network's
ValidatingAdmissionPolicy, and the node condition DefaultPodNetworkReady beside the kubelet's.

The emulator tier (tests/api/controller/) proves the decisions; here the API server decides
what a status patch, a finalizer, a pending DELETE and a node status patch really do.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.real.cluster_support import Api, Cluster, Node, eventually, pod_manifest, wait_phase
from tests.real.objects_support import (
    FINALIZER,
    HOLD,
    OTHER_PROVIDER,
    PODNETWORKS,
    Made,
    attachments,
    condition,
    nad_ref,
    pods,
    unique,
)

pytestmark = pytest.mark.usefixtures("components")


def _reason(api: Api, path: str, kind: str = "Ready") -> tuple[str, str] | None:
    found = condition(api.find(path), kind)
    return (found["status"], found["reason"]) if found else None


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_a_podnetwork_is_ready_then_administratively_disabled_and_back_with_generation_and_transition_time(
        api: Api, made: Made) -> None:
    name = unique("cond")
    path = f"{PODNETWORKS}/{name}"
    created = made.podnetwork(name)
    ready = eventually(lambda: condition(api.get(path), "Ready"), "Ready is written")
    assert (ready["status"], ready["reason"]) == ("True", "Ready")
    assert ready["observedGeneration"] == created["metadata"]["generation"] == 1
    first = _when(ready["lastTransitionTime"])
    assert first >= _when(created["metadata"]["creationTimestamp"])

    disabled = api.merge_patch(path, {"spec": {"enabled": False}})
    assert disabled["metadata"]["generation"] == 2
    off = eventually(lambda: (c := condition(api.get(path), "Ready")) and c["status"] == "False" and c,
                     "Ready turns False")
    assert off["reason"] == "AdministrativelyDisabled"
    assert off["observedGeneration"] == 2
    assert _when(off["lastTransitionTime"]) >= first

    api.merge_patch(path, {"spec": {"enabled": True}})
    on = eventually(lambda: (c := condition(api.get(path), "Ready")) and c["status"] == "True" and c,
                    "Ready turns True again")
    assert (on["reason"], on["observedGeneration"]) == ("Ready", 3)
    assert _when(on["lastTransitionTime"]) >= _when(off["lastTransitionTime"])

    # a change of metadata only is no new generation and no transition: the condition stays as written
    api.merge_patch(path, {"metadata": {"labels": {"touched": "yes"}}})
    again = eventually(lambda: api.get(path), "the PodNetwork reads back")
    assert condition(again, "Ready") == on


def test_parameters_refs_naming_a_missing_nad_leave_a_podnetwork_params_not_ready(api: Api, made: Made) -> None:
    name = unique("params")
    made.podnetwork(name, refs=[nad_ref(unique("nowhere"), "absent")])
    path = f"{PODNETWORKS}/{name}"
    eventually(lambda: _reason(api, path) == ("False", "ParamsNotReady"), "Ready False ParamsNotReady")
    # the provider (not the bridge here) never wrote ParamsReady, and the controller never writes it
    assert condition(api.get(path), "ParamsReady") is None


def test_an_attachment_is_ready_only_while_its_podnetwork_is(api: Api, made: Made, ns: str) -> None:
    network = unique("pnafollow")
    made.podnetwork(network)
    eventually(lambda: _reason(api, f"{PODNETWORKS}/{network}") == ("True", "Ready"), "the PodNetwork is Ready")
    pna = f"{attachments(ns)}/att"
    made.create(attachments(ns), {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetworkAttachment",
                                  "metadata": {"name": "att"}, "spec": {"podNetworkName": network}})
    orphan = f"{attachments(ns)}/orphan"
    made.create(attachments(ns), {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetworkAttachment",
                                  "metadata": {"name": "orphan"}, "spec": {"podNetworkName": unique("nowhere")}})
    eventually(lambda: _reason(api, pna) == ("True", "Ready"), "the attachment is Ready")
    eventually(lambda: _reason(api, orphan) == ("False", "PodNetworkNotReady"),
               "an attachment of a missing PodNetwork is PodNetworkNotReady")
    assert "not found" in condition(api.get(orphan), "Ready")["message"]  # type: ignore[index]

    api.merge_patch(f"{PODNETWORKS}/{network}", {"spec": {"enabled": False}})
    eventually(lambda: _reason(api, pna) == ("False", "PodNetworkNotReady"), "the attachment follows to False")
    message = condition(api.get(pna), "Ready")["message"]  # type: ignore[index]
    assert network in message and "AdministrativelyDisabled" in message
    api.merge_patch(f"{PODNETWORKS}/{network}", {"spec": {"enabled": True}})
    eventually(lambda: _reason(api, pna) == ("True", "Ready"), "the attachment follows back to True")


def test_a_podnetwork_named_by_a_pod_waits_on_delete_until_the_pod_is_gone(
        api: Api, made: Made, ns: str, control_plane: Cluster) -> None:
    network = unique("inuse")
    path = f"{PODNETWORKS}/{network}"
    made.podnetwork(network)
    # the pod is held by a gate of the test's own: never scheduled, yet a consumer
    made.pod(ns, pod_manifest("holder", networks=[{"podNetworkName": network}], schedulingGates=[HOLD]))
    eventually(lambda: FINALIZER in api.get(path)["metadata"].get("finalizers", []), "the in-use finalizer is added")
    in_use = eventually(lambda: (c := condition(api.get(path), "InUse")) and c["status"] == "True" and c,
                        "InUse True")
    assert f"{ns}/holder" in in_use["message"]
    # the CRD's printer columns, evaluated by the API server, show why a delete would wait
    header, row = control_plane.kubectl("get", "pn", network, "-o", "wide").stdout.splitlines()
    columns = dict(zip(header.split(), row.split(), strict=False))
    assert (columns["READY"], columns["INUSE"], columns["PROVIDER"], columns["ENABLED"]) == (
        "True", "True", OTHER_PROVIDER, "true")

    api.delete(path)
    pending = api.get(path)
    assert pending["metadata"].get("deletionTimestamp"), "the DELETE is pending on the finalizer"
    assert FINALIZER in pending["metadata"]["finalizers"]

    api.request("DELETE", f"{pods(ns)}/holder", params={"gracePeriodSeconds": "0"})
    eventually(lambda: api.find(path) is None, "the PodNetwork is gone once its last pod is")


def test_an_attachment_keeps_its_podnetwork_in_use_and_a_pod_keeps_the_attachment(
        api: Api, made: Made, ns: str) -> None:
    network = unique("inusepna")
    path = f"{PODNETWORKS}/{network}"
    made.podnetwork(network)
    pna = f"{attachments(ns)}/held"
    made.create(attachments(ns), {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetworkAttachment",
                                  "metadata": {"name": "held"}, "spec": {"podNetworkName": network}})
    eventually(lambda: FINALIZER in api.get(path)["metadata"].get("finalizers", []),
               "the attachment puts the in-use finalizer on its PodNetwork")
    eventually(lambda: _reason(api, pna) == ("True", "Ready"), "the attachment is Ready")
    made.pod(ns, pod_manifest("user", networks=[{"podNetworkAttachmentName": "held"}], schedulingGates=[HOLD]))
    eventually(lambda: FINALIZER in api.get(pna)["metadata"].get("finalizers", []),
               "the pod puts the in-use finalizer on the attachment")

    api.delete(pna)
    assert api.get(pna)["metadata"].get("deletionTimestamp")
    api.delete(path)
    assert api.get(path)["metadata"].get("deletionTimestamp")
    api.request("DELETE", f"{pods(ns)}/user", params={"gracePeriodSeconds": "0"})
    eventually(lambda: api.find(pna) is None, "the attachment goes with its pod")
    eventually(lambda: api.find(path) is None, "the PodNetwork goes with its attachment")


def test_a_pod_that_succeeded_no_longer_keeps_its_attachment_in_use(api: Api, made: Made, ns: str, node: Node) -> None:
    # an attachment to `default` is what a running pod can name here without any other network to attach
    pna = f"{attachments(ns)}/plain"
    made.create(attachments(ns), {"apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetworkAttachment",
                                  "metadata": {"name": "plain"}, "spec": {"podNetworkName": "default"}})
    eventually(lambda: _reason(api, pna) == ("True", "Ready"), "the attachment is Ready")
    # held by a gate until the finalizer is seen, so the pod cannot finish before it is looked for
    made.pod(ns, pod_manifest("once", networks=[{"podNetworkAttachmentName": "plain"}], command=["true"],
                              restartPolicy="Never", schedulingGates=[HOLD]))
    eventually(lambda: FINALIZER in api.get(pna)["metadata"].get("finalizers", []),
               "the pod puts the in-use finalizer on the attachment")
    api.merge_patch(f"{pods(ns)}/once", {"spec": {"schedulingGates": None}})
    wait_phase(api, ns, "once", "Succeeded", timeout=90)
    eventually(lambda: FINALIZER not in api.get(pna)["metadata"].get("finalizers", []),
               "a Succeeded pod no longer counts: the finalizer goes")
    api.delete(pna)
    eventually(lambda: api.find(pna) is None, "the attachment is deleted at once")
    assert api.get(f"{pods(ns)}/once")["status"]["phase"] == "Succeeded"


def test_the_default_podnetwork_cannot_be_deleted(api: Api) -> None:
    code, body = api.request("DELETE", f"{PODNETWORKS}/default", params={"dryRun": "All"})
    assert code == 403, body
    assert "default-podnetwork-protection" in body["message"]
    assert "may not be deleted" in body["message"]
    default = api.get(f"{PODNETWORKS}/default")
    assert not default["metadata"].get("deletionTimestamp")
    assert _reason(api, f"{PODNETWORKS}/default") == ("True", "Ready")


def test_a_node_reports_default_podnetwork_readiness_beside_the_kubelets_conditions(
        api: Api, made: Made, node: Node, control_plane: Cluster) -> None:
    path = f"/api/v1/nodes/{node.name}"

    def node_condition() -> tuple[str, str, str] | None:
        found = condition(api.get(path), "DefaultPodNetworkReady")
        return (found["status"], found["reason"], found["message"]) if found else None

    eventually(lambda: node_condition() == ("True", "DefaultPodNetworkReady", 'default PodNetwork "default" is Ready'),
               "the node says its default PodNetwork is Ready")
    missing = unique("nodedefault")
    made.annotate_node(node.name, "multinetwork.x-k8s.io/default-podnetwork", missing)
    eventually(lambda: node_condition() == (
        "False", "DefaultPodNetworkNotFound", f'default PodNetwork "{missing}" (node override) not found in API'),
        "a node whose override names a missing PodNetwork says so")
    # the strategic-merge patch of status.conditions left the kubelet's own conditions alone
    assert condition(api.get(path), "Ready")["status"] == "True"  # type: ignore[index]
    kinds = [c["type"] for c in api.get(path)["status"]["conditions"]]
    assert {"MemoryPressure", "DiskPressure", "PIDPressure", "Ready"} <= set(kinds)

    made.podnetwork(missing, enabled=False)
    eventually(lambda: (c := node_condition()) and c[:2] == ("False", "DefaultPodNetworkNotReady")
               and "AdministrativelyDisabled" in c[2], "the override exists but is not Ready")
    api.merge_patch(f"{PODNETWORKS}/{missing}", {"spec": {"enabled": True}})
    eventually(lambda: (c := node_condition()) and c[:2] == ("True", "DefaultPodNetworkReady"),
               "the override turned Ready")
