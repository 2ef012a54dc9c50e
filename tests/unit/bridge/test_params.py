"""bridge.translate.params: ParamsReady of the bridge's PodNetworks and attachments (KEP "ParamsReady")."""

from __future__ import annotations

import pytest

from bridge import translate
from bridge.translate import Objects, params
from bridge.translate.params import ParamsReason
from podnetwork.ground.constants import ConditionStatus, ConditionType
from podnetwork.kep import api
from tests.unit.bridge_support import NS, attachment, nad, nad_ref, options, options_ref, podnetwork

DATAPLANE = podnetwork("dataplane")


def kep(obj: dict) -> api.KepObject:
    """The object read into its model, as the bridge's edges read it."""
    return api.parse(obj)


def objects(*objs: dict) -> Objects:
    return Objects.from_objects(objs)


def test_kep_params_ready_is_true_when_the_one_nad_exists_and_is_valid() -> None:
    got = params.podnetwork_params(kep(DATAPLANE), objects(nad("dataplane")))
    assert got is not None
    assert (got.type, got.status, got.reason) == (
        ConditionType.PARAMS_READY, ConditionStatus.TRUE, ParamsReason.READY)
    assert "NetworkAttachmentDefinition nets/dataplane" in got.message


def test_kep_other_providers_podnetworks_are_left_alone() -> None:
    assert params.podnetwork_params(kep(podnetwork("x", provider="example.com/other")), objects()) is None
    no_provider = podnetwork("x")
    del no_provider["spec"]["provider"]
    assert params.podnetwork_params(kep(no_provider), objects(nad("x"))) is None


@pytest.mark.parametrize(
    ("pn", "objs", "reason", "needle"),
    [
        pytest.param(DATAPLANE, [], ParamsReason.NOT_FOUND, "nets/dataplane does not exist", id="NAD missing"),
        pytest.param(DATAPLANE, [nad("dataplane", config="{")], ParamsReason.INVALID, "not valid JSON",
                     id="NPWG 3.2 CNI JSON does not parse"),
        pytest.param(DATAPLANE, [nad("dataplane", config={"plugins": [{"type": "bridge"}, {"type": "a/b"}]})],
                     ParamsReason.INVALID, "plugins[1]", id="NPWG 3.4.1 plugin type with a slash"),
        pytest.param(DATAPLANE, [nad("dataplane", config={"type": ".."})], ParamsReason.INVALID,
                     "bare executable", id="NPWG 3.4.1 plugin type dot-dot"),
        pytest.param(podnetwork("dataplane", nads=[]), [], ParamsReason.INVALID, "found 0", id="no reference"),
        pytest.param(podnetwork("dataplane", nads=[("nets", "a"), ("nets", "b")]), [nad("a"), nad("b")],
                     ParamsReason.INVALID, "found 2", id="two NADs"),
        pytest.param(podnetwork("dataplane", kind="ConfigMap"), [], ParamsReason.UNSUPPORTED_KIND,
                     "ConfigMap", id="unsupported kind"),
    ],
)
def test_kep_params_ready_is_false_with_a_reason_naming_the_object(
    pn: dict, objs: list[dict], reason: ParamsReason, needle: str
) -> None:
    got = params.podnetwork_params(kep(pn), objects(*objs))
    assert got is not None
    assert (got.status, got.reason) == (ConditionStatus.FALSE, reason)
    assert needle in got.message and "PodNetwork dataplane" in got.message


def test_kep_attachment_params_ready_covers_its_nad_override_and_options() -> None:
    pna = attachment("pna1", "dataplane", [nad_ref("special"), options_ref("opts")])
    world = objects(nad("special", namespace=NS), options("opts", {"mac": "02:00:00:00:00:01"}))
    got = params.attachment_params(kep(pna), kep(DATAPLANE), world)
    assert got is not None and got.status == ConditionStatus.TRUE
    assert got.message == (f"NetworkAttachmentDefinition {NS}/special and NetworkSelectionOptions {NS}/opts "
                           "are usable")


@pytest.mark.parametrize(
    ("pna", "objs", "reason"),
    [
        pytest.param(attachment("p", "dataplane", [options_ref("o")]), [], ParamsReason.NOT_FOUND,
                     id="options missing"),
        pytest.param(attachment("p", "dataplane", [options_ref("o")]), [options("o", {"bandwidth": {"x": 1}})],
                     ParamsReason.INVALID, id="NPWG 4.1.2.1.8 invalid options"),
        pytest.param(attachment("p", "dataplane", [nad_ref("n")]), [nad("n", namespace=NS, config="[]")],
                     ParamsReason.INVALID, id="NPWG 3.2 override NAD config is not an object"),
        pytest.param(attachment("p", "dataplane", [{"group": "k8s.cni.cncf.io", "kind": "podParams", "name": "x"}]),
                     [], ParamsReason.UNSUPPORTED_KIND, id="unsupported kind"),
    ],
)
def test_kep_attachment_params_ready_false(pna: dict, objs: list[dict], reason: ParamsReason) -> None:
    got = params.attachment_params(kep(pna), kep(DATAPLANE), objects(*objs))
    assert got is not None and (got.status, got.reason) == (ConditionStatus.FALSE, reason)
    assert f"PodNetworkAttachment {NS}/p" in got.message


def test_kep_attachments_without_refs_or_of_other_providers_get_no_decision() -> None:
    assert params.attachment_params(kep(attachment("p", "dataplane")), kep(DATAPLANE), objects()) is None
    with_refs = attachment("p", "x", [options_ref("o")])
    assert params.attachment_params(kep(with_refs), None, objects()) is None
    assert params.attachment_params(kep(with_refs), kep(podnetwork("x", provider="example.com/o")), objects()) is None


def test_references_name_nads_and_options_with_the_attachments_namespace_by_default() -> None:
    pna = attachment("p", "dataplane", [nad_ref("n"), nad_ref("m", "other"), options_ref("o")])
    assert translate.references(kep(pna)) == ({(NS, "n"), ("other", "m")}, {(NS, "o")})
    assert translate.references(kep(DATAPLANE)) == ({("nets", "dataplane")}, set())


def test_kep_params_ready_keeps_last_transition_time_while_status_stays() -> None:
    pn = {**DATAPLANE, "metadata": {"name": "dataplane", "generation": 3}}
    true = params.podnetwork_params(kep(pn), objects(nad("dataplane")))
    assert true is not None
    first = params.conditions_after(kep(pn), true, now="2026-01-01T00:00:00Z")
    assert first == [{"type": "ParamsReady", "status": "True", "reason": "ParametersReady",
                      "message": true.message, "observedGeneration": 3,
                      "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    pn["status"] = {"conditions": first}
    assert params.conditions_after(kep(pn), true, now="2026-01-02T00:00:00Z") is None
    false = params.podnetwork_params(kep(pn), objects())
    assert false is not None
    second = params.conditions_after(kep(pn), false, now="2026-01-03T00:00:00Z")
    assert second is not None and second[0]["lastTransitionTime"] == "2026-01-03T00:00:00Z"
