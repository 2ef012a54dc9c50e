"""deploy/bridge agrees with the code: the webhook's registration and certificate (with and without cert-manager),
the served port, RBAC for every watch and write."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

import kopf
import yaml
from kopf._cogs.structs import references

from bridge.operator import admission, controller, serviceslices
from bridge.operator import command as bridge_command
from podnetwork.cli import arguments, operatorshell
from podnetwork.kube import client as kube
from tests.unit import webhook_deploy_support as support

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy" / "bridge"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def allowed() -> set[tuple[str, str, str]]:
    role = next(d for d in documents("rbac.yaml") if d["kind"] == "ClusterRole")
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def bridge_args(docs: list[dict[str, Any]] | None = None) -> argparse.Namespace:
    deployment = next(d for d in (docs or documents("deployment.yaml")) if d["kind"] == "Deployment")
    command = support.container(deployment)["command"]
    assert command[:2] == ["podnetwork", "bridge"]
    return support.parsed(command[2:], bridge_command.command.configure)


def test_the_bridge_registers_its_webhook_at_its_service_with_the_certificate_of_its_secret() -> None:
    deployment, service = documents("deployment.yaml")
    args = bridge_args()
    role = next(d for d in documents("rbac.yaml") if d["kind"] == "ClusterRole")
    assert args.webhook and args.manage_webhooks
    assert args.webhook_service == (service["metadata"]["namespace"], service["metadata"]["name"])
    assert args.webhook_secret == "podnetwork-bridge-webhook-tls" and not args.webhook_secret_external
    assert args.webhook_owner == role["metadata"]["name"]
    assert operatorshell.webhook_problem(support.registration_flags(args), turn_on="") is None
    assert [p["port"] for p in service["spec"]["ports"]] == [443]
    assert "volumes" not in deployment["spec"]["template"]["spec"]
    # The webhook's own namespace is exempt, or a bridge pod could wait for a bridge.
    hook = admission.webhook_configuration({"service": {"namespace": "x", "name": "y"}})["webhooks"][0]
    assert deployment["metadata"]["namespace"] in hook["namespaceSelector"]["matchExpressions"][1]["values"]


def test_the_service_reaches_the_port_the_bridge_serves_its_webhook_on() -> None:
    deployment, service = documents("deployment.yaml")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    port = bridge_args().webhook_port
    container_port = next(p for p in container["ports"] if p["name"] == "webhook")
    assert container_port["containerPort"] == port
    assert service["spec"]["ports"][0]["targetPort"] == container_port["name"]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_with_cert_manager_the_bridge_reads_the_secret_a_ca_issued_certificate_fills() -> None:
    component = ROOT / "deploy" / "components" / "cert-manager" / "bridge"
    docs = support.with_component(component, documents("deployment.yaml") + documents("rbac.yaml"))
    args = bridge_args(docs)
    assert args.webhook_secret_external
    assert operatorshell.webhook_problem(support.registration_flags(args), turn_on="") is None
    namespace, service = args.webhook_service
    certificates = {c["metadata"]["name"]: c for c in support.of_kind("Certificate", docs)}
    issuers = {i["metadata"]["name"]: i for i in support.of_kind("Issuer", docs)}
    (serving,) = [c for c in certificates.values() if c["spec"]["secretName"] == args.webhook_secret]
    assert serving["spec"]["dnsNames"] == [f"{service}.{namespace}.svc"]
    ca_secret = issuers[serving["spec"]["issuerRef"]["name"]]["spec"]["ca"]["secretName"]
    (ca,) = [c for c in certificates.values() if c["spec"]["secretName"] == ca_secret]
    assert ca["spec"]["isCA"] is True
    (role,) = support.of_kind("Role", docs)
    secrets = support.grants(role)
    assert ("", "secrets", "get", args.webhook_secret) in secrets
    assert not [g for g in secrets if g[1] == "secrets" and g[2] != "get"]
    # Its objects are its own: deleting one overlay leaves the other's CA and Certificates.
    controller = support.component_resources(ROOT / "deploy" / "components" / "cert-manager" / "controller")
    assert not {d["metadata"]["name"] for d in controller} & {d["metadata"]["name"] for d in docs
                                                              if d["apiVersion"].startswith("cert-manager.io/")}


def test_rbac_allows_every_watch_the_registered_handlers_make() -> None:
    registry = kopf.OperatorRegistry()
    # --dra-claims on: its watch of ResourceClaimTemplates too
    controller.register(registry, controller.Bridge(config=controller.BridgeSettings(dra_driver="dra.example.com")))
    serviceslices.register(registry, serviceslices.Services())
    assert bridge_args().services  # on in the Deployment, as by default
    selectors = [h.selector for reg in (registry._indexing, registry._watching) for h in reg.get_all_handlers()]
    watched = {(s.group or "", s.any_name) for s in selectors}
    assert ("", "pods") in watched and ("k8s.cni.cncf.io", "network-attachment-definitions") in watched
    assert ("", "services") in watched and ("discovery.k8s.io", "endpointslices") in watched
    assert ("resource.k8s.io", "resourceclaimtemplates") in watched
    for group, resource in watched:
        for verb in ("list", "watch"):
            assert (group, resource, verb) in allowed(), (group, resource, verb)


def test_rbac_allows_every_write_the_bridge_makes_and_no_other() -> None:
    source = (ROOT / "bridge" / "operator" / "controller.py").read_text()
    planned = (ROOT / "bridge" / "operator" / "plans.py").read_text()
    # The writes of the controller: Event creation (on pods and on MultiNetworkPolicies) and the
    # renewal of a policy's Event (read, then patched), and the patches its planners return, which
    # it applies as they are: merge patches of pods (selection, gate, reverse status) and of the
    # status of its PodNetworks and attachments (ParamsReady).
    # With --dra-claims, the templates of the claims its webhook adds (controller.reconcile_claims).
    assert re.findall(r"\.create\(([\w.]+),", source) == ["kube.Event", "RESOURCE_CLAIM_TEMPLATE", "kube.Event"]
    assert (kube.api_version_of(controller.RESOURCE_CLAIM_TEMPLATE), kube.plural_of(controller.RESOURCE_CLAIM_TEMPLATE)
            ) == ("resource.k8s.io/v1", "resourceclaimtemplates")
    assert re.findall(r"_api\(\)\.(get|patch)\(([\w.]+),", source) == [("get", "kube.Event"), ("patch", "kube.Event")]
    assert re.findall(r"self\.apply\(([^)]*)\)", source) == ["action.patch", "step.patch", "action.patch"]
    assert re.findall(r"Patch\(([^,]+),", planned) == ['"Pod"', "kind"]
    assert re.findall(r"Patch\(kind, [^\n]*", planned) == [
        "Patch(kind, name, namespace or None, conditions.status_patch(body, new), status=True)"]
    assert re.findall(r"kind == constants\.(\w+)", planned) == ["PODNETWORK_KIND"]  # else an attachment
    assert {controller.writes.resource_of(kind) for kind in ("Pod", "PodNetwork", "PodNetworkAttachment")} == {
        kube.Pod, kube.PodNetwork, kube.PodNetworkAttachment}
    # --manage-webhooks (podnetwork.kube.registration): its configuration, by name where RBAC can.
    # With --enforce-use-permission, its validating configuration too.
    kinds = {c["kind"].lower() + "s" for c in admission.webhook_configurations({"url": "https://x"},
                                                                              enforce_use=True)}
    assert kinds == {"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}
    webhook = {("admissionregistration.k8s.io", kind, verb) for kind in kinds
               for verb in ("create", "patch", "delete")}
    # --enforce-use-permission asks SubjectAccessReviews (UseReviews.may_use, the bridge's API client).
    selection_use = (ROOT / "podnetwork" / "kep" / "admissionreads.py").read_text()
    assert "self.api.create(kube.SubjectAccessReview," in selection_use
    reviews = {("authorization.k8s.io", "subjectaccessreviews", "create")}
    # The Services controller: EndpointSlices created, patched (the planned patches, applied as they
    # are) and deleted; Warning Events on Services; Services themselves never written.
    served = (ROOT / "bridge" / "operator" / "serviceslices.py").read_text()
    assert re.findall(r"\.create\(([\w.]+),", served) == ["kube.EndpointSlice", "kube.Event"]
    assert re.findall(r"\.delete\(([\w.]+),", served) == ["kube.EndpointSlice"]
    assert re.findall(r"writes\.apply\(self\._api\(\), (\w+)", served) == ["patch"]
    assert re.findall(r"Patch\(([^,]+),", (ROOT / "bridge" / "operator" / "services.py").read_text()) == [
        "views.ENDPOINTSLICE_KIND"]
    slices = {("discovery.k8s.io", "endpointslices", verb) for verb in ("create", "patch", "delete")}
    writes = {("", "pods", "patch"), ("", "events", "create"), ("", "events", "patch"), *slices,
              ("multinetwork.x-k8s.io", "podnetworks/status", "patch"),
              ("multinetwork.x-k8s.io", "podnetworkattachments/status", "patch"), *webhook, *reviews,
              ("resource.k8s.io", "resourceclaimtemplates", "create")}
    # kopf's own write: this replica's keep-alive in the peering object (--peering).
    peering = {(references.CLUSTER_PEERINGS_K.group or "", references.CLUSTER_PEERINGS_K.any_name, "patch")}
    assert writes | peering <= allowed()
    read_verbs = {"get", "list", "watch"}
    assert {w for w in allowed() if w[2] not in read_verbs} == writes | peering
    cluster = support.grants(next(d for d in documents("rbac.yaml") if d["kind"] == "ClusterRole"))
    for verb in ("get", "patch", "delete"):
        for kind in kinds:
            assert not support.allows(cluster, "admissionregistration.k8s.io", kind, verb,
                                      "podnetwork")  # the controller's, not the bridge's
            assert ("admissionregistration.k8s.io", kind, verb, admission.CONFIGURATION_NAME) in cluster
    assert not [g for g in cluster if g[1] == "secrets"]
    assert ("rbac.authorization.k8s.io", "clusterroles", "get", bridge_args().webhook_owner) in cluster
    (role,) = [d for d in documents("rbac.yaml") if d["kind"] == "Role"]
    (binding,) = [d for d in documents("rbac.yaml") if d["kind"] == "RoleBinding"]
    secrets = support.grants(role)
    assert secrets == {("", "secrets", "create", ""), ("", "secrets", "get", bridge_args().webhook_secret),
                       ("", "secrets", "patch", bridge_args().webhook_secret),
                       ("discovery.k8s.io", "endpointslices", "list", "")}
    assert role["metadata"]["namespace"] == bridge_args().webhook_service[0]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == "podnetwork-bridge"


def test_the_bridge_peers_through_its_cluster_peering_with_a_priority_per_process_and_its_pod_name() -> None:
    peerings = {d["metadata"]["name"] for d in yaml.safe_load_all((ROOT / "deploy" / "peering" / "peerings.yaml").read_text())
                if d and d["kind"] == "ClusterKopfPeering"}
    args = bridge_args()
    assert args.peering == "podnetwork-bridge" and args.peering in peerings
    # Equal priorities pause every peer (kopf docs "Peering"): two bridges of one template during a rollout.
    # Two replicas start at least microseconds apart; two calls in a row may not.
    first = arguments.parse_priority(arguments.START_TIME)
    time.sleep(0.002)
    second = arguments.parse_priority(arguments.START_TIME)
    assert args.priority is not None and first != second
    deployment = next(d for d in documents("deployment.yaml") if d["kind"] == "Deployment")
    container = support.container(deployment)
    env = {e["name"]: e for e in container.get("env", [])}
    assert "--priority=start-time" in container["command"]
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_rbac_covers_what_kopf_peering_does_with_the_peering_object() -> None:
    group = references.CLUSTER_PEERINGS_K.group or ""
    plural = references.CLUSTER_PEERINGS_K.any_name
    for verb in ("get", "list", "watch", "patch"):
        assert (group, plural, verb) in allowed(), verb


def test_readiness_is_probed_on_readyz_and_liveness_on_healthz_of_the_webhook_port() -> None:
    """/readyz says ready once the webhook is served; behind a Service the registration waits for it."""
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
