"""deploy/bridge agrees with the code: the webhook configuration, the served port, RBAC for every watch and write."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import kopf
import yaml
from kopf._cogs.structs import references

from bridge.operator import admission, command, controller
from podnetwork.kube import client as kube
from podnetwork.kube import operatorshell

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy" / "bridge"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def allowed() -> set[tuple[str, str, str]]:
    role = next(d for d in documents("rbac.yaml") if d["kind"] == "ClusterRole")
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_the_static_webhook_configuration_is_what_the_code_builds() -> None:
    (static,) = [d for d in documents("webhooks.yaml") if d["kind"] == "MutatingWebhookConfiguration"]
    service = static["webhooks"][0]["clientConfig"]["service"]
    generated = admission.webhook_configuration({"service": {k: v for k, v in service.items() if k != "path"}})
    annotations = static["metadata"].pop("annotations")
    assert static == generated
    certificate = next(d for d in documents("webhooks.yaml") if d["kind"] == "Certificate")
    ns, name = annotations["cert-manager.io/inject-ca-from"].split("/")
    assert (certificate["metadata"]["namespace"], certificate["metadata"]["name"]) == (ns, name)
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["spec"]["dnsNames"]


def test_the_service_reaches_the_port_the_bridge_serves_its_webhook_on() -> None:
    deployment, service = documents("deployment.yaml")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[:3] == ["podnetwork", "bridge", "--webhook"]
    port = int(next(a for a in command if a.startswith("--webhook-port=")).split("=", 1)[1])
    container_port = next(p for p in container["ports"] if p["name"] == "webhook")
    assert container_port["containerPort"] == port
    assert service["spec"]["ports"][0]["targetPort"] == container_port["name"]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    (volume,) = deployment["spec"]["template"]["spec"]["volumes"]
    certificate = next(d for d in documents("webhooks.yaml") if d["kind"] == "Certificate")
    assert volume["secret"]["secretName"] == certificate["spec"]["secretName"]
    # The webhook's own namespace is exempt, or a bridge pod could wait for a bridge.
    hook = next(d for d in documents("webhooks.yaml") if d["kind"] == "MutatingWebhookConfiguration")["webhooks"][0]
    exempt = hook["namespaceSelector"]["matchExpressions"][1]["values"]
    assert deployment["metadata"]["namespace"] in exempt


def test_rbac_allows_every_watch_the_registered_handlers_make() -> None:
    registry = kopf.OperatorRegistry()
    controller.register(registry, controller.Bridge())
    selectors = [h.selector for reg in (registry._indexing, registry._watching) for h in reg.get_all_handlers()]
    watched = {(s.group or "", s.any_name) for s in selectors}
    assert ("", "pods") in watched and ("k8s.cni.cncf.io", "network-attachment-definitions") in watched
    for group, resource in watched:
        for verb in ("list", "watch"):
            assert (group, resource, verb) in allowed(), (group, resource, verb)


def test_rbac_allows_every_write_the_bridge_makes_and_no_other() -> None:
    source = (ROOT / "bridge" / "operator" / "controller.py").read_text()
    # The writes in the code: merge patches (pods, status subresources) and Event creation.
    # The other create registers the webhook configuration, only with --manage-webhooks, which
    # the Deployment does not pass (cert-manager and the static configuration do that job).
    assert re.findall(r"\.create\(([\w.]+),", source) == ["kube.Event", "resource"]
    assert "resource = kube.MutatingWebhookConfiguration" in source
    deployment, _ = documents("deployment.yaml")
    assert "--manage-webhooks" not in deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert set(controller._RESOURCES.values()) == {kube.Pod, kube.PodNetwork, kube.PodNetworkAttachment}
    assert set(re.findall(r"self\.patch\((_pod\(key\)|ref), ", source)) == {"_pod(key)", "ref"}
    assert re.findall(r"self\.patch\(ref, [^\n]*", source) == ["self.patch(ref, conditions.status_patch(body, new), status=True)"]
    writes = {("", "pods", "patch"), ("", "events", "create"),
              ("multinetwork.x-k8s.io", "podnetworks/status", "patch"),
              ("multinetwork.x-k8s.io", "podnetworkattachments/status", "patch")}
    # kopf's own write: this replica's keep-alive in the peering object (--peering).
    peering = {(references.CLUSTER_PEERINGS_K.group or "", references.CLUSTER_PEERINGS_K.any_name, "patch")}
    assert writes | peering <= allowed()
    read_verbs = {"get", "list", "watch"}
    assert {w for w in allowed() if w[2] not in read_verbs} == writes | peering


def bridge_args() -> argparse.Namespace:
    deployment, _ = documents("deployment.yaml")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    argv = [*container["command"], *container.get("args", [])]
    assert argv[:2] == ["podnetwork", "bridge"]
    parser = argparse.ArgumentParser()
    command.command.configure(parser)
    return parser.parse_args(argv[2:])


def test_the_bridge_peers_through_its_cluster_peering_with_a_priority_per_process_and_its_pod_name() -> None:
    peerings = {d["metadata"]["name"] for d in yaml.safe_load_all((ROOT / "deploy" / "peering" / "peerings.yaml").read_text())
                if d and d["kind"] == "ClusterKopfPeering"}
    args = bridge_args()
    assert args.peering == "podnetwork-bridge" and args.peering in peerings
    # Equal priorities pause every peer (kopf docs "Peering"): two bridges of one template during a rollout.
    first, second = (operatorshell.parse_priority(operatorshell.START_TIME) for _ in range(2))
    assert args.priority is not None and first != second
    deployment, _ = documents("deployment.yaml")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container.get("env", [])}
    assert "--priority=start-time" in container["command"]
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_rbac_covers_what_kopf_peering_does_with_the_peering_object() -> None:
    group = references.CLUSTER_PEERINGS_K.group or ""
    plural = references.CLUSTER_PEERINGS_K.any_name
    for verb in ("get", "list", "watch", "patch"):
        assert (group, plural, verb) in allowed(), verb


def test_readiness_is_probed_on_readyz_and_liveness_on_healthz_of_the_webhook_port() -> None:
    """/readyz says ready once the webhook is served (and registered under --manage-webhooks)."""
    from podnetwork.kube import webhooks

    (deployment,) = [d for d in documents("deployment.yaml") if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == webhooks.READY_PATH
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["port"] == "webhook"


def test_the_metrics_port_the_deployment_declares_is_the_one_the_bridge_serves_on_the_pods_address() -> None:
    deployment, _ = documents("deployment.yaml")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    flags = dict(a.split("=", 1) for a in container["command"] if a.startswith("--metrics-"))
    declared = next(p for p in container["ports"] if p["name"] == "metrics")
    assert int(flags["--metrics-port"]) == declared["containerPort"]
    assert flags["--metrics-host"] == "0.0.0.0", "Prometheus scrapes the pod's address, not its loopback"
