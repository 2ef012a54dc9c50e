"""docs/deploy.md's install and uninstall, run as written against a real kube-apiserver.

The commands are read from the first `sh` block of "## Install" and of "## Uninstall", so that
the page and this test cannot drift apart: `kubectl` is the kit's, pointed at a cluster of the
test's own, and `make uninstall` runs deploy/uninstall.sh, which finds that kubectl first in
PATH. The one line skipped is `docker build`: there is no container engine here. The later
blocks of "## Install" are not run either: the MultiNetworkPolicy CRD they apply is in `crds/`
already, and the readiness checks need the workloads running.

What this proves:
- the documented install is accepted by a real API server as written: every CRD, admission
  policy, RBAC object, Service and workload of `deploy/`, in the documented order (the peering
  objects only once their CRDs are established);
- the documented uninstall ends clean on what a user would have by then (the `default`
  PodNetwork protected by the policy binding, PodNetworks and an attachment carrying the in-use
  finalizer as the controller writes it, a NAD, the operators' webhook configurations owned by
  their ClusterRoles and their Secret): no CRD of `crds/` nor kopf's peering CRDs (and so no
  peering object, PodNetwork, attachment or NAD), no ValidatingAdmissionPolicy or binding, no
  webhook configuration, no object of `deploy/`, no namespace multinetwork-system; and a second
  uninstall is a clean no-op;
- the optional DRA driver (docs/deploy.md "DRA (optional)") is accepted as applied there, and the
  uninstall removes it, its DeviceClass included.

What it does not prove: the workloads running. There is no image and no node here, so their
pods stay Pending and no controller writes the finalizers, `default` or the webhook
configurations: the test writes them as the components would. Installing the image and running
pods through it is the rest of issue 32.

The uninstall deletes CRDs, so this test starts a control plane of its own (etcd,
kube-apiserver, kube-scheduler and kube-controller-manager, whose garbage collector and
namespace controller the uninstall relies on) instead of using the session's shared cluster.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import shlex
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from bridge.operator import admission as bridge_admission
from podnetwork.ground import constants
from podnetwork.kep import admissionconfig, defaultnet, inuse
from podnetwork.kep.api import PodNetwork, PodNetworkAttachment
from podnetwork.kube import registration, webhooksecret
from tests.real.cluster_support import (
    REPO,
    Api,
    Cluster,
    KitMissing,
    binaries,
    eventually,
    new_root,
)
from tests.real.objects_support import (
    BRIDGE_PROVIDER,
    OTHER_PROVIDER,
    PODNETWORKS,
    attachments,
    nad_body,
    nad_ref,
    nads,
    podnetwork_body,
)

NS = "multinetwork-system"
DOC = REPO / "docs" / "deploy.md"
#: seconds after which a hung uninstall fails the test; the script bounds each of its waits itself
GUARD = 900
DONE = "uninstall: done: podnetwork is uninstalled"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def section_commands(heading: str) -> list[str]:
    """The command lines of the first `sh` block under `## heading` (continuations joined)."""
    section = DOC.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, f"docs/deploy.md ## {heading} has no sh block"
    lines = block.group(1).replace("\\\n", " ").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    try:
        kit, bins = binaries()
    except KitMissing as missing:
        if os.environ.get("CI"):
            pytest.fail(f"the real-cluster tier cannot run in CI: {missing}", pytrace=False)
        pytest.skip(str(missing))
    if "kube-controller-manager" not in bins:
        pytest.skip("the uninstall needs kube-controller-manager (garbage collector, namespace controller)")
    own = Cluster(kit=kit, bins=bins, root=new_root())
    try:
        own.start()
        yield own
    finally:
        own.stop()


def run(cluster: Cluster, line: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A documented command line as a user runs it from the repository root: `kubectl` (and the
    script's kubectl) is the cluster's, first in PATH, with the cluster's KUBECONFIG."""
    argv = shlex.split(line, comments=True)
    assert argv[0] in ("kubectl", "make"), f"a documented command this test does not know how to run: {line}"
    env = cluster.env(PATH=f"{cluster.root / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def names_in(*paths: str) -> list[tuple[str, str]]:
    """(kind, name) of every object in the files (or kustomizations' resources) given."""
    found = []
    for path in paths:
        for doc in yaml.safe_load_all((REPO / path).read_text()):
            if doc:
                found.append((doc["kind"], doc["metadata"]["name"]))
    return found


def command_flag(api: Api, deployment: str, flag: str) -> str:
    """The value of `--flag=VALUE` in a Deployment's first container, as installed."""
    spec = api.get(f"/apis/apps/v1/namespaces/{NS}/deployments/{deployment}")["spec"]["template"]["spec"]
    container = spec["containers"][0]
    for arg in [*container.get("command", []), *container.get("args", [])]:
        if arg.startswith(f"{flag}="):
            return str(arg.split("=", 1)[1])
    raise AssertionError(f"deployment {deployment} has no {flag}")


def register_webhooks(api: Api, cluster: Cluster, deployment: str, component: str,
                      objects: Any) -> None:
    """What `--manage-webhooks` registers for `deployment`, from its installed command line:
    the configurations for its Service, labelled, owned by its ClusterRole (`--webhook-owner`)."""
    owner_name = command_flag(api, deployment, "--webhook-owner")
    role = api.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{owner_name}")
    service_ns, service = command_flag(api, deployment, "--webhook-service").split("/")
    bundle = base64.b64encode((cluster.root / "pki" / "ca.crt").read_bytes()).decode()
    client = {"service": {"name": service, "namespace": service_ns, "port": 443}}
    for body in registration.desired(objects(client), bundle, component,
                                     registration.Owner(owner_name, role["metadata"]["uid"])):
        plural = "mutatingwebhookconfigurations" if body["kind"].startswith("Mutating") else \
            "validatingwebhookconfigurations"
        api.create(f"{ADMISSION}/{plural}", body)


def hold(api: Api, path: str, obj: PodNetwork | PodNetworkAttachment) -> None:
    """The in-use finalizer, written as the controller writes it for an object a pod uses."""
    patch = inuse.finalizer_patch(obj, in_use=True)
    assert patch is not None
    api.merge_patch(path, patch)


def what_a_user_has(api: Api, cluster: Cluster) -> tuple[str, list[str]]:
    """The state an installed podnetwork is in by the time a user uninstalls it, less the pods:
    the user's namespace and the PodNetworks held by the in-use finalizer."""
    held: list[str] = []
    user_ns = f"t-{secrets.token_hex(3)}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": user_ns}})
    nad = f"nad-{secrets.token_hex(3)}"
    api.create(nads(user_ns), nad_body(nad))
    default = api.create(PODNETWORKS, defaultnet.podnetwork())
    suffix = secrets.token_hex(3)
    bodies = [podnetwork_body(f"bridged-{suffix}", provider=BRIDGE_PROVIDER, refs=[nad_ref(user_ns, nad)]),
              podnetwork_body(f"other-{suffix}", provider=OTHER_PROVIDER),
              podnetwork_body(f"disabled-{suffix}", provider=OTHER_PROVIDER, enabled=False)]
    for obj in [default, *(api.create(PODNETWORKS, b) for b in bodies)]:
        name = obj["metadata"]["name"]
        hold(api, f"{PODNETWORKS}/{name}", PodNetwork.model_validate(obj))
        held.append(name)
    attachment = api.create(attachments(user_ns), {
        "apiVersion": f"{constants.GROUP}/v1alpha1", "kind": "PodNetworkAttachment",
        "metadata": {"name": "pna"}, "spec": {"podNetworkName": f"bridged-{suffix}"}})
    hold(api, f"{attachments(user_ns)}/pna", PodNetworkAttachment.model_validate(attachment))
    register_webhooks(api, cluster, "podnetwork-controller", "podnetwork-controller",
                      admissionconfig.webhook_configurations)
    register_webhooks(
        api, cluster, "podnetwork-bridge", "podnetwork-bridge",
        lambda client: bridge_admission.webhook_configurations(client, enforce_use=True))
    api.create(f"/api/v1/namespaces/{NS}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "podnetwork-webhook-tls", "labels": webhooksecret.labels("podnetwork-controller")}})
    return user_ns, held


def protected(api: Api) -> bool:
    """Whether the API server refuses the delete of `default` (a dry run: nothing is deleted)."""
    code, body = api.request("DELETE", f"{PODNETWORKS}/default", params={"dryRun": "All"})
    return code >= 400 and "cluster default network" in str(body)


def left_over(api: Api, cluster: Cluster) -> list[str]:
    """What of podnetwork is still in the cluster."""
    left = []
    for path in ["crds/" + p.name for p in sorted((REPO / "crds").glob("*.yaml"))] + \
            ["deploy/peering/peering-crds.yaml"]:
        for kind, name in names_in(path):
            where = {"CustomResourceDefinition": CRDS,
                     "ValidatingAdmissionPolicy": f"{ADMISSION}/validatingadmissionpolicies",
                     "ValidatingAdmissionPolicyBinding": f"{ADMISSION}/validatingadmissionpolicybindings"}[kind]
            if api.find(f"{where}/{name}") is not None:
                left.append(f"{kind} {name}")
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        for item in api.get(f"{ADMISSION}/{plural}").get("items", []):
            if item["metadata"].get("labels", {}).get(webhooksecret.PART_OF) == webhooksecret.PROJECT:
                left.append(f"{plural} {item['metadata']['name']}")
    if api.find(f"/api/v1/namespaces/{NS}") is not None:
        left.append(f"namespace {NS}")
    # every object of deploy/'s kustomizations but the peering ones (their kind went with its CRD)
    for part in ("namespace", "controller", "bridge", "scheduler", "agent", "dra-driver"):
        got = run(cluster, f"kubectl get -k deploy/{part}/ --ignore-not-found -o name")
        assert got.returncode == 0, got.stderr
        left += got.stdout.split()
    return left


def test_the_documented_install_is_accepted_and_the_documented_uninstall_ends_clean_twice(
        cluster: Cluster) -> None:
    api = cluster.api
    assert api is not None
    install = section_commands("Install")
    skipped = [line for line in install if line.startswith("docker build")]
    assert len(skipped) == 1, install
    for line in install:
        if line in skipped:
            continue
        done = run(cluster, line)
        assert done.returncode == 0, f"{line}:\n{done.stdout}\n{done.stderr}"

    # accepted as written: the objects are there, the way the API server keeps them
    for name in ("podnetworks", "podnetworkattachments"):
        crd = api.get(f"{CRDS}/{name}.{constants.GROUP}")
        assert any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"])
    for kind, name in names_in("deploy/peering/peerings.yaml"):
        assert kind == "ClusterKopfPeering"
        assert api.find(f"/apis/kopf.dev/v1/clusterkopfpeerings/{name}") is not None
    for deployment in ("podnetwork-controller", "podnetwork-bridge", "podnetwork-scheduler"):
        assert api.find(f"/apis/apps/v1/namespaces/{NS}/deployments/{deployment}") is not None
    assert api.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets")["items"]
    # the optional DRA driver, as docs/deploy.md "DRA (optional)" applies it (its rollout needs nodes)
    (dra,) = [line for line in section_commands("DRA (optional)") if line.startswith("kubectl apply")]
    done = run(cluster, dra)
    assert done.returncode == 0, f"{dra}:\n{done.stdout}\n{done.stderr}"
    assert api.find(f"/apis/apps/v1/namespaces/{NS}/daemonsets/multinetwork-dra-driver") is not None
    assert api.find("/apis/resource.k8s.io/v1/deviceclasses/dra.multinetwork.x-k8s.io") is not None

    user_ns, held = what_a_user_has(api, cluster)
    eventually(lambda: protected(api), "the policy binding refuses the delete of default", timeout=60)
    for name in held:
        assert constants.IN_USE_FINALIZER in api.get(f"{PODNETWORKS}/{name}")["metadata"]["finalizers"]

    uninstall = section_commands("Uninstall")
    assert uninstall == ["make uninstall"], uninstall
    first = run(cluster, uninstall[0], timeout=GUARD)
    assert first.returncode == 0, f"{first.stdout}\n{first.stderr}"
    assert first.stdout.strip().splitlines()[-1] == DONE, first.stdout
    assert "deleting the DRA driver" in first.stdout, first.stdout

    assert left_over(api, cluster) == []
    assert api.find(f"/api/v1/namespaces/{user_ns}") is not None, "the user's own namespace is theirs"

    again = run(cluster, uninstall[0], timeout=GUARD)
    assert again.returncode == 0, f"{again.stdout}\n{again.stderr}"
    assert again.stdout.strip().splitlines()[-1] == DONE, again.stdout
    assert "FAILED" not in again.stdout + again.stderr
    assert left_over(api, cluster) == []
