"""deploy/agent/Dockerfile builds an image that holds every package pyproject.toml installs.

No container engine runs here, so the image itself is not built. Instead the test reads
the Dockerfile's COPY lines, installs exactly the files they copy (with pip, as the
Dockerfile's `pip install .` does, into a directory of its own), and runs `podnetwork`
from that install in an interpreter that sees nothing of the repository: `podnetwork
--help` loads every subcommand's entry point, so a package missing from the image fails
it the way it fails in a pod (`ModuleNotFoundError`).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest

from bridge.agent.node import install
from bridge.agent.shim import shimbuild

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "deploy" / "agent" / "Dockerfile"


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def installed_packages() -> set[str]:
    """The top-level packages `pip install .` puts in the image: those setuptools' `packages.find`
    includes, each a directory of the repository with an `__init__.py`."""
    patterns = pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    found = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()
             and any(fnmatch.fnmatchcase(p.name, pattern) for pattern in patterns)}
    assert found, patterns
    return found


def entry_point_packages() -> set[str]:
    """The top-level packages the console script and the subcommands' entry points import."""
    project = pyproject()["project"]
    targets = [*project["scripts"].values(), *project["entry-points"]["podnetwork.commands"].values()]
    return {target.split(":")[0].split(".")[0] for target in targets}


@dataclass
class Stage:
    """One FROM of the Dockerfile: its name (`AS`), and its instructions as (KEYWORD, the rest)."""

    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def lines(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]

    def workdir(self) -> str:
        return (self.lines("WORKDIR") or ["/"])[-1]


def stages() -> list[Stage]:
    """The Dockerfile's stages, in order (continuation lines joined, comments left out)."""
    found: list[Stage] = []
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            found.append(Stage(words[0], name))
        else:
            assert found, f"{line!r} before any FROM"
            found[-1].instructions.append((keyword, rest.strip()))
    return found


def copies(stage: Stage) -> list[tuple[dict[str, str], list[str], str]]:
    """(flags, sources, destination) of each COPY of `stage`."""
    result = []
    for rest in stage.lines("COPY"):
        words = shlex.split(rest)
        flags = dict(w[2:].partition("=")[::2] for w in words if w.startswith("--"))
        paths = [w for w in words if not w.startswith("--")]
        result.append((flags, paths[:-1], paths[-1]))
    return result


def copied() -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY of the final stage from the build context (not --from)."""
    return [(sources, destination) for flags, sources, destination in copies(stages()[-1]) if "from" not in flags]


def copied_paths() -> set[str]:
    return {src.rstrip("/") for sources, _ in copied() for src in sources}


def test_the_dockerfile_copies_every_package_pyproject_installs_and_every_entry_point_needs() -> None:
    packages = installed_packages()
    assert "conformance" in packages  # `podnetwork conformance` and `npwg-conformance` live there
    assert entry_point_packages() <= packages
    missing = packages - copied_paths()
    assert not missing, f"deploy/agent/Dockerfile does not COPY {sorted(missing)}"
    # Each package lands at its own name under WORKDIR, where `pip install .` finds it.
    for sources, destination in copied():
        for src in sources:
            if src.rstrip("/") in packages:
                assert destination.rstrip("/") in (f"./{src.rstrip('/')}", src.rstrip("/")), (src, destination)


def test_podnetwork_and_each_subcommand_answer_help_from_an_install_of_exactly_what_the_dockerfile_copies(
        tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for path in copied_paths():
        origin = ROOT / path
        assert origin.exists(), f"the Dockerfile copies {path}, which the repository lacks"
        if origin.is_dir():
            subprocess.run(["cp", "-r", str(origin), str(source / path)], check=True)
        else:
            subprocess.run(["cp", str(origin), str(source / path)], check=True)
    target = tmp_path / "image"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(target),
         str(source)], capture_output=True, text=True, timeout=240)
    assert built.returncode == 0, built.stdout + built.stderr
    # A fresh interpreter that sees the install first and this environment's dependencies after it,
    # but not the repository nor its editable install (the .pth of a path added this way is not run).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "image.pth").write_text(f"{target}\n{sysconfig.get_paths()['purelib']}\n")

    def podnetwork(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(python), str(target / "bin" / "podnetwork"), *argv], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)

    where = subprocess.run([str(python), "-c", "import podnetwork, conformance; print(podnetwork.__file__); "
                            "print(conformance.__file__)"], capture_output=True, text=True, cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(target)) for line in where.stdout.split()), where.stdout
    listed = podnetwork("--help")
    assert listed.returncode == 0, listed.stderr
    commands = set(pyproject()["project"]["entry-points"]["podnetwork.commands"])
    for name in sorted(commands):
        assert name in listed.stdout
        answered = podnetwork(name, "--help")
        assert answered.returncode == 0, (name, answered.stderr)


@pytest.mark.parametrize("ignored", [".venv", ".git"])
def test_the_build_context_leaves_out_what_the_image_does_not_need(ignored: str) -> None:
    # `docker build .` sends the whole repository to the engine otherwise, .venv included.
    patterns = (ROOT / ".dockerignore").read_text().split()
    assert ignored in patterns


def test_the_final_stage_copies_the_shim_the_build_stage_makes_to_where_install_looks_and_has_no_compiler() -> None:
    *builders, final = stages()
    shims = [(flags["from"], sources, destination) for flags, sources, destination in copies(final) if "from" in flags]
    assert len(shims) == 1, shims
    stage, sources, destination = shims[0]
    assert stage in [b.name for b in builders], f"--from={stage} names no stage"
    assert len(sources) == 1 and destination == str(install.DEFAULT_PREBUILT_SHIM)
    # The node needs no compiler, nor does the image the DaemonSet runs: only the build stage has one.
    packages = " ".join(final.lines("RUN"))
    assert not re.search(r"\b(gcc|g\+\+|clang|build-essential|cc|libc6-dev)\b", packages), packages


def test_the_build_stage_builds_exactly_the_shim_install_accepts(tmp_path: Path) -> None:
    *builders, final = stages()
    ((stage_name, (source,)),) = [(flags["from"], sources) for flags, sources, _ in copies(final) if "from" in flags]
    stage = next(b for b in builders if b.name == stage_name)
    root = tmp_path / "stage"  # stands for the build stage's filesystem

    def inside(path: str) -> Path:
        absolute = PurePosixPath(stage.workdir()) / path  # a relative path is under WORKDIR
        return root / str(absolute).lstrip("/")

    workdir = inside(".")
    workdir.mkdir(parents=True)
    for _flags, sources, destination in copies(stage):
        for src in sources:
            origin = ROOT / src
            assert origin.is_file(), f"the build stage copies {src}, which the repository lacks"
            target = inside(destination) / origin.name if destination.endswith("/") else inside(destination)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(origin, target)
    assert {p.name for p in (workdir / "bridge" / "agent" / "shim").iterdir()} >= {"shim.c", "protocol.py", "shimbuild.py"}
    # An interpreter with none of the project's dependencies, first on PATH, as in python:slim.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {"PATH": f"{venv / 'bin'}:{os.environ.get('PATH', os.defpath)}", "HOME": str(tmp_path)}
    runs = stage.lines("RUN")
    packages = [r for r in runs if r.startswith("apt-get ")]
    assert len(packages) == 1 and {"gcc", "libc6-dev"} <= set(packages[0].split()), \
        "a static build needs the compiler and libc.a"
    for run in runs:
        if run in packages:
            continue
        done = subprocess.run(["sh", "-c", run], cwd=workdir, env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, (run, done.stdout, done.stderr)
    built = inside(source)
    assert shimbuild.prebuilt_problem(built) is None
    assert shimbuild.carried_build(built.read_bytes()) == shimbuild.build_id()
    # What the DaemonSet's `cni-agent --install` then does with it, where no compiler exists.
    nothing = tmp_path / "no-compiler"
    nothing.mkdir()
    installed = install.install(tmp_path / "bin", "/usr/bin/python3", prebuilt=built, compiler_path=str(nothing))
    assert installed.compiled and installed.how == f"prebuilt {built}"
    assert installed.path.read_bytes() == built.read_bytes()
