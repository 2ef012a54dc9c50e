"""bridge.operator.controller's memory: the reference index that makes NAD events precise, and
the rule that an older body never replaces a newer one."""

from __future__ import annotations

from bridge.operator import controller
from podnetwork import constants
from tests.unit.bridge_support import NS, attachment, nad_ref, options_ref, podnetwork

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
    assert bridge.podnetworks["a"]["metadata"]["resourceVersion"] == "10"
    assert bridge.nad_users[("nets", "new")] == {(PN, "", "a")}


def test_translations_read_what_the_bridge_remembers() -> None:
    bridge = controller.Bridge()
    bridge.remember_podnetwork(podnetwork("a"))
    bridge.nads[("nets", "a")] = {"kind": "NetworkAttachmentDefinition",
                                  "metadata": {"name": "a", "namespace": "nets"}, "spec": {}}
    objects = bridge.objects()
    assert set(objects.podnetworks) == {"a"} and set(objects.nads) == {("nets", "a")}
