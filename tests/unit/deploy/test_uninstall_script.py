"""deploy/uninstall.sh, the one documented uninstall, checked without a cluster against what it
removes: docs/deploy.md "## Uninstall" runs `make uninstall`, which runs the script; the script
deletes every kustomization of deploy/ and every file of crds/; the command it runs in each
agent's container is one the agent's parser accepts, with the DaemonSet's own CNI directories;
the pods it waits for carry the labels it selects them by. (Run on a real API server, it was
checked by hand to end clean twice in a row: docs/deploy.md says what it does.)"""

from __future__ import annotations

import re
import shlex
import subprocess

import yaml

from tests.unit.deploy.test_manifests import KUSTOMIZATIONS, parses
from tests.unit.deploy_support import DEPLOY, ROOT, containers

SCRIPT = DEPLOY / "uninstall.sh"


def script() -> str:
    return SCRIPT.read_text()


def test_the_docs_uninstall_is_make_uninstall_which_runs_the_script() -> None:
    section = (ROOT / "docs" / "deploy.md").read_text().split("\n## Uninstall\n", 1)[1].split("\n## ", 1)[0]
    first = re.search(r"```sh\n(.*?)```", section, re.S)
    assert first is not None and first.group(1).strip() == "make uninstall"
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^uninstall:\n\t(.*)$", makefile, re.M)
    assert recipe is not None and recipe.group(1).split()[0] == "deploy/uninstall.sh"
    assert re.search(r"^\.PHONY:.*\buninstall\b", makefile, re.M)


def test_the_script_is_posix_sh_and_says_how_to_use_it_without_a_cluster() -> None:
    assert SCRIPT.stat().st_mode & 0o111
    assert subprocess.run(["sh", "-n", str(SCRIPT)], capture_output=True, timeout=30).returncode == 0
    helped = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=30)
    assert helped.returncode == 0 and "--keep-npwg-crds" in helped.stdout
    wrong = subprocess.run([str(SCRIPT), "--all"], capture_output=True, text=True, timeout=30)
    assert wrong.returncode == 2 and "unknown argument --all" in wrong.stderr


def test_every_kustomization_and_crd_file_is_deleted_by_the_script() -> None:
    text = script()
    # deploy/cert-manager/X are deploy/X with other certificates: the same workloads' names.
    deleted = set(re.findall(r"delete -k (deploy/[\w-]+)/", text))
    deleted |= {f"deploy/{c}" for c in re.search(r"for component in ([\w ]+); do", text).group(1).split()}
    expected = {f"deploy/{k.relative_to(DEPLOY).as_posix()}" for k in KUSTOMIZATIONS
                if not k.relative_to(DEPLOY).as_posix().startswith("cert-manager/")}
    # deploy/peering/ holds CRDs and their objects: the script deletes the objects, then the CRDs.
    assert deleted | {"deploy/peering"} == expected
    assert "for file in crds/*.yaml deploy/peering/peering-crds.yaml; do" in text
    peerings = [d["metadata"]["name"] for d in yaml.safe_load_all((DEPLOY / "peering" / "peerings.yaml").read_text())
                if d]
    assert f"clusterkopfpeerings.kopf.dev {' '.join(peerings)} --ignore-not-found" in text
    for step in re.findall(r"^\s*k delete .*$", text.replace("\\\n", " "), re.M):
        assert "--ignore-not-found" in step or "--dry-run=server" in step, step


def test_the_agents_uninstall_runs_with_the_daemonsets_cni_directories() -> None:
    exec_line = re.search(r"exec \"\$pod\" -c agent -- (podnetwork cni-agent --uninstall[^\n]*\\\n[^\n]*);",
                          script())
    assert exec_line is not None
    argv = shlex.split(exec_line.group(1).replace("\\\n", " "))
    args = parses(argv)
    (agent,) = [c for c in containers(DEPLOY / "agent") if c.spec["name"] == "agent"]
    deployed = parses(agent.argv)
    assert args.uninstall and args.cni_bin_dir == deployed.cni_bin_dir
    assert args.cni_conf_dir == deployed.cni_conf_dir


def test_the_pods_it_waits_for_carry_the_labels_it_selects_them_by() -> None:
    text = script()
    waited = set(re.findall(r"pods_of ([\w-]+)", text)) - {"()"}
    names = {c.workload["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
             for k in KUSTOMIZATIONS for c in containers(k)}
    assert waited == names

