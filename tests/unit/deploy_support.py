"""deploy/ as a cluster receives it: every kustomization rendered, its objects and containers.

`render` runs `kubectl kustomize` (installed here and in CI). Where kubectl is missing it
renders with `render_in_python`, which knows the kustomization fields deploy/ uses
(`resources`, `components`, `configMapGenerator`, `images`) and says so in a warning; where both exist,
tests/unit/deploy/test_manifests.py checks that they agree.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.unit import webhook_deploy_support

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
#: The image deploy/agent/Dockerfile builds, which every component of ours runs.
OUR_IMAGE = "podnetwork:dev"
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job")


def kustomizations() -> list[Path]:
    """Every directory under deploy/ with a kustomization.yaml a user applies: a Component
    (deploy/components/) is rendered as part of the kustomizations that use it."""
    return sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml")
                  if yaml.safe_load(p.read_text()).get("kind") != "Component")


def render(directory: Path) -> list[dict[str, Any]]:
    """The objects `kubectl apply -k DIRECTORY` would send."""
    if shutil.which("kubectl") is None:
        warnings.warn(f"kubectl is not installed: {directory} rendered by tests.unit.deploy_support's own "
                      "renderer", stacklevel=2)
        return render_in_python(directory)
    return render_with_kubectl(directory)


def render_with_kubectl(directory: Path) -> list[dict[str, Any]]:
    done = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"kubectl kustomize {directory}: {done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


# -- the fallback renderer --------------------------------------------------------------------------

_SUPPORTED = {"apiVersion", "kind", "resources", "components", "configMapGenerator", "images"}


def render_in_python(directory: Path) -> list[dict[str, Any]]:
    """What kustomize makes of the fields deploy/ uses; anything else is an AssertionError."""
    (spec,) = [d for d in yaml.safe_load_all((directory / "kustomization.yaml").read_text()) if d]
    unknown = set(spec) - _SUPPORTED
    assert not unknown, f"{directory}: the Python renderer does not know {sorted(unknown)}"
    objects: list[dict[str, Any]] = []
    for entry in spec.get("resources", []):
        path = directory / entry
        if path.is_dir():
            objects.extend(render_in_python(path))
        else:
            objects.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    for component in spec.get("components", []):
        # A Component is applied after the resources, in order: its objects added, its patches on them.
        objects = webhook_deploy_support.with_component(directory / component, objects)
    renamed: dict[str, str] = {}
    for generator in spec.get("configMapGenerator", []):
        data = {Path(f).name: (directory / f).read_text() for f in generator.get("files", [])}
        for literal in generator.get("literals", []):
            key, _, value = literal.partition("=")
            data[key] = value
        name = f"{generator['name']}-{_suffix(generator['name'], data)}"
        renamed[generator["name"]] = name
        meta: dict[str, Any] = {"name": name}
        if "namespace" in generator:
            meta["namespace"] = generator["namespace"]
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    for obj in objects:
        for pod in _pod_specs(obj):
            for volume in pod.get("volumes", []):
                config_map = volume.get("configMap")
                if config_map and config_map.get("name") in renamed:
                    config_map["name"] = renamed[config_map["name"]]
            for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
                container["image"] = _image(container["image"], spec.get("images", []))
    return objects


def _suffix(name: str, data: dict[str, str]) -> str:
    """A content hash in kustomize's alphabet (no vowels or look-alike digits); not kustomize's
    own value, which only kubectl's renderer needs to match."""
    text = json.dumps({"kind": "ConfigMap", "name": name, "data": data}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10].translate(str.maketrans("013ae", "ghkmt"))


def _image(image: str, images: list[dict[str, str]]) -> str:
    name, tag = image, ""
    if ":" in image.split("/")[-1]:
        name, tag = image.rsplit(":", 1)
    for entry in images:
        if entry["name"] == name:
            name = entry.get("newName", name)
            tag = entry.get("newTag", tag)
    return f"{name}:{tag}" if tag else name


def _pod_specs(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if obj.get("kind") in WORKLOADS:
        yield obj["spec"]["template"]["spec"]
    elif obj.get("kind") == "Pod":
        yield obj["spec"]


# -- reading what was rendered ----------------------------------------------------------------------


@dataclass(frozen=True)
class Container:
    """One container of a workload in a kustomization."""

    kustomization: Path
    workload: dict[str, Any]
    spec: dict[str, Any]
    init: bool

    @property
    def pod(self) -> dict[str, Any]:
        return dict(self.workload["spec"]["template"]["spec"])

    @property
    def argv(self) -> list[str]:
        return [*self.spec.get("command", []), *self.spec.get("args", [])]

    @property
    def ours(self) -> bool:
        return bool(self.spec["image"] == OUR_IMAGE)

    @property
    def uid(self) -> int:
        """The uid it runs as: the container's securityContext, the pod's, else the image's (root)."""
        for context in (self.spec.get("securityContext") or {}, self.pod.get("securityContext") or {}):
            if "runAsUser" in context:
                return int(context["runAsUser"])
        return 0

    def __str__(self) -> str:
        return f"{self.kustomization.relative_to(ROOT)}: {self.workload['kind']} " \
               f"{self.workload['metadata']['name']}, container {self.spec['name']}"


def containers(kustomization: Path, objects: list[dict[str, Any]] | None = None) -> list[Container]:
    found = []
    for obj in objects if objects is not None else render(kustomization):
        if obj.get("kind") in WORKLOADS:
            pod = obj["spec"]["template"]["spec"]
            for spec in pod.get("initContainers", []):
                found.append(Container(kustomization, obj, spec, True))
            for spec in pod["containers"]:
                found.append(Container(kustomization, obj, spec, False))
    return found


def workload(kustomization: str, kind: str) -> dict[str, Any]:
    (found,) = [copy.deepcopy(o) for o in render(DEPLOY / kustomization) if o["kind"] == kind]
    return found
