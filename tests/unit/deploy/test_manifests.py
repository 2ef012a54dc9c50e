"""Every kustomization of deploy/, rendered as `kubectl apply -k` sends it, checked without a cluster:

- each object against its Kubernetes schema (kubernetes-validate's schemas of the API, strict:
  an unknown field is an error, as the API server's strict field validation makes it), and each
  object of our CRDs (and kopf's peering CRDs) against that CRD;
- each container of ours runs a command its own parser accepts (and so do exec probes);
- each probe reaches the pod, never the node (a probe's `host` is dialled from the node);
- only deploy/namespace/ holds the namespace, so deleting a component leaves the others.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from kubernetes_validate import utils as kubernetes_validate

from podnetwork import cli
from tests.unit import crd_support
from tests.unit.deploy_support import (
    DEPLOY,
    ROOT,
    Container,
    containers,
    kustomizations,
    render,
    render_in_python,
    render_with_kubectl,
)

#: The Kubernetes the schemas are taken from: the oldest minor deploy/ supports would do as well,
#: but fields removed since then must fail, and the API server of the issue's cluster was 1.36.
KUBERNETES = "1.36"
NAMESPACE = "multinetwork-system"
#: Kinds of other projects deploy/ may use, whose CRDs are not ours: checked for shape only.
THIRD_PARTY = {("cert-manager.io/v1", "Certificate"), ("cert-manager.io/v1", "Issuer"),
               ("cert-manager.io/v1", "ClusterIssuer")}
#: Namespaced objects that live outside multinetwork-system, and why.
ELSEWHERE = {("RoleBinding", "podnetwork-scheduler-authentication-reader"): "kube-system"}

KUSTOMIZATIONS = kustomizations()
IDS = [str(k.relative_to(DEPLOY)) for k in KUSTOMIZATIONS]


def our_crds() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> (CRD, version) for crds/ and kopf's peering CRDs."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in [*sorted((ROOT / "crds").glob("*.yaml")), DEPLOY / "peering" / "peering-crds.yaml"]:
        for doc in crd_support.load_yaml_documents(path):
            if doc["kind"] != "CustomResourceDefinition":
                continue
            for version in doc["spec"]["versions"]:
                found[(f"{doc['spec']['group']}/{version['name']}", doc["spec"]["names"]["kind"])] = version
    return found


def crd_errors(version: dict[str, Any], obj: dict[str, Any]) -> list[str]:
    schema = crd_support.to_json_schema(version["schema"]["openAPIV3Schema"])
    # The API server checks apiVersion, kind and metadata itself, whatever the CRD's schema says.
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    validator = jsonschema.Draft202012Validator(schema, format_checker=crd_support.FORMATS)
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(body)]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=IDS)
def test_every_object_fits_its_schema(kustomization: Path) -> None:
    objects = render(kustomization)
    assert objects, f"{kustomization} renders nothing"
    crds = our_crds()
    for obj in objects:
        what = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')} of {kustomization.relative_to(ROOT)}"
        key = (obj["apiVersion"], obj["kind"])
        if key in crds:
            assert crd_errors(crds[key], obj) == [], what
        elif key in THIRD_PARTY:
            assert obj["metadata"].get("name") and isinstance(obj.get("spec"), dict), what
        else:
            try:
                kubernetes_validate.validate(obj, KUBERNETES, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{what}: {'.'.join(map(str, exc.path))}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                pytest.fail(f"{what}: {exc.message}; a kind of another project goes in THIRD_PARTY")


def test_schema_validation_catches_what_the_api_server_refuses() -> None:
    # The check above can fail: an unknown field, a wrong type, a missing selector.
    deployment = next(o for o in render(DEPLOY / "scheduler") if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)
    peering = next(o for o in render(DEPLOY / "peering") if o["kind"] == "ClusterKopfPeering")
    peering["spec"] = {"x": 1}
    assert crd_errors(our_crds()[(peering["apiVersion"], peering["kind"])], peering)


@pytest.mark.skipif("not __import__('shutil').which('kubectl')", reason="compares with kubectl kustomize")
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=IDS)
def test_the_python_renderer_makes_what_kubectl_makes(kustomization: Path) -> None:
    # Generated names end in a content hash; ours is not kustomize's, so it is left out.
    def comparable(objects: list[dict[str, Any]]) -> list[str]:
        text = [yaml.safe_dump(o, sort_keys=True) for o in objects]
        return sorted(re.sub(r"(podnetwork-[a-z-]+-config)-[a-z0-9]{10}\b", r"\1-HASH", t) for t in text)

    assert comparable(render_in_python(kustomization)) == comparable(render_with_kubectl(kustomization))


def every_container() -> list[Container]:
    return [c for k in KUSTOMIZATIONS for c in containers(k)]


def parses(argv: list[str]) -> argparse.Namespace:
    """`argv` as the command's own parser reads it; an error fails the test with argparse's words."""
    assert argv and argv[0] == "podnetwork", argv
    parser = cli.build_parser(cli.program._commands(argv[1:]))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            return parser.parse_args(argv[1:])
        except SystemExit:
            pytest.fail(f"{argv}: {err.getvalue()}")


def module_parses(argv: list[str]) -> None:
    """`python3 ... -m MODULE ARGS`: the module's own `parser()` reads ARGS."""
    import importlib

    index = argv.index("-m")
    module = importlib.import_module(argv[index + 1])
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            module.parser().parse_args(argv[index + 2:])
        except SystemExit:
            pytest.fail(f"{argv}: {err.getvalue()}")


def test_every_container_of_ours_runs_a_command_its_parser_accepts() -> None:
    ours = [c for c in every_container() if c.ours]
    assert {c.workload["metadata"]["name"] for c in ours} >= {
        "podnetwork-controller", "podnetwork-bridge", "podnetwork-scheduler", "multinetwork-cni-agent"}
    for container in ours:
        args = parses(container.argv)
        assert args._run is not None, container


def test_every_exec_probe_of_ours_runs_a_command_its_parser_accepts() -> None:
    probes = [(c, p["exec"]["command"]) for c in every_container() if c.ours
              for name in ("readinessProbe", "livenessProbe", "startupProbe")
              if (p := c.spec.get(name)) and "exec" in p]
    for container, argv in probes:
        if argv[0] == "podnetwork":
            parses(argv)
        else:
            assert re.fullmatch(r"python3(\.\d+)?", Path(argv[0]).name) and "-m" in argv, (str(container), argv)
            module_parses(argv)


def test_every_probe_reaches_the_pod_not_the_node() -> None:
    checked = 0
    for container in every_container():
        ports = {p["name"]: p["containerPort"] for p in container.spec.get("ports", []) if "name" in p}
        for name in ("readinessProbe", "livenessProbe", "startupProbe"):
            probe = container.spec.get(name)
            if not probe:
                continue
            for handler in ("httpGet", "tcpSocket", "grpc"):
                if handler in probe:
                    checked += 1
                    # The kubelet dials `host` from the node: loopback there is the node's own.
                    assert "host" not in probe[handler], f"{container}: {name}.{handler}.host"
                    port = probe[handler]["port"]
                    assert isinstance(port, int) or port in ports, f"{container}: {name} names no port {port!r}"
    assert checked >= 6


def test_only_deploy_namespace_holds_the_namespace_so_deleting_a_component_leaves_the_others() -> None:
    holders = {k.relative_to(DEPLOY).as_posix() for k in KUSTOMIZATIONS
               if any(o["kind"] == "Namespace" for o in render(k))}
    assert holders == {"namespace"}
    for kustomization in KUSTOMIZATIONS:
        for obj in render(kustomization):
            namespace = obj["metadata"].get("namespace")
            if namespace is not None:
                expected = ELSEWHERE.get((obj["kind"], obj["metadata"]["name"]), NAMESPACE)
                assert namespace == expected, (kustomization, obj["kind"], obj["metadata"]["name"])


def test_every_workload_runs_as_a_service_account_deploy_creates() -> None:
    accounts = {o["metadata"]["name"] for k in KUSTOMIZATIONS for o in render(k) if o["kind"] == "ServiceAccount"}
    for container in every_container():
        assert container.pod["serviceAccountName"] in accounts, str(container)


def test_the_readme_applies_every_kustomization_namespace_first() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## On a real cluster", 1)[1].split("\n## ", 1)[0]
    applied = re.findall(r"kubectl apply -k (deploy/[\w/-]+?)/?\s", section)
    assert applied[0] == "deploy/namespace"
    # deploy/cert-manager/X replaces deploy/X for a cluster with cert-manager: named, not applied.
    alternatives = {i for i in IDS if i.startswith("cert-manager/")}
    # Optional components, each applied in a section of docs/deploy.md of its own.
    optional = {"dra-driver"}
    assert {a.removeprefix("deploy/") for a in applied} == set(IDS) - alternatives - optional
    for alternative in alternatives:
        assert f"deploy/{alternative}/" in section, alternative
    assert applied.index("deploy/peering") < applied.index("deploy/controller")


def test_yaml_files_under_deploy_are_all_in_some_kustomization() -> None:
    named: set[Path] = set()
    for kustomization in KUSTOMIZATIONS:
        (spec,) = [d for d in yaml.safe_load_all((kustomization / "kustomization.yaml").read_text()) if d]
        named.update((kustomization / r).resolve() for r in spec.get("resources", []))
        for generator in spec.get("configMapGenerator", []):
            named.update((kustomization / f).resolve() for f in generator.get("files", []))
        for component in spec.get("components", []):
            (used,) = [d for d in yaml.safe_load_all((kustomization / component / "kustomization.yaml").read_text()) if d]
            named.update((kustomization / component / r).resolve() for r in used.get("resources", []))
    files = {p.resolve() for p in DEPLOY.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert files - named == set()
