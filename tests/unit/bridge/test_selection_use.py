"""Which entries of an NPWG selection need `use` of a PodNetwork (`bridge.operator.selectionuse.uses`),
how the selection is read for it, and which requests the API server sends the bridge's validating
webhook (its matchConditions, evaluated with cel-python). Pure functions."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import translate
from bridge.operator import admission, admissionapp, selectionuse
from bridge.operator.selectionuse import NadUse
from podnetwork.ground import constants
from podnetwork.kep.admissionreview import AdmissionRequest
from podnetwork.kep.usepermission import Subject, UseUnavailable
from tests.unit.bridge_support import nad, podnetwork
from tests.unit.crd_support import cel

NPWG = constants.NPWG_NETWORKS_ANNOTATION
KEP = constants.NETWORKS_ANNOTATION
RECORD = constants.ATTACHMENT_NETWORKS_ANNOTATION
NS = "app"


def attachment(name: str, network: str) -> dict[str, Any]:
    return {"apiVersion": constants.API_VERSION, "kind": constants.ATTACHMENT_KIND,
            "metadata": {"name": name, "namespace": NS}, "spec": {"podNetworkName": network}}


def objects(*extra: dict[str, Any]) -> translate.Objects:
    return translate.Objects.from_objects([
        podnetwork("default", nads=[("nets", "cluster")]), nad("cluster", "nets"),
        podnetwork("dataplane", nads=[("nets", "dataplane")]), nad("dataplane", "nets"),
        podnetwork("storage", nads=[("nets", "storage")]),
        podnetwork("foreign", nads=[("nets", "foreign-nad")], provider="example.com/other"),
        nad("plain", "nets"), *extra])


def pod(annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": NS,
                                                           "annotations": annotations},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}


def request(new: dict[str, str], old: dict[str, str] | None = None, *, subresource: str = "") -> AdmissionRequest:
    body: dict[str, Any] = {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": NS,
                            "operation": "CREATE" if old is None else "UPDATE", "object": pod(new),
                            "subResource": subresource}
    if old is not None:
        body["oldObject"] = pod(old)
    return AdmissionRequest.model_validate(body)


def needed(new: dict[str, str], old: dict[str, str] | None = None, objs: translate.Objects | None = None,
           **kw: Any) -> list[NadUse]:
    return selectionuse.uses(request(new, old, **kw), objs or objects())


def test_a_nad_backing_a_bridge_podnetwork_needs_use_of_it_and_others_need_nothing() -> None:
    assert needed({NPWG: "nets/dataplane"}) == [NadUse(0, ("nets", "dataplane"), ("dataplane",))]
    # A NAD no PodNetwork backs (plain NPWG), one backing another provider's PodNetwork, one that
    # does not exist, one in the pod's namespace of the same name: nothing to ask.
    assert needed({NPWG: "nets/plain,nets/foreign-nad,nets/nowhere,dataplane"}) == []


def test_a_nad_backing_default_needs_nothing() -> None:
    assert needed({NPWG: "nets/cluster"}) == []


def test_a_podnetwork_named_in_the_kep_annotation_exempts_its_nad_and_only_its_own() -> None:
    kep = json.dumps([{"podNetworkName": "default"}, {"podNetworkName": "dataplane", "interfaceName": "net1"}])
    assert needed({KEP: kep, NPWG: '[{"name":"dataplane","namespace":"nets","interface":"net1"}]'}) == []
    assert needed({KEP: kep, NPWG: "nets/dataplane,nets/storage"}) == [
        NadUse(1, ("nets", "storage"), ("storage",))]
    # A KEP annotation that cannot be read exempts nothing (the controller refuses the pod anyway).
    assert needed({KEP: "not json", NPWG: "nets/dataplane"}) == [NadUse(0, ("nets", "dataplane"), ("dataplane",))]


def test_an_attachment_exempts_the_podnetwork_of_the_admission_record_else_the_one_the_bridge_knows() -> None:
    objs = objects(attachment("fast", "dataplane"))
    kep = json.dumps([{"podNetworkAttachmentName": "fast"}])
    assert needed({KEP: kep, NPWG: "nets/dataplane"}, objs=objs) == []
    # The record wins: it is what the controller checked and what the bridge holds the attachment to.
    assert needed({KEP: kep, RECORD: '{"fast":"storage"}', NPWG: "nets/dataplane"}, objs=objs) == [
        NadUse(0, ("nets", "dataplane"), ("dataplane",))]
    assert needed({KEP: kep, RECORD: '{"fast":"storage"}', NPWG: "nets/storage"}, objs=objs) == []
    # An attachment nobody knows exempts nothing.
    assert needed({KEP: json.dumps([{"podNetworkAttachmentName": "gone"}]), NPWG: "nets/dataplane"},
                  objs=objs) == [NadUse(0, ("nets", "dataplane"), ("dataplane",))]


def test_an_update_needs_use_only_for_the_nads_it_adds_and_so_does_a_status_update() -> None:
    old = {NPWG: "nets/dataplane"}
    assert needed({NPWG: "nets/dataplane@net2"}, old) == []  # the same NAD again, another interface
    assert needed({NPWG: '[{"name":"dataplane","namespace":"nets"},{"name":"storage","namespace":"nets"}]'},
                  old) == [NadUse(1, ("nets", "storage"), ("storage",))]
    assert needed({NPWG: "nets/dataplane,nets/storage"}, {}, subresource="status") == [
        NadUse(0, ("nets", "dataplane"), ("dataplane",)), NadUse(1, ("nets", "storage"), ("storage",))]
    # Other subresources do not carry the pod's annotations.
    assert needed({NPWG: "nets/dataplane"}, {}, subresource="ephemeralcontainers") == []


def test_a_nad_backing_several_podnetworks_lists_them_all_and_one_named_exempts_it() -> None:
    objs = objects(podnetwork("alias", nads=[("nets", "dataplane")]))
    assert needed({NPWG: "nets/dataplane"}, objs=objs) == [NadUse(0, ("nets", "dataplane"), ("alias", "dataplane"))]
    assert needed({KEP: '[{"podNetworkName":"alias"}]', NPWG: "nets/dataplane"}, objs=objs) == []


async def test_a_binding_carrying_a_selection_needs_use_of_every_backed_nad_by_its_sender_alone() -> None:
    binding = AdmissionRequest.model_validate({
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Binding"}, "namespace": NS,
        "operation": "CREATE", "subResource": "binding", "userInfo": {"username": "sched"},
        "object": {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": "web", "namespace": NS, "annotations": {NPWG: "nets/dataplane"}},
                   "target": {"kind": "Node", "name": "n1"}}})
    assert selectionuse.uses(binding, objects()) == [NadUse(0, ("nets", "dataplane"), ("dataplane",))]
    asked: list[tuple[str, str, str]] = []

    async def nobody(subject: Subject, podnetwork: str, namespace: str) -> bool:
        asked.append((subject.user, podnetwork, namespace))
        return False

    refusal = await selectionuse.authorize(binding, objects(), nobody)
    assert asked == [("sched", "dataplane", NS)]  # a Binding carries no pod: no ServiceAccount to ask
    assert refusal is not None and refusal["response"]["allowed"] is False
    assert (refusal["response"]["status"]["code"], refusal["response"]["status"]["reason"]) == (403, "Forbidden")
    message = refusal["response"]["status"]["message"]
    assert message.startswith(f'Pod "web" is forbidden: metadata.annotations[{NPWG}][0]: Forbidden: the user '
                              '"sched" may not use PodNetwork "dataplane" (named through NetworkAttachmentDefinition '
                              f'"nets/dataplane" in {NPWG}), and a Binding\'s annotations are copied onto the pod')


def test_the_selection_is_read_in_both_forms_as_leniently_as_multus_reads_it() -> None:
    refs = selectionuse.references
    assert refs("nets/dataplane@net1, plain ,other/x", NS) == [
        (0, ("nets", "dataplane")), (1, (NS, "plain")), (2, ("other", "x"))]
    assert refs('[{"name":"dataplane","namespace":"nets"},{"name":"plain"}]', NS) == [
        (0, ("nets", "dataplane")), (1, (NS, "plain"))]
    # Go's JSON decoder matches keys in any case and takes the last of duplicates: every reading counts.
    assert (0, ("nets", "dataplane")) in refs('[{"NAME":"dataplane","Namespace":"nets"}]', NS)
    both = refs('[{"name":"plain","name":"dataplane","namespace":"nets"}]', NS)
    assert (0, ("nets", "dataplane")) in both
    # Keys and values the spec refuses (bridge.npwg.parse_selection would ignore the whole annotation)
    # do not hide the NAD: Multus may attach it anyway.
    assert (0, ("nets", "dataplane")) in refs('[{"name":"dataplane","namespace":"nets","mac":"nope"}]', NS)
    assert (0, ("nets", "dataplane")) in refs('{"name":"dataplane","namespace":"nets"}', NS)
    assert refs("", NS) == [] and refs("   ", NS) == []
    assert needed({NPWG: '[{"name":"dataplane","namespace":"nets","ips":["not-an-ip"]}]'}) == [
        NadUse(0, ("nets", "dataplane"), ("dataplane",))]


annotation_values = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=st.sampled_from(list('[]{}",:/@ nets/dataplane-x')), max_size=60),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
                 lambda inner: st.one_of(st.lists(inner, max_size=3),
                                         st.dictionaries(st.sampled_from(["name", "Name", "namespace", "x"]),
                                                         inner, max_size=3)),
                 max_leaves=8).map(json.dumps))


@settings(max_examples=300, deadline=None)
@given(new=annotation_values, old=st.none() | annotation_values, kep=st.none() | annotation_values)
def test_the_decision_never_raises_whatever_the_annotations_say(new: str, old: str | None, kep: str | None) -> None:
    annotations = {NPWG: new} if kep is None else {NPWG: new, KEP: kep, RECORD: kep}
    found = needed(annotations, None if old is None else {NPWG: old})
    assert all(use.podnetworks for use in found)
    assert len({use.nad for use in found}) == len(found)


def sent(body: dict[str, Any]) -> bool:
    """Whether the API server sends this request to the bridge's validating webhook: rules, then matchConditions."""
    (configuration,) = [c for c in admission.webhook_configurations({"url": "https://x"}, enforce_use=True)
                        if c["kind"] == "ValidatingWebhookConfiguration"]
    (hook,) = configuration["webhooks"]
    resource = "/".join(filter(None, ("pods", body.get("subResource"))))
    if not any(body["operation"] in r["operations"] and resource in r["resources"] for r in hook["rules"]):
        return False
    # the API server leaves subResource out of a request on the pod itself
    activation = {"request": {k: body[k] for k in ("operation", "subResource") if body.get(k)},
                  "object": body["object"], "oldObject": body.get("oldObject")}
    return all(bool(cel(c["expression"], activation)) for c in hook["matchConditions"])


def test_only_requests_setting_or_changing_the_selection_reach_the_validating_webhook() -> None:
    with_selection, without = pod({NPWG: "nets/dataplane"}), pod({})
    changed = pod({NPWG: "nets/dataplane,nets/storage"})
    assert sent({"operation": "CREATE", "object": with_selection})
    assert not sent({"operation": "CREATE", "object": without})
    assert not sent({"operation": "CREATE", "object": {"metadata": {"name": "web"}}})  # no annotations at all
    for sub in ("", "status"):
        assert sent({"operation": "UPDATE", "subResource": sub, "object": changed, "oldObject": with_selection})
        assert sent({"operation": "UPDATE", "subResource": sub, "object": with_selection, "oldObject": without})
        assert not sent({"operation": "UPDATE", "subResource": sub, "object": with_selection,
                         "oldObject": with_selection})
        assert not sent({"operation": "UPDATE", "subResource": sub, "object": without, "oldObject": with_selection})
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"}, "target": {"name": "n1"}}
    assert not sent({"operation": "CREATE", "subResource": "binding", "object": binding})
    assert sent({"operation": "CREATE", "subResource": "binding",
                 "object": {**binding, "metadata": {"name": "web", "annotations": {NPWG: "nets/x"}}}})
    # Off by default: nothing registered, nothing sent.
    assert [c["kind"] for c in admission.webhook_configurations({"url": "https://x"})] == [
        "MutatingWebhookConfiguration"]


def test_the_validating_webhook_covers_the_namespaces_of_the_mutating_one() -> None:
    mutating, validating = admission.webhook_configurations({"service": {"namespace": "n", "name": "s"}},
                                                            enforce_use=True)
    assert validating["webhooks"][0]["namespaceSelector"] == mutating["webhooks"][0]["namespaceSelector"]
    assert validating["webhooks"][0]["clientConfig"]["service"]["path"] == admission.VALIDATE_PATH
    assert validating["webhooks"][0]["failurePolicy"] == "Fail"


MULTUS_DEFAULT = selectionuse.MULTUS_DEFAULT_NETWORK


def test_multus_default_network_annotation_naming_a_backed_nad_needs_use_as_a_selection_does() -> None:
    """Multus takes `v1.multus-cni.io/default-network` as the pod's cluster network: a way around
    the selection's check unless it is checked alike."""
    assert needed({MULTUS_DEFAULT: "nets/dataplane"}) == [
        NadUse(0, ("nets", "dataplane"), ("dataplane",), MULTUS_DEFAULT)]
    assert needed({MULTUS_DEFAULT: "nets/plain"}) == []
    assert needed({MULTUS_DEFAULT: "nets/cluster"}) == []  # backs `default`
    assert needed({MULTUS_DEFAULT: "../x/y"}) == []  # names nothing an object can be called
    # Set once, kept by an update: not asked again; changed to a backed NAD: asked.
    assert needed({MULTUS_DEFAULT: "nets/dataplane"}, {MULTUS_DEFAULT: "nets/dataplane"}) == []
    assert needed({MULTUS_DEFAULT: "nets/storage"}, {MULTUS_DEFAULT: "nets/plain"}) == [
        NadUse(0, ("nets", "storage"), ("storage",), MULTUS_DEFAULT)]
    # One NAD named in both places is asked once.
    assert needed({NPWG: "nets/dataplane", MULTUS_DEFAULT: "nets/dataplane"}) == [
        NadUse(0, ("nets", "dataplane"), ("dataplane",))]


def test_a_refusal_for_the_multus_default_network_names_that_annotation() -> None:
    req = request({MULTUS_DEFAULT: "nets/dataplane"})
    (use,) = selectionuse.uses(req, objects())
    answer = selectionuse.refusal(req, use, Subject("alice"), Subject(f"system:serviceaccount:{NS}:default"))
    (cause,) = answer["response"]["status"]["details"]["causes"]
    assert cause["field"] == f"metadata.annotations[{MULTUS_DEFAULT}]"
    assert f'NetworkAttachmentDefinition "nets/dataplane" in {MULTUS_DEFAULT}' in cause["message"]


def test_requests_setting_or_changing_multus_default_network_reach_the_validating_webhook() -> None:
    set_, other = pod({MULTUS_DEFAULT: "nets/dataplane"}), pod({MULTUS_DEFAULT: "nets/storage"})
    assert sent({"operation": "CREATE", "object": set_})
    assert sent({"operation": "UPDATE", "object": other, "oldObject": set_})
    assert sent({"operation": "UPDATE", "subResource": "status", "object": set_, "oldObject": pod({})})
    assert not sent({"operation": "UPDATE", "object": set_, "oldObject": set_})
    both = pod({MULTUS_DEFAULT: "nets/dataplane", NPWG: "nets/x"})
    assert not sent({"operation": "UPDATE", "object": both, "oldObject": both})


# --- what the watch-fed memory cannot vouch for, and the listing that confirms it ---------------


def unvouched(new: dict[str, str], objs: translate.Objects, old: dict[str, str] | None = None) -> list[tuple[str, str]]:
    return selectionuse.unvouched(request(new, old), objs)


def test_memory_vouches_only_for_the_nads_of_the_podnetworks_the_pod_names_in_its_kep_annotation() -> None:
    kep = json.dumps([{"podNetworkName": "dataplane"}])
    # The bridge's own selection: the NAD of a KEP-named PodNetwork, or of `default`.
    assert unvouched({KEP: kep, NPWG: "nets/dataplane"}, objects()) == []
    assert unvouched({NPWG: "nets/cluster"}, objects()) == []
    # A NAD memory knows no PodNetwork of might back one created a moment ago; one it knows
    # might back another now (deleted and created again over it): both are confirmed.
    assert unvouched({KEP: kep, NPWG: "nets/plain,nets/dataplane,nets/storage,other"}, objects()) == [
        ("nets", "plain"), ("nets", "storage"), (NS, "other")]
    # A paused replica's memory has seen nothing: every NAD, even the KEP-named PodNetwork's.
    assert unvouched({KEP: kep, NPWG: "nets/dataplane"}, translate.Objects()) == [("nets", "dataplane")]
    # What an update keeps was checked when it was added; other subresources carry no selection.
    assert unvouched({NPWG: "nets/plain,nets/storage"}, objects(), old={NPWG: "nets/plain"}) == [("nets", "storage")]
    assert selectionuse.unvouched(request({NPWG: "nets/plain"}, {}, subresource="ephemeralcontainers"),
                                  objects()) == []
    assert unvouched({KEP: kep}, translate.Objects()) == []


def test_the_listing_replaces_memorys_podnetworks_keeping_its_body_of_one_listed_that_does_not_fit() -> None:
    memory = objects(podnetwork("alias", nads=[("nets", "dataplane")]), attachment("fast", "dataplane"))
    unfit = {**podnetwork("alias"), "spec": {"parametersRefs": "not a list"}}
    api = translate.Objects.from_objects([podnetwork("dataplane"), podnetwork("storage-v2", nads=[("nets", "storage")]),
                                          unfit])
    seen = selectionuse.listed(memory, api)
    # `default` and `storage` were deleted; `alias` is listed but unreadable: memory's body stays.
    assert sorted(seen.podnetworks) == ["alias", "dataplane", "storage-v2"]
    assert seen.podnetworks["alias"] is memory.podnetworks["alias"]
    assert seen.attachments == memory.attachments and seen.nads == memory.nads
    assert selectionuse.uses(request({NPWG: "nets/storage,nets/dataplane"}), seen) == [
        NadUse(0, ("nets", "storage"), ("storage-v2",)), NadUse(1, ("nets", "dataplane"), ("alias", "dataplane"))]


class Lister:
    """`selectionuse.ListPodNetworks` answering `api`, counting the calls."""

    def __init__(self, api: translate.Objects) -> None:
        self.api = api
        self.calls = 0

    async def podnetworks(self) -> translate.Objects:
        self.calls += 1
        return self.api


async def test_authorize_lists_once_what_memory_cannot_vouch_for_and_decides_over_the_listing() -> None:
    asked: list[tuple[str, str]] = []
    grants = {("system:serviceaccount:app:default", "storage")}

    async def may_use(subject: Subject, podnetwork: str, namespace: str) -> bool:
        asked.append((subject.user, podnetwork))
        return (subject.user, podnetwork) in grants

    # Memory empty (a paused replica): the listing shows the NAD backs `dataplane`, not granted.
    lister = Lister(objects())
    refused = await selectionuse.authorize(request({NPWG: "nets/dataplane,nets/plain"}), translate.Objects(),
                                           may_use, lister.podnetworks)
    assert refused is not None and refused["response"]["status"]["code"] == 403
    assert lister.calls == 1
    # Memory says `storage` (granted) backs nets/storage; the API says it was replaced by
    # `storage-v2` (not granted): the listing decides.
    lister = Lister(translate.Objects.from_objects([podnetwork("storage-v2", nads=[("nets", "storage")])]))
    asked.clear()
    refused = await selectionuse.authorize(request({NPWG: "nets/storage"}), objects(), may_use, lister.podnetworks)
    assert refused is not None and asked == [("system:serviceaccount:app:default", "storage-v2")]
    # The bridge's own selection is decided from memory, without a read.
    lister = Lister(translate.Objects())
    kep = json.dumps([{"podNetworkName": "dataplane"}])
    assert await selectionuse.authorize(request({KEP: kep, NPWG: "nets/dataplane"}), objects(), may_use,
                                        lister.podnetworks) is None
    assert lister.calls == 0


class Stalled:
    """An API client whose LIST never answers."""

    async def list(self, resource: Any, namespace: str | None = None) -> Any:
        await asyncio.Event().wait()


async def test_a_listing_that_does_not_answer_in_time_or_cannot_be_sent_is_unavailable_and_counted() -> None:
    outcomes: list[str] = []
    listing = admissionapp.PodNetworkListing(Stalled(), timeout=0.01, on_read=outcomes.append)
    with pytest.raises(UseUnavailable) as stalled:
        await listing.podnetworks()
    assert str(stalled.value) == ("the bridge could not confirm which PodNetworks back the "
                                  "NetworkAttachmentDefinitions the selection names: the API server did not "
                                  "answer a LIST of PodNetworks within 0.01s")
    with pytest.raises(UseUnavailable, match="the bridge has not connected to the API yet"):
        await admissionapp.PodNetworkListing(None, on_read=outcomes.append).podnetworks()
    assert outcomes == ["failed", "failed"]
