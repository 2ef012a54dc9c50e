"""Hostile manifest files, and `podnetwork` run on them as a bounded subprocess.

The subprocess gets an address-space limit and a timeout, so code that expands
an alias bomb dies of MemoryError and code that hangs on a FIFO is killed: a
test of such code fails, it never takes the machine or the run down with it.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Address space for one `podnetwork` process: a few times what it needs to start
#: (~300 MiB with pydantic), far less than an expanded alias bomb.
MEMORY_LIMIT = 1024 * 1024 * 1024
#: Seconds before a run counts as hung. Generous: the machine runs other tests too.
TIMEOUT = 90
#: Output a refusal may print: a few lines, never the refused value.
SMALL_OUTPUT = 4096

PN_HEAD = "apiVersion: multinetwork.x-k8s.io/v1alpha1\nkind: PodNetwork\nmetadata:\n  name: pn\n"
NAD = (
    "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n"
    "metadata: {name: blue, namespace: ns}\n"
    "spec:\n  config: '{\"cniVersion\": \"1.0.0\", \"name\": \"blue\", \"type\": \"bridge\"}'\n"
)
DEPLOYMENT = (
    "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: ns}}\n"
    "spec:\n  template:\n    metadata:\n      annotations: {{k8s.v1.cni.cncf.io/networks: blue}}\n"
    "    spec:\n      containers: [{{name: c, image: x}}]\n"
)


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def podnetwork(*argv: str | Path, stdin: bytes | None = None, timeout: float = TIMEOUT) -> Run:
    """`python -m podnetwork ARGV` with bounded memory and time; a hang is an AssertionError."""
    cmd = [sys.executable, "-m", "podnetwork", *map(str, argv)]
    try:
        done = subprocess.run(
            cmd,
            input=stdin if stdin is not None else b"",
            capture_output=True,
            cwd=ROOT,
            timeout=timeout,
            preexec_fn=_limit_memory,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{' '.join(cmd[2:])} did not finish within {timeout} s") from None
    return Run(
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


def bomb(levels: int = 9, indent: int = 4) -> str:
    """A block list of anchors, each a list of 9 aliases to the one before: "billion
    laughs". Its last element stands for 9**levels strings; 9 levels are 387 million."""
    pad = " " * indent
    lines = [f'{pad}- &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"{pad}- &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def first_refused_alias(text: str, budget: int = 10_000) -> tuple[int, int]:
    """(line, column), 1-based, of the alias of `bomb()` that takes the expansion past
    `budget`: anchor k stands for 1 + 9 * size(k-1) nodes (10 for k = 0)."""
    size, total, k = 10, 0, 1
    while total + 9 * size <= budget:
        total, size, k = total + 9 * size, 1 + 9 * size, k + 1
    j = 1
    while total + j * size <= budget:
        j += 1
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if f"&l{k} " in line)
    column = -1
    for _ in range(j):
        column = lines[index].index(f"*l{k - 1}", column + 1)
    return index + 1, column + 1


def nested(depth: int) -> str:
    """A flow list nested `depth` deep on one line."""
    return "[" * depth + "]" * depth
