"""`explain`/`graph` reading a cluster: podnetwork.kube's client against kmock's emulator over HTTP."""

from __future__ import annotations

import asyncio
from pathlib import Path

from podnetwork.kep import explain, graph, graph_source
from tests.api.controller_support import attachment, node, pod, podnetwork
from tests.api.kube_emulator import NODES, PN, PNA, PODS, declare_resources, write_kubeconfig

NAD = "k8s.cni.cncf.io/v1/network-attachment-definitions"


def kubeconfig(tmp_path: Path, server: str) -> str:
    return str(write_kubeconfig(tmp_path / "kubeconfig", server, token="t"))


async def test_cluster_objects_and_parameters_feed_the_explanation(kmock, tmp_path):
    declare_resources(kmock)
    kmock.resources[NAD] = kmock.ResourceInfo(kind="NetworkAttachmentDefinition", namespaced=True,
                                              verbs={"get", "list"})
    refs = [{"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": "nad", "namespace": "ns"}]
    blue = podnetwork("blue", parametersRefs=refs)
    blue["status"] = {"conditions": [{"type": "Ready", "status": "False", "reason": "ParamsNotReady",
                                      "message": "ParamsReady is False (NADInvalid)", "lastTransitionTime": "t"}]}
    kmock.objects[PN, None, "blue"] = blue
    kmock.objects[PNA, "ns", "fast"] = attachment("fast", "blue")
    kmock.objects[PODS, "ns", "a"] = pod("a", [{"podNetworkAttachmentName": "fast"}])
    kmock.objects[NODES, None, "n1"] = node("n1")
    kmock.objects[NAD, "ns", "nad"] = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                                       "metadata": {"name": "nad", "namespace": "ns"}, "spec": {"config": "{}"}}
    path = kubeconfig(tmp_path, str(kmock.url).rstrip("/"))
    objects = await asyncio.to_thread(graph_source.from_cluster, path)

    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("NetworkAttachmentDefinition", "nad"), ("Node", "n1"), ("Pod", "a"),
        ("PodNetwork", "blue"), ("PodNetworkAttachment", "fast")]
    result = explain.explain(graph.build(objects), "Pod/ns/a")
    assert str(result.root_cause) == "PodNetwork blue: not Ready: ParamsNotReady: ParamsReady is False (NADInvalid)"
    assert "parametersRefs[0] -> NetworkAttachmentDefinition ns/nad: present" in result.render()
    # one list per kind and one get for the parameters object: never a request per pod
    gets = [r.url.path for r in kmock if r.method.value == "GET" and "/namespaces/ns/" in r.url.path]
    assert gets == ["/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/nad"]


async def test_unreachable_cluster_is_a_readable_error(tmp_path):
    path = kubeconfig(tmp_path, "http://127.0.0.1:9")  # discard port: nothing listens
    try:
        await asyncio.to_thread(graph_source.from_cluster, path)
    except RuntimeError as exc:
        assert "cannot list pods and nodes" in str(exc)
    else:
        raise AssertionError("no error for an unreachable cluster")


RBAC = "rbac.authorization.k8s.io/v1"


async def test_the_roles_granting_use_of_a_podnetwork_and_their_bindings_are_read_and_nothing_else(
    kmock, tmp_path, caplog
):
    declare_resources(kmock)
    for plural, kind, namespaced in (("clusterroles", "ClusterRole", False), ("roles", "Role", True),
                                     ("clusterrolebindings", "ClusterRoleBinding", False),
                                     ("rolebindings", "RoleBinding", True)):
        kmock.resources[f"{RBAC}/{plural}"] = kmock.ResourceInfo(kind=kind, namespaced=namespaced,
                                                                 verbs={"get", "list"})

    def role(kind, name, rules, namespace=None):
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        return {"apiVersion": RBAC, "kind": kind, "metadata": meta, "rules": rules}

    def binding(kind, name, role_kind, role_name, namespace=None):
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        return {"apiVersion": RBAC, "kind": kind, "metadata": meta, "subjects": [{"kind": "User", "name": "u"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name}}

    use_blue = [{"apiGroups": ["multinetwork.x-k8s.io"], "resources": ["podnetworks"], "resourceNames": ["blue"],
                 "verbs": ["use"]}]
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    kmock.objects[f"{RBAC}/clusterroles", None, "use-blue"] = role("ClusterRole", "use-blue", use_blue)
    kmock.objects[f"{RBAC}/clusterroles", None, "view"] = role(
        "ClusterRole", "view", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])
    kmock.objects[f"{RBAC}/rolebindings", "ns", "b"] = binding("RoleBinding", "b", "ClusterRole", "use-blue", "ns")
    kmock.objects[f"{RBAC}/clusterrolebindings", None, "viewers"] = binding(
        "ClusterRoleBinding", "viewers", "ClusterRole", "view")
    path = kubeconfig(tmp_path, str(kmock.url).rstrip("/"))
    objects = await asyncio.to_thread(graph_source.from_cluster, path)

    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("ClusterRole", "use-blue"), ("PodNetwork", "blue"), ("RoleBinding", "b")]
    g = graph.build(objects)
    assert g.edges["RoleBinding/ns/b", "ClusterRole//use-blue"]["relation"] == "roleRef"
    assert g.edges["ClusterRole//use-blue", "PodNetwork//blue"]["relation"] == "use"


async def test_credentials_that_may_not_list_rbac_draw_the_graph_without_it(kmock, tmp_path, caplog):
    declare_resources(kmock)  # no RBAC resources served: each list is a 404, as a forbidden one is an error
    kmock.objects[PN, None, "blue"] = podnetwork("blue")
    path = kubeconfig(tmp_path, str(kmock.url).rstrip("/"))
    objects = await asyncio.to_thread(graph_source.from_cluster, path)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [("PodNetwork", "blue")]
    assert "cannot list clusterroles, so the graph shows no permission to use PodNetworks" in caplog.text
