"""deploy/agent: the DaemonSet runs the real command with valid flags, and RBAC is minimal."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import yaml

from bridge.agent.daemon import command
from bridge.agent.kube import watchcache
from bridge.agent.policy import state as policystate
from bridge.agent.services import state as servicestate
from podnetwork.ground import constants

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "agent"


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_the_daemonset_runs_cni_agent_with_flags_the_command_accepts_on_the_host_network() -> None:
    (ds,) = docs("daemonset.yaml")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["serviceAccountName"] == "multinetwork-cni-agent"
    (container,) = pod["containers"]
    assert container["securityContext"]["privileged"] is True
    argv = container["command"]
    assert argv[:2] == ["podnetwork", "cni-agent"]
    parser = argparse.ArgumentParser()
    command.configure(parser)
    args = parser.parse_args(argv[2:])
    assert args.install
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    for path in (*map(str, args.cni_bin_dir), str(args.cni_conf_dir), str(args.socket.parent)):
        assert path in mounts and path in volumes.values(), f"{path} must be the host's, at the same path"
    assert any(str(args.cache_dir).startswith(m) for m in mounts)
    # The DRA driver's records, read only, at the same path as on the host.
    records = next(m for m in container["volumeMounts"] if m["mountPath"] == args.dra_state_dir)
    assert records["readOnly"] is True and volumes[records["name"]] == args.dra_state_dir
    # Hot-plug watches the pods of the agent's node: --node-name defaults to $NODE_NAME.
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_rbac_grants_reads_of_the_named_objects_with_the_watch_cache_pod_patch_hot_plug_policy_and_service_watches(
) -> None:
    role = next(d for d in docs("rbac.yaml") if d["kind"] == "ClusterRole")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    cached = {(kind.group, kind.plural, verb) for kind in watchcache.KINDS for verb in ("get", "list", "watch")}
    hot_plug = {("", "pods", "list"), ("", "pods", "watch"), ("", "events", "create")}
    # MultiNetworkPolicy: every kind the enforcer follows, listed and watched.
    policies = {(kind.group, kind.plural, verb) for kind in policystate.KINDS for verb in ("list", "watch")}
    assert {("", "namespaces", "list"), ("k8s.cni.cncf.io", "multi-networkpolicies", "watch")} <= policies
    # Node access with API access: the default/kubernetes Service and its EndpointSlices.
    api = {("", "services", "get"), (constants.ENDPOINTSLICE_GROUP, constants.ENDPOINTSLICE_PLURAL, "list")}
    # Services' ClusterIPs: every kind they follow, listed and watched.
    services = {(kind.group, kind.plural, verb) for kind in servicestate.KINDS for verb in ("list", "watch")}
    assert {("", "services", "watch"), ("discovery.k8s.io", "endpointslices", "list")} <= services
    # A pod's ResourceClaim the DRA driver did not record: whose it is (bridge/agent/cni/claims.py).
    claims = {("resource.k8s.io", "resourceclaims", "get")}
    assert granted == {("", "pods", "get"), ("", "pods", "patch"), *hot_plug, *cached, *policies, *api, *services,
                       *claims}
    assert len(cached) == 12
    binding = next(d for d in docs("rbac.yaml") if d["kind"] == "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == "multinetwork-cni-agent"


def test_the_agent_runs_optimized_and_the_image_compiled_its_optimized_bytecode() -> None:
    """PYTHONOPTIMIZE=2 without `.opt-2.pyc` files would compile every module at each start (more
    RSS than the optimization saves): the image the DaemonSet names must have compiled them."""
    (ds,) = docs("daemonset.yaml")
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PYTHONOPTIMIZE"] == "2"
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    final = dockerfile.rsplit("\nFROM ", 1)[1]
    assert re.search(r"pip install [^\n]*\.\s*\\\n\s*&& python -OO -m compileall -q .*purelib", final), \
        "the final stage compiles the installed packages with -OO"
