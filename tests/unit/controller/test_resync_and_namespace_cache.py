"""`--resync-interval`, the namespace cache's entries and which reviews read a namespace."""

from __future__ import annotations

import argparse

import pytest

from podnetwork.commands import controller as command
from podnetwork.ground import constants
from podnetwork.kep import admission, controller

PROFILE = constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.command.configure(parser)
    return parser.parse_args(argv)


def test_resync_interval_defaults_to_five_minutes_and_zero_disables_it():
    assert parse().resync_interval == 300.0
    assert parse("--resync-interval", "0").resync_interval == 0.0
    assert parse("--resync-interval", "2.5").resync_interval == 2.5


@pytest.mark.parametrize("bad", ["-1", "soon", "nan"])
def test_resync_interval_refuses_what_is_not_a_number_of_seconds(bad, capsys):
    with pytest.raises(SystemExit):
        parse("--resync-interval", bad)
    assert f"invalid interval {bad!r}: expected a number of seconds, 0 or more" in capsys.readouterr().err


def test_namespace_cache_keeps_the_name_and_only_the_profile_annotation():
    body = {"metadata": {"name": "team", "labels": {"a": "b"}, "uid": "u",
                         "annotations": {PROFILE: '[{"podNetworkName":"x"}]', "other": "y"}}}
    assert controller.namespace_entry(body) == {"metadata": {"name": "team", "annotations": {
        PROFILE: '[{"podNetworkName":"x"}]'}}}
    assert controller.namespace_entry({"metadata": {"name": "plain"}}) == {"metadata": {"name": "plain"}}


def test_controller_lookup_tells_an_unseen_namespace_from_one_without_a_profile():
    ctl = controller.Controller()
    ctl.namespaces["plain"] = controller.namespace_entry({"metadata": {"name": "plain"}})
    assert ctl.namespace("plain") == {"metadata": {"name": "plain"}}
    assert ctl.namespace("new") is admission.UNSEEN


async def test_getter_before_the_operator_started_is_a_clear_error():
    with pytest.raises(admission.NamespaceUnavailable, match="not connected to the API yet"):
        await controller.Controller().fetch_namespace("team")


def review(operation: str = "CREATE", annotations: dict[str, str] | None = None, *,
           host_network: bool = False, kind: str = "Pod") -> dict[str, object]:
    meta: dict[str, object] = {"name": "p", "namespace": "team"}
    if annotations:
        meta["annotations"] = annotations
    return {"kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": kind}, "namespace": "team",
        "operation": operation, "object": {"metadata": meta, "spec": {"hostNetwork": host_network}}}}


def test_only_auto_population_reads_the_namespace():
    assert admission.needs_namespace(review(), admission.Webhook.MUTATING)
    assert not admission.needs_namespace(review(), admission.Webhook.VALIDATING)
    assert not admission.needs_namespace(review("UPDATE"), admission.Webhook.MUTATING)
    assert not admission.needs_namespace(review(annotations={constants.NETWORKS_ANNOTATION: "[]"}),
                                         admission.Webhook.MUTATING)
    assert not admission.needs_namespace(review(host_network=True), admission.Webhook.MUTATING)
    assert not admission.needs_namespace(review(kind="Service"), admission.Webhook.MUTATING)
    assert not admission.needs_namespace({"kind": "AdmissionReview"}, admission.Webhook.MUTATING)
