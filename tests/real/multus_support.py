"""Multus thick v4.2.4 from the kit as a kubelet node's NPWG implementation, as processes.

Multus's daemon takes its API credentials only from a pod's service account (`rest.InClusterConfig`:
KUBERNETES_SERVICE_HOST/PORT and the token under /var/run/secrets/kubernetes.io/serviceaccount).
Here it runs in a mount namespace of its own with a tmpfs on /run holding a TokenRequest token of a
ServiceAccount bound to Multus's ClusterRole, so nothing is written under the machine's /run; the
sandboxes' namespaces, which containerd mounts under /run/netns of the machine, are reached through
containerd's own root (`/run/netns` there is a symlink to `/proc/<containerd>/root/run/netns`).

Used by tests/real/test_multus_interop.py and benchmarks/bench_podstart.py.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator

from tests.real.cluster_support import Api, Cluster, Node, Process, eventually

MULTUS_RULES = [  # the ClusterRole of Multus's own deployments/multus-daemonset-thick.yml
    {"apiGroups": ["k8s.cni.cncf.io"], "resources": ["*"], "verbs": ["*"]},
    {"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get", "list", "update", "watch"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
]
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def start_multus(cluster: Cluster, api: Api, node: Node, identity: str) -> Process:
    multus = cluster.kit / "multus" / "bin"
    home = node.dir / "multus"
    sa_dir = home / "serviceaccount"
    sa_dir.mkdir(parents=True)
    (home / "run").mkdir()
    token = api.create(f"/api/v1/namespaces/kube-system/serviceaccounts/{identity}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    (sa_dir / "token").write_text(token["status"]["token"])
    shutil.copy(cluster.root / "pki" / "ca.crt", sa_dir / "ca.crt")
    (sa_dir / "namespace").write_text("kube-system")
    shutil.copy(multus / "multus-shim", node.bin_dir / "multus-shim")
    config = home / "daemon-config.json"
    config.write_text(json.dumps({
        "cniVersion": "0.3.1", "logToStderr": True, "logLevel": "verbose",
        "binDir": str(node.bin_dir), "cniDir": str(home / "cache"), "cniConfigDir": str(node.conf_dir),
        # the daemon listens in socketDir; the shim's configuration it writes names it as daemonSocketDir
        "socketDir": str(home / "run"), "daemonSocketDir": str(home / "run"),
        # "auto": Multus writes 00-multus.conf delegating to the node's first configuration (its
        # cluster network); with a configuration file of its own the v4.2 daemon exits at once
        "multusConfigFile": "auto", "multusAutoconfigDir": str(node.conf_dir)}))
    containerd = (cluster.root / "run" / f"containerd-{node.name}.pid").read_text().strip()
    script = home / "start.sh"
    script.write_text("\n".join([
        "set -e",
        "mount -t tmpfs multus-run /run",
        "mkdir -p /run/secrets/kubernetes.io/serviceaccount",
        f"mount --bind {sa_dir} /run/secrets/kubernetes.io/serviceaccount",
        f"ln -s /proc/{containerd}/root/run/netns /run/netns",
        f"exec {multus / 'multus-daemon'} -config {config}", ""]))
    process = Process(f"multus-{node.name}", ["unshare", "--mount", "--propagation", "private", "sh", str(script)],
                      cluster.root / "run" / f"multus-{node.name}.log")
    cluster.components[process.name] = process
    process.start(cluster.env(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(cluster.ports["apiserver"]),
                              MULTUS_NODE_NAME=node.name))

    def serving() -> bool:
        if not process.alive():
            raise RuntimeError(f"multus-daemon exited:\n{process.tail()}")
        return (node.conf_dir / "00-multus.conf").exists() and (home / "run" / "multus.sock").exists()

    eventually(serving, f"Multus serves on {node.name}", timeout=60)
    return process


def available(cluster: Cluster) -> bool:
    return (cluster.kit / "multus" / "bin" / "multus-daemon").exists()


@contextlib.contextmanager
def multus_node(cluster: Cluster, api: Api, index: int) -> Iterator[Node]:
    """A kubelet node (`Cluster.add_node(index)`) whose NPWG implementation is Multus thick, with
    Multus's ServiceAccount and RBAC; all of it removed afterwards, the node's pods first."""
    identity = f"multus-{cluster.suffix}-n{index}"
    subject = [{"kind": "ServiceAccount", "name": identity, "namespace": "kube-system"}]
    created = cluster.add_node(index)
    process: Process | None = None
    try:
        api.create("/api/v1/namespaces/kube-system/serviceaccounts",
                   {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": identity}})
        api.create(f"{RBAC}/clusterroles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                            "metadata": {"name": identity}, "rules": MULTUS_RULES})
        api.create(f"{RBAC}/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": identity},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": identity},
            "subjects": subject})
        process = start_multus(cluster, api, created, identity)
        yield created
    finally:
        # the node's pods go through the API first: the runtime's CNI DEL still reaches Multus
        cluster.remove_node(created)
        if process is not None:
            process.stop()
            cluster.components.pop(process.name, None)
        for path in (f"{RBAC}/clusterrolebindings/{identity}", f"{RBAC}/clusterroles/{identity}",
                     f"/api/v1/namespaces/kube-system/serviceaccounts/{identity}"):
            api.delete(path)
        shutil.rmtree(created.dir, ignore_errors=True)
        # the next node of this index must not meet this one's Node object
        eventually(lambda: api.find(f"/api/v1/nodes/{created.name}") is None, f"node {created.name} is gone",
                   timeout=60)
