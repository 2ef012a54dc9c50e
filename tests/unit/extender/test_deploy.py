"""deploy/scheduler/ agrees with the extender: URL, verbs, flags, permissions, files."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from podnetwork import cli
from scheduler_plugin import app as app_mod
from scheduler_plugin import cache as cache_mod
from scheduler_plugin.settings import Settings

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "scheduler"


def load(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc]


def extender_container() -> dict[str, Any]:
    (deployment,) = load("deployment.yaml")
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    return containers["extender"]


def test_the_scheduler_configuration_registers_the_extender_as_unignorable_on_the_verbs_it_serves() -> None:
    (config,) = load("kube-scheduler-config.yaml")
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    (extender,) = config["extenders"]
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is False
    assert extender["httpTimeout"] == "5s"
    routes = {route.path for route in app_mod.create_app(cache_mod.Cache(), Settings()).routes}
    assert "/" + extender["filterVerb"] in routes
    # Neutral scores change no ranking: no second call per pod (docs/benchmarks.md).
    assert "prioritizeVerb" not in extender
    assert config["profiles"][0]["schedulerName"] == config["leaderElection"]["resourceName"]


def test_extender_container_listens_where_the_scheduler_calls_it() -> None:
    (config,) = load("kube-scheduler-config.yaml")
    url = urlparse(config["extenders"][0]["urlPrefix"])
    command = extender_container()["command"]
    assert command[:2] == ["podnetwork", "scheduler-extender"]
    args = cli.build_parser(cli.program._commands()).parse_args(command[1:])
    assert (args.host, args.port) == (url.hostname, url.port)
    assert args.feature_gates == "MultiNetwork=true"
    probes = extender_container()
    assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert probes["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_extender_may_watch_everything_it_caches() -> None:
    granted: set[tuple[str, str, str]] = set()
    for doc in load("rbac.yaml"):
        if doc["kind"] == "ClusterRole":
            for rule in doc["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            granted.add((group, resource, verb))
    for group, resource in [("multinetwork.x-k8s.io", "podnetworks"),
                            ("multinetwork.x-k8s.io", "podnetworkattachments"), ("", "nodes")]:
        assert {(group, resource, "list"), (group, resource, "watch")} <= granted


def test_kustomization_names_existing_files_and_the_mounted_config() -> None:
    (kustomization,) = load("kustomization.yaml")
    for name in kustomization["resources"]:
        assert (DEPLOY / name).is_file()
    (generator,) = kustomization["configMapGenerator"]
    assert all((DEPLOY / f).is_file() for f in generator["files"])
    (deployment,) = load("deployment.yaml")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {"name": "config", "configMap": {"name": generator["name"]}} in volumes
    scheduler = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "kube-scheduler")
    mount = scheduler["volumeMounts"][0]["mountPath"]
    assert f"--config={mount}/{generator['files'][0]}" in scheduler["command"]


def test_the_kubelet_probes_the_extender_on_the_pods_address_where_only_the_probes_are_served() -> None:
    container = extender_container()
    args = cli.build_parser(cli.program._commands()).parse_args(container["command"][1:])
    assert args.host == "127.0.0.1", "the extender itself stays on loopback, for kube-scheduler only"
    assert args.probe_host == "0.0.0.0" and args.probe_port is not None
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        # A probe's `host` is dialled from the node: 127.0.0.1 is the node's loopback, not the pod's.
        assert "host" not in get, probe
        assert ports[get["port"]] == args.probe_port
    routes = {route.path for route in app_mod.create_probe_app(cache_mod.Cache()).routes}
    assert {"/healthz", "/readyz"} <= routes and "/filter" not in routes


def test_the_kube_scheduler_version_is_the_kustomization_s_images_setting() -> None:
    (kustomization,) = load("kustomization.yaml")
    (image,) = [i for i in kustomization["images"] if i["name"] == "registry.k8s.io/kube-scheduler"]
    major, minor, _ = image["newTag"].removeprefix("v").split(".")
    assert (int(major), int(minor)) >= (1, 36)
    (deployment,) = load("deployment.yaml")
    scheduler = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "kube-scheduler")
    # No tag in the Deployment: the kustomization's is the one place to change it.
    assert scheduler["image"] == image["name"]
