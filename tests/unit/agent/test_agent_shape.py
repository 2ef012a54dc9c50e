"""The agent's parts meet through public names: no module of `bridge/agent/` reaches into another's
underscore names (`other_module._name`, `obj._name`, `from x import _name`), the `Agent` class
stays a small composition (at most 400 lines), and no function of the agent, or of the NPWG
library and the translation it stands on, is over 80 lines. Read from the source (AST)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
AGENT = ROOT / "bridge" / "agent"
MAX_FUNCTION_LINES = 80
MAX_AGENT_LINES = 400


def _imported_modules(tree: ast.Module) -> dict[str, str]:
    """Local name -> module, for `import x` and `import x as y`."""
    return {(a.asname or a.name): a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}


def reaches(source: str) -> list[str]:
    """Each use of another module's or object's underscore name in `source` (dunders aside; a
    standard library module's own, such as `posix._exit`, is its public API)."""
    tree = ast.parse(source)
    stdlib = {local for local, module in _imported_modules(tree).items()
              if module.split(".")[0] in sys.stdlib_module_names}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.endswith("__"):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ({"self", "cls"} | stdlib):
                continue
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom):
            found += [f"line {node.lineno}: from {node.module} import {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.endswith("__")]
    return found


def test_the_check_sees_a_reach_into_another_modules_or_objects_private_names() -> None:
    assert reaches("from bridge.agent import routes\nroutes._socket_in('x')\n") == ["line 2: routes._socket_in"]
    assert reaches("def f(agent):\n    return agent._selection\n") == ["line 2: agent._selection"]
    assert reaches("class A:\n    def f(self):\n        return self.agent._save\n") == ["line 3: self.agent._save"]
    assert reaches("from bridge.agent.daemon.agent import _Found\n") == ["line 1: from bridge.agent.daemon.agent import _Found"]
    assert reaches("import posix\nposix._exit(0)\nclass A:\n    def f(self):\n        self._x = 1\n") == []


@pytest.mark.parametrize("path", sorted(AGENT.rglob("*.py")), ids=lambda p: str(p.relative_to(AGENT)))
def test_no_module_of_the_agent_reaches_into_another_ones_underscore_names(path: Path) -> None:
    assert reaches(path.read_text()) == []


def _functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text())
    return [(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}", node.end_lineno - node.lineno + 1)  # type: ignore[operator]
            for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


def test_no_function_of_the_product_code_is_over_80_lines() -> None:
    paths = [p for package in ("podnetwork", "bridge", "scheduler_plugin", "demo", "conformance")
             for p in (ROOT / package).rglob("*.py")]
    long = [f"{where}: {lines} lines" for path in paths for where, lines in _functions(path) if lines > MAX_FUNCTION_LINES]
    assert long == []


def test_the_agent_is_a_composition_of_at_most_400_lines() -> None:
    tree = ast.parse((AGENT / "daemon" / "agent.py").read_text())
    (agent,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Agent"]
    assert agent.end_lineno is not None and agent.end_lineno - agent.lineno + 1 <= MAX_AGENT_LINES
    assert len((AGENT / "daemon" / "agent.py").read_text().splitlines()) <= MAX_AGENT_LINES
