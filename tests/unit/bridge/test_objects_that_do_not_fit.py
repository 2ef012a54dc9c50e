"""bridge.translate.Objects: API objects read into their models where they enter the translation.

An object that does not fit its model (the NPWG CRD's `spec.config` is a string,
the KEP's `parametersRefs` entries are objects with a name) is not "missing": a
reference to it fails with InvalidParameters naming the field.
"""

from __future__ import annotations

import pydantic
import pytest

from bridge import npwg, translate
from bridge.translate import params
from bridge.translate.params import ParamsReason
from podnetwork.ground import constants
from podnetwork.kep import api
from podnetwork.kep.api import Network
from tests.unit.bridge_support import NS, attachment, nad, nad_ref, options, options_ref, podnetwork


def test_the_nad_view_reads_metadata_and_config_and_drops_the_rest() -> None:
    obj = nad("dataplane")
    obj["metadata"]["labels"] = {"team": "a"}
    obj["spec"]["unknown"] = {"x": 1}
    view = npwg.NetworkAttachmentDefinition.model_validate(obj)
    assert (view.metadata.namespace, view.metadata.name, view.metadata.labels) == ("nets", "dataplane", {"team": "a"})
    assert view.spec.config is not None and '"type": "bridge"' in view.spec.config
    assert npwg.NetworkAttachmentDefinition.model_validate({"metadata": {"name": "n"}}).spec.config is None


@pytest.mark.parametrize("spec", [{"config": {"type": "bridge"}}, {"config": 5}, "a string"])
def test_the_nad_view_refuses_what_the_npwg_crd_refuses(spec: object) -> None:
    with pytest.raises(pydantic.ValidationError, match="spec"):
        npwg.NetworkAttachmentDefinition.model_validate({"metadata": {"name": "n"}, "spec": spec})


def test_the_options_view_keeps_the_spec_and_says_what_is_wrong_with_it() -> None:
    good = translate.NetworkSelectionOptions.model_validate(options("o", {"mac": "02:00:00:00:00:01"}))
    assert good.spec == {"mac": "02:00:00:00:00:01"} and good.problem is None
    bad = translate.NetworkSelectionOptions.model_validate(options("o", {"colour": "blue"}))
    assert bad.problem is not None and "colour" in bad.problem
    with pytest.raises(pydantic.ValidationError):
        translate.NetworkSelectionOptions.model_validate(options("o", ["mac"]))  # type: ignore[arg-type]


def test_objects_are_typed_and_keyed_as_pods_reference_them() -> None:
    objs = translate.Objects.from_objects([
        podnetwork("blue"), attachment("fast", "blue"), nad("blue"), options("o", {}),
        {"kind": "ConfigMap", "metadata": {"name": "other"}},
    ])
    assert isinstance(objs.podnetworks["blue"], api.PodNetwork)
    assert isinstance(objs.attachments[(NS, "fast")], api.PodNetworkAttachment)
    assert isinstance(objs.nads[("nets", "blue")], npwg.NetworkAttachmentDefinition)
    assert isinstance(objs.options[(NS, "o")], translate.NetworkSelectionOptions)
    assert objs.invalid == {}


def test_a_nad_whose_config_is_not_a_string_is_invalid_not_missing() -> None:
    broken = nad("blue")
    broken["spec"]["config"] = {"type": "bridge"}
    objs = translate.Objects.from_objects([podnetwork("blue"), broken])
    assert ("nets", "blue") not in objs.nads
    got = params.podnetwork_params(api.PodNetwork.model_validate(podnetwork("blue")), objs)
    assert got is not None and got.reason == ParamsReason.INVALID
    assert "does not fit the NetworkAttachmentDefinition schema: spec.config" in got.message


def test_options_whose_spec_is_not_an_object_are_invalid_not_missing() -> None:
    pna = attachment("p", "blue", [options_ref("o")])
    objs = translate.Objects.from_objects([options("o", "mac")])  # type: ignore[arg-type]
    got = params.attachment_params(api.PodNetworkAttachment.model_validate(pna),
                                   api.PodNetwork.model_validate(podnetwork("blue")), objs)
    assert got is not None and got.reason == ParamsReason.INVALID
    assert f"NetworkSelectionOptions {NS}/o does not fit" in got.message and "spec" in got.message


@pytest.mark.parametrize(
    ("objs", "network", "needle"),
    [
        pytest.param([{**podnetwork("blue"), "spec": {"parametersRefs": "nets/blue"}}],
                     Network(podNetworkName="blue"), "PodNetwork blue does not fit its schema: spec.parametersRefs",
                     id="PodNetwork"),
        pytest.param([{**attachment("fast", "blue"), "spec": {"podNetworkName": 7}}],
                     Network(podNetworkAttachmentName="fast"),
                     f"PodNetworkAttachment {NS}/fast does not fit its schema: spec.podNetworkName", id="attachment"),
    ],
)
def test_a_pod_naming_an_object_that_does_not_fit_gets_invalid_parameters(
    objs: list[dict], network: Network, needle: str
) -> None:
    world = translate.Objects.from_objects([*objs, nad("blue")])
    with pytest.raises(translate.TranslationError) as info:
        translate.translate([Network(podNetworkName=constants.DEFAULT_PODNETWORK), network], NS, world)
    assert info.value.reason is translate.Reason.INVALID_PARAMETERS
    assert needle in str(info.value)


def test_from_keyed_keeps_the_callers_keys() -> None:
    no_namespace = nad("n")
    del no_namespace["metadata"]["namespace"]
    objs = translate.Objects.from_keyed(nads={("team-a", "n"): no_namespace},
                                        attachments={(NS, "p"): attachment("p", "blue", [nad_ref("n", "team-a")])})
    assert set(objs.nads) == {("team-a", "n")} and set(objs.attachments) == {(NS, "p")}
