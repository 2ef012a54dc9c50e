"""bridge.operator.controller's memory: the reference index that makes NAD events precise, and
the rule that an older body never replaces a newer one."""

from __future__ import annotations

import logging

import pytest

from bridge.operator import controller
from podnetwork.ground import constants
from tests.unit.bridge_support import NS, attachment, nad, nad_ref, options_ref, podnetwork

PN = constants.PODNETWORK_KIND
PNA = constants.ATTACHMENT_KIND


def with_rv(obj: dict, rv: str) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv}}


def test_a_nad_event_reaches_exactly_the_objects_that_name_it() -> None:
    bridge = controller.Bridge()
    bridge.remember_podnetwork(podnetwork("a", nads=[("nets", "shared")]))
    bridge.remember_podnetwork(podnetwork("b", nads=[("nets", "shared")]))
    bridge.remember_podnetwork(podnetwork("c", nads=[("nets", "own")]))
    bridge.remember_attachment(attachment("p", "a", [nad_ref("override"), options_ref("o")]))
    assert bridge.nad_users[("nets", "shared")] == {(PN, "", "a"), (PN, "", "b")}
    assert bridge.nad_users[(NS, "override")] == {(PNA, NS, "p")}
    assert bridge.options_users[(NS, "o")] == {(PNA, NS, "p")}
    assert bridge.attachments_of("a") == {(PNA, NS, "p")}


def test_the_index_follows_changed_and_deleted_references() -> None:
    bridge = controller.Bridge()
    bridge.remember_podnetwork(with_rv(podnetwork("a", nads=[("nets", "old")]), "5"))
    bridge.remember_podnetwork(with_rv(podnetwork("a", nads=[("nets", "new")]), "6"))
    assert bridge.nad_users.get(("nets", "old"), set()) == set()
    assert bridge.nad_users[("nets", "new")] == {(PN, "", "a")}
    bridge.forget((PN, "", "a"))
    assert "a" not in bridge.podnetworks
    assert bridge.nad_users[("nets", "new")] == set()


def test_an_older_body_never_replaces_a_newer_one() -> None:
    bridge = controller.Bridge()
    bridge.remember_podnetwork(with_rv(podnetwork("a", nads=[("nets", "new")]), "10"))
    bridge.remember_podnetwork(with_rv(podnetwork("a", nads=[("nets", "old")]), "9"))
    assert bridge.podnetworks["a"].metadata.resource_version == "10"
    assert bridge.nad_users[("nets", "new")] == {(PN, "", "a")}


def test_translations_read_what_the_bridge_remembers() -> None:
    bridge = controller.Bridge()
    bridge.remember_podnetwork(podnetwork("a"))
    bridge.remember_nad({"kind": "NetworkAttachmentDefinition",
                         "metadata": {"name": "a", "namespace": "nets"}, "spec": {}})
    objects = bridge.objects()
    assert set(objects.podnetworks) == {"a"} and set(objects.nads) == {("nets", "a")}


def test_a_body_that_does_not_fit_its_model_is_ignored_with_a_warning_and_the_last_good_one_stays(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bridge = controller.Bridge()
    good = with_rv(podnetwork("a", nads=[("nets", "first")]), "5")
    assert bridge.remember_podnetwork(good) == (PN, "", "a")
    odd = with_rv({**good, "spec": {**good["spec"], "parametersRefs": "nets/second"}}, "6")
    with caplog.at_level(logging.WARNING):
        assert bridge.remember_podnetwork(odd) is None
    assert "ignored PodNetwork /a: it does not fit its model: spec.parametersRefs" in caplog.text
    assert bridge.podnetworks["a"].metadata.resource_version == "5"
    assert bridge.nad_users[("nets", "first")] == {(PN, "", "a")}


def test_a_nad_whose_config_is_not_a_string_is_ignored_and_the_last_good_one_stays(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bridge = controller.Bridge()
    assert bridge.remember_nad(with_rv(nad("a"), "3")) == ("nets", "a")
    broken = with_rv(nad("a"), "4")
    broken["spec"]["config"] = {"type": "bridge"}
    with caplog.at_level(logging.WARNING):
        assert bridge.remember_nad(broken) is None
    assert "ignored NetworkAttachmentDefinition nets/a" in caplog.text and "spec.config" in caplog.text
    assert bridge.nads[("nets", "a")].metadata.resource_version == "3"
