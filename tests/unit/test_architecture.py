"""The architecture as docs/architecture.md draws it: contracts that bite, no import cycle, one map.

The layers themselves are import-linter contracts (`.importlinter`, run by `make test`); here,
each contract is seen to fail on a copy of the tree given a forbidden import in a new module
(so a contract that no longer covers new modules is caught), and what a contract cannot say is
checked: that no module imports itself back through others (at run time or for type checking),
that an API group is spelled in one module, and that the package table of docs/architecture.md
and the README's layout name every module there is and nothing that is not.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("podnetwork", "bridge", "scheduler_plugin", "demo", "conformance")


LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

#: New modules, each with an import one contract forbids: (path, source, the contract's id).
FORBIDDEN = (
    ("podnetwork/ground/x_upward.py", "from podnetwork.kep import api\n", "podnetwork"),
    ("podnetwork/cli/x_upward.py", "from podnetwork.kep import controller\n", "podnetwork"),
    ("podnetwork/x_unplaced.py", "from podnetwork.ground import constants\n", "podnetwork"),
    ("podnetwork/kube/x_bridge.py", "from bridge.npwg import names\n", "system"),
    ("scheduler_plugin/x_bridge.py", "from bridge import npwg\n", "system"),
    ("bridge/npwg/x_agent.py", "from bridge.agent.kube import objects\n", "bridge"),
    ("bridge/x_unplaced/__init__.py", "", "bridge"),
    ("conformance/npwg/x_kep.py", "from conformance.kep import suite\n", "conformance"),
    ("bridge/npwg/x_kube.py", "from podnetwork.kube import client\n", "npwg-standalone"),
    ("bridge/agent/x_kep.py", "from podnetwork.kep import networks\n", "agent-through-translation"),
    # Inside the agent: the plugin imports no feature, the features none of each other, a lower room
    # no higher one, and a new module outside the rooms is unplaced.
    ("bridge/agent/cni/x_policy.py", "from bridge.agent.policy import apply\n", "agent"),
    ("bridge/agent/policy/x_services.py", "from bridge.agent.services import state\n", "agent"),
    ("bridge/agent/netns/x_feature.py", "from bridge.agent.access import decide\n", "agent"),
    ("bridge/agent/shim/x_delegates.py", "from bridge.agent.delegates import invoke\n", "agent"),
    ("bridge/agent/x_unplaced.py", "from bridge.agent.shim import protocol\n", "agent"),
    # Inside a feature: a decision (here, the Services' existing one) importing its applier.
    ("bridge/agent/services/decide.py", "from bridge.agent.services import apply\n", "feature-doors"),
    ("bridge/agent/policy/state.py", "from bridge.agent.policy import decide\n", "feature-doors"),
    ("podnetwork/kep/x_nad.py", "from podnetwork.ground import nad\n", "kep-knows-no-npwg"),
    ("conformance/kep/x_kep.py", "from podnetwork.kep import api\n", "conformance-through-the-api"),
    ("conformance/npwg/x_ground.py", "from podnetwork.ground import constants\n", "npwg-conformance-standalone"),
)


def _contracts() -> dict[str, str]:
    """Contract id -> its name, from `.importlinter`."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    prefix = "importlinter:contract:"
    return {section.removeprefix(prefix): config[section]["name"]
            for section in config.sections() if section.startswith(prefix)}


def _lint_imports(tree: Path) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "400", "NO_COLOR": "1"}
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=240, check=False)
    return done.returncode, " ".join((done.stdout + done.stderr).split())


def test_the_contracts_hold_on_the_tree() -> None:
    code, out = _lint_imports(ROOT)
    assert code == 0, out


def test_every_contract_fails_on_a_forbidden_import_in_a_new_module(tmp_path: Path) -> None:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path)
    for path, source, _ in FORBIDDEN:
        target = tmp_path / path
        target.parent.mkdir(exist_ok=True)
        # An existing module gets the import added to its own; a new one is only the import.
        target.write_text((target.read_text() if target.exists() else "") + source)
    code, out = _lint_imports(tmp_path)
    assert code != 0, out
    contracts = _contracts()
    assert {contract for _, _, contract in FORBIDDEN} == set(contracts), "a contract without a forbidden import"
    for contract, name in contracts.items():
        assert f"{name} BROKEN" in out, f"{contract} kept: {out}"
    for path, _, contract in FORBIDDEN:
        module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        assert module in out, f"{module} not named among the broken contracts ({contract})"


def _import_graph(*, type_checking: bool) -> nx.DiGraph:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=not type_checking)
    out = nx.DiGraph()
    for module in graph.modules:
        out.add_node(module)
        for imported in graph.find_modules_directly_imported_by(module):
            out.add_edge(module, imported)
    return out


@pytest.mark.parametrize("type_checking", [False, True], ids=["at run time", "with type-checking imports"])
def test_no_module_imports_itself_back_through_others(type_checking: bool) -> None:
    graph = _import_graph(type_checking=type_checking)
    cycle = next(iter(nx.simple_cycles(graph)), None)
    assert cycle is None, "import cycle: " + " -> ".join([*cycle, cycle[0]])


def _modules_on_disk() -> dict[str, set[str]]:
    """Package path (as the docs write it, `bridge/agent/`) -> its module names."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for init in (ROOT / package).rglob("__init__.py"):
            directory = init.parent
            rel = directory.relative_to(ROOT).as_posix() + "/"
            modules = {p.stem for p in directory.glob("*.py") if p.stem not in ("__init__", "__main__")}
            if modules:  # `bridge/` holds only its products' packages
                found[rel] = modules
    return found


def _documented_packages() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## What each package holds", 1)[1].split("\n## ", 1)[0]
    documented: dict[str, set[str]] = {}
    current = None
    for line in table.splitlines():
        if not line.startswith("|") or line.startswith("| ---") or line.startswith("| package"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        package = re.match(r"`([a-z_/]+/)`", cells[0])
        if package:
            current = package.group(1)
        assert current is not None, f"a row before any package: {line}"
        # Module names are the backticked words at the start of a list item, before any
        # explanation in parentheses.
        modules = set()
        for item in re.split(r",\s*(?![^()]*\))", cells[1]):
            name = re.match(r"\s*`([a-z0-9_/]+)`", item)
            if name:
                modules.add(name.group(1).split("/")[-1])
        documented.setdefault(current, set()).update(modules)
    return documented


def test_the_package_table_of_docs_architecture_names_every_module_and_no_other() -> None:
    on_disk = _modules_on_disk()
    documented = _documented_packages()
    assert set(documented) == set(on_disk), "packages documented vs on disk"
    for package, modules in on_disk.items():
        assert documented[package] == modules, (
            f"{package}: undocumented {sorted(modules - documented[package])}, "
            f"documented but absent {sorted(documented[package] - modules)}"
        )


def test_the_readme_layout_names_every_package_of_the_tree() -> None:
    readme = (ROOT / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    for package in _modules_on_disk():
        if package == "podnetwork/commands/":
            continue
        assert f"`{package}" in layout, f"README's layout table does not name {package}"


# The NPWG harness judges any plugin by the spec and imports nothing of ours (.importlinter), so it
# spells the standard's names itself; every other module takes them from podnetwork.ground.
_SPELLS_ITS_OWN = ("conformance/npwg/",)


@pytest.mark.parametrize("name", ['"multinetwork.x-k8s.io',
                                  '"k8s.cni.cncf.io', '"k8s.v1.cni.cncf.io'])
def test_an_api_group_is_spelled_in_one_module_only(name: str) -> None:
    spelled = sorted({p.relative_to(ROOT).as_posix() for package in PACKAGES for p in (ROOT / package).rglob("*.py")
                      if name in p.read_text()
                      and not p.relative_to(ROOT).as_posix().startswith(_SPELLS_ITS_OWN)})
    assert spelled == ["podnetwork/ground/constants.py"]
