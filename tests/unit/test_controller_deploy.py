"""deploy/controller agrees with the code: webhook configurations, paths, RBAC for every write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from podnetwork import admission

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "controller"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_static_webhook_configurations_are_what_manage_webhooks_registers():
    static = [d for d in documents("webhooks.yaml") if d["kind"].endswith("WebhookConfiguration")]
    service = static[0]["webhooks"][0]["clientConfig"]["service"]
    generated = admission.webhook_configurations(
        {"service": {k: v for k, v in service.items() if k != "path"}})
    for obj in static:
        obj["metadata"].pop("annotations")
    assert static == generated


def test_webhook_service_reaches_the_served_port():
    deployment, service = documents("deployment.yaml")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--webhook-port=9443" in container["command"]
    assert container["ports"][0]["containerPort"] == 9443
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"
    assert deployment["spec"]["replicas"] == 1


def test_rbac_allows_every_write_the_controller_makes():
    role = next(d for d in documents("rbac.yaml") if d["kind"] == "ClusterRole")
    allowed = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    for need in [("multinetwork.x-k8s.io", "podnetworks", "create"),
                 ("multinetwork.x-k8s.io", "podnetworks", "patch"),
                 ("multinetwork.x-k8s.io", "podnetworks/status", "patch"),
                 ("multinetwork.x-k8s.io", "podnetworkattachments/status", "patch"),
                 ("", "pods", "watch"), ("", "pods", "patch"), ("", "nodes/status", "patch"),
                 ("", "namespaces", "watch")]:
        assert need in allowed, need
