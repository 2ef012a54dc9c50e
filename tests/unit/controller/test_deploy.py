"""deploy/controller and deploy/peering agree with the code: the webhooks' registration and
certificate (with and without cert-manager), RBAC for every write, and the kopf peering the
replicas elect their active one by."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

import yaml
from kopf._cogs.structs import references

from podnetwork.cli import operatorshell
from podnetwork.commands import controller as command
from podnetwork.kep import admission
from tests.unit import webhook_deploy_support as support

ROOT = Path(__file__).resolve().parents[3] / "deploy"
DEPLOY = ROOT / "controller"
PEERING = ROOT / "peering"


def documents(name: str, directory: Path = DEPLOY) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((directory / name).read_text()) if d]


def of_kind(kind: str, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def deployment() -> dict[str, Any]:
    (found,) = of_kind("Deployment", documents("deployment.yaml"))
    return found


def container_args(deploy: dict[str, Any]) -> argparse.Namespace:
    """The controller container's command line as `podnetwork controller` parses it."""
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    argv = [*container.get("command", []), *container.get("args", [])]
    assert argv[:2] == ["podnetwork", "controller"], argv
    parser = argparse.ArgumentParser()
    command.command.configure(parser)
    return parser.parse_args(argv[2:])


def peering_crds() -> list[dict[str, Any]]:
    return of_kind("CustomResourceDefinition", documents("peering-crds.yaml", PEERING))


def cluster_peerings() -> set[str]:
    return {d["metadata"]["name"] for d in of_kind("ClusterKopfPeering", documents("peerings.yaml", PEERING))}


def allowed(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_the_controller_registers_its_webhooks_at_its_service_with_the_certificate_of_its_secret():
    deploy = deployment()
    args = container_args(deploy)
    (service,) = of_kind("Service", documents("deployment.yaml"))
    role = next(d for d in documents("rbac.yaml") if d["kind"] == "ClusterRole")
    assert args.manage_webhooks
    assert args.webhook_service == (service["metadata"]["namespace"], service["metadata"]["name"])
    assert args.webhook_secret == "podnetwork-webhook-tls" and not args.webhook_secret_external
    # The owner whose deletion (kubectl delete -k deploy/controller) deletes the configurations.
    assert args.webhook_owner == role["metadata"]["name"]
    assert operatorshell.webhook_problem(support.registration_flags(args), turn_on="") is None
    # The configurations call the Service on 443, which reaches the served port.
    assert [p["port"] for p in service["spec"]["ports"]] == [443]
    # No Secret to mount: a pod never waits in ContainerCreating for a certificate someone else makes.
    assert "volumes" not in deploy["spec"]["template"]["spec"]
    assert args.webhook_cert is None and args.webhook_key is None
    # The controller's own namespace is exempt from its webhooks (failurePolicy Fail).
    for obj in admission.webhook_configurations({"service": {"namespace": "x", "name": "y"}}):
        exempt = obj["webhooks"][0]["namespaceSelector"]["matchExpressions"][1]["values"]
        assert deploy["metadata"]["namespace"] in exempt


def test_no_webhook_configuration_is_applied_from_deploy():
    # They exist only once a replica answers (podnetwork.kube.registration): applied statically,
    # with failurePolicy Fail, they refused every pod while nothing could answer them.
    for path in sorted(ROOT.rglob("*.yaml")):
        for doc in support.documents(path):
            assert not doc.get("kind", "").endswith("WebhookConfiguration"), path


def test_rbac_allows_the_registration_and_the_secret_and_by_name_where_rbac_can():
    cluster = support.grants(next(d for d in documents("rbac.yaml") if d["kind"] == "ClusterRole"))
    (role,) = of_kind("Role", documents("rbac.yaml"))
    (binding,) = of_kind("RoleBinding", documents("rbac.yaml"))
    args = container_args(deployment())
    namespace, _ = args.webhook_service
    group = "admissionregistration.k8s.io"
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        assert (group, plural, "create", "") in cluster  # RBAC cannot name what is created
        for verb in ("get", "patch", "delete"):
            assert (group, plural, verb, admission.CONFIGURATION_NAME) in cluster
            assert not support.allows(cluster, group, plural, verb, "another-webhook")
    assert ("rbac.authorization.k8s.io", "clusterroles", "get", args.webhook_owner) in cluster
    assert not support.allows(cluster, "rbac.authorization.k8s.io", "clusterroles", "get", "cluster-admin")
    # Secrets only in the Service's namespace, and only the one named, but for `create`.
    assert role["metadata"]["namespace"] == namespace
    secrets = support.grants(role)
    assert ("", "secrets", "create", "") in secrets
    for verb in ("get", "patch"):
        assert ("", "secrets", verb, args.webhook_secret) in secrets
        assert not support.allows(secrets, "", "secrets", verb, "another-secret")
    assert ("discovery.k8s.io", "endpointslices", "list", "") in secrets
    assert not [g for g in cluster if g[1] == "secrets"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": deployment()["spec"]["template"]["spec"][
        "serviceAccountName"], "namespace": namespace}]


def test_with_cert_manager_the_controller_reads_the_secret_a_ca_issued_certificate_fills():
    component = ROOT / "components" / "cert-manager" / "controller"
    docs = support.with_component(component, documents("deployment.yaml") + documents("rbac.yaml"))
    (deploy,) = of_kind("Deployment", docs)
    args = container_args(deploy)
    assert args.webhook_secret_external
    assert operatorshell.webhook_problem(support.registration_flags(args), turn_on="") is None
    namespace, service = args.webhook_service
    certificates = {c["metadata"]["name"]: c for c in of_kind("Certificate", docs)}
    issuers = {i["metadata"]["name"]: i for i in of_kind("Issuer", docs)}
    (serving,) = [c for c in certificates.values() if c["spec"]["secretName"] == args.webhook_secret]
    assert serving["metadata"]["namespace"] == namespace
    assert serving["spec"]["dnsNames"] == [f"{service}.{namespace}.svc"]
    # Signed by a CA (whose ca.crt stays through the serving certificate's renewals), not self-signed.
    ca_secret = issuers[serving["spec"]["issuerRef"]["name"]]["spec"]["ca"]["secretName"]
    (ca,) = [c for c in certificates.values() if c["spec"]["secretName"] == ca_secret]
    assert ca["spec"]["isCA"] is True
    assert "selfSigned" in issuers[ca["spec"]["issuerRef"]["name"]]["spec"]
    # Nothing left to write: only reading the Secret.
    (role,) = of_kind("Role", docs)
    secrets = support.grants(role)
    assert ("", "secrets", "get", args.webhook_secret) in secrets
    assert not [g for g in secrets if g[1] == "secrets" and g[2] != "get"]
    (overlay,) = documents("kustomization.yaml", ROOT / "cert-manager" / "controller")
    assert overlay["resources"] == ["../../controller"]
    assert overlay["components"] == ["../../components/cert-manager/controller"]


def test_webhook_service_reaches_the_served_port_of_every_replica():
    deploy = deployment()
    (service,) = of_kind("Service", documents("deployment.yaml"))
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container_args(deploy).webhook_port == 9443
    assert container["ports"][0]["containerPort"] == 9443
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_rbac_allows_every_write_the_controller_makes():
    role = next(d for d in documents("rbac.yaml") if d["kind"] == "ClusterRole")
    for need in [("multinetwork.x-k8s.io", "podnetworks", "create"),
                 ("multinetwork.x-k8s.io", "podnetworks", "patch"),
                 ("multinetwork.x-k8s.io", "podnetworks/status", "patch"),
                 ("multinetwork.x-k8s.io", "podnetworkattachments/status", "patch"),
                 ("", "pods", "watch"), ("", "pods", "patch"), ("", "nodes/status", "patch"),
                 ("", "namespaces", "watch"), ("", "namespaces", "get"),
                 # --enforce-use-permission: Controller.may_use, Controller.attachment_network
                 ("authorization.k8s.io", "subjectaccessreviews", "create"),
                 ("multinetwork.x-k8s.io", "podnetworkattachments", "get")]:
        assert need in allowed(role), need


def test_peering_crds_are_v1_crds_that_kopf_discovers_as_its_peering_resources():
    crds = {d["spec"]["names"]["kind"]: d for d in peering_crds()}
    assert set(crds) == {"ClusterKopfPeering", "KopfPeering"}
    selectors = {"ClusterKopfPeering": references.CLUSTER_PEERINGS_K,
                 "KopfPeering": references.NAMESPACED_PEERINGS_K}
    for kind, crd in crds.items():
        spec = crd["spec"]
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert crd["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"
        assert spec["scope"] == ("Cluster" if kind == "ClusterKopfPeering" else "Namespaced")
        (version,) = spec["versions"]
        assert version["served"] and version["storage"]
        resource = references.Resource(
            group=spec["group"], version=version["name"], plural=spec["names"]["plural"],
            kind=kind, namespaced=spec["scope"] == "Namespaced")
        assert selectors[kind].check(resource), (kind, selectors[kind])


def test_peering_status_is_kept_whole_so_peers_see_each_others_keepalives():
    # kopf writes {identity: {priority, lifetime, lastseen}} under `status`, with
    # identities (pod names) as keys: a structural schema without
    # x-kubernetes-preserve-unknown-fields would prune them all, every replica
    # would see no peer, and all of them would reconcile at once.
    for crd in peering_crds():
        (version,) = crd["spec"]["versions"]
        schema = version["schema"]["openAPIV3Schema"]
        assert schema["type"] == "object"
        status = schema["properties"]["status"]
        assert status == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        # kopf merge-patches the object itself: a status subresource would drop those patches.
        assert "status" not in version.get("subresources", {})


def test_deployment_peers_its_replicas_through_an_existing_cluster_peering():
    deploy = deployment()
    args = container_args(deploy)
    assert args.peering in cluster_peerings()
    assert command.peering_options(args)["standalone"] is False
    assert deploy["spec"]["replicas"] >= 2
    assert deploy["spec"]["strategy"]["type"] == "RollingUpdate"


def test_replicas_sharing_one_template_still_get_distinct_priorities():
    # Equal priorities pause every peer (kopf docs "Peering"): a fixed integer
    # in a template shared by two replicas would leave the cluster unserved.
    (container,) = deployment()["spec"]["template"]["spec"]["containers"]
    assert f"--priority={command.START_TIME}" in container["command"]
    pod_id = {e["name"]: e for e in container.get("env", [])}["POD_ID"]
    assert pod_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_rbac_covers_what_kopf_peering_does_with_the_peering_object():
    role = next(d for d in documents("rbac.yaml") if d["kind"] == "ClusterRole")
    group = references.CLUSTER_PEERINGS_K.group
    plural = references.CLUSTER_PEERINGS_K.any_name
    for verb in ("get", "list", "watch", "patch"):
        assert (group, plural, verb) in allowed(role), verb


def test_disruption_budget_keeps_a_webhook_backend_of_this_deployment():
    (pdb,) = of_kind("PodDisruptionBudget", documents("deployment.yaml"))
    deploy = deployment()
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert 0 < pdb["spec"]["minAvailable"] < deploy["spec"]["replicas"]


def test_kustomizations_name_existing_files():
    for directory in (DEPLOY, PEERING):
        (kustomization,) = documents("kustomization.yaml", directory)
        for name in kustomization["resources"]:
            assert (directory / name).exists(), (directory, name)
    (peering,) = documents("kustomization.yaml", PEERING)
    assert set(peering["resources"]) == {"peering-crds.yaml", "peerings.yaml"}


def test_every_deployment_in_deploy_that_peers_names_an_existing_cluster_peering():
    # deploy/bridge and any later component: a missing peering object keeps
    # kopf paused forever (`--peering` makes peering mandatory).
    names = cluster_peerings()
    for path in sorted(ROOT.glob("*/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "Deployment":
                continue
            for container in doc["spec"]["template"]["spec"]["containers"]:
                argv = shlex.split(" ".join([*container.get("command", []), *container.get("args", [])]))
                for i, arg in enumerate(argv):
                    if arg == "--peering":
                        assert argv[i + 1] in names, (path, argv[i + 1])
                    elif arg.startswith("--peering="):
                        assert arg.split("=", 1)[1] in names, (path, arg)


def test_readiness_is_probed_on_readyz_and_liveness_on_healthz_of_the_webhook_port() -> None:
    """/readyz says ready once the webhooks are served; behind a Service the registration waits for it."""
    from podnetwork.kube import webhooks

    (container,) = deployment()["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == webhooks.READY_PATH
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["port"] == "webhook"


def test_the_metrics_port_the_deployment_declares_is_the_one_the_controller_serves_on_the_pods_address():
    deploy = deployment()
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    declared = next(p for p in container["ports"] if p["name"] == "metrics")
    args = container_args(deploy)
    assert args.metrics_port == declared["containerPort"]
    assert args.metrics_host == "0.0.0.0", "Prometheus scrapes the pod's address, not its loopback"
