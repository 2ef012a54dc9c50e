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
import re
import shlex
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

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


def copied() -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY line of the Dockerfile (no --from: one stage)."""
    lines = []
    for line in DOCKERFILE.read_text().splitlines():
        if re.match(r"\s*COPY\s", line, re.IGNORECASE):
            words = [w for w in shlex.split(line)[1:] if not w.startswith("--")]
            lines.append((words[:-1], words[-1]))
    return lines


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
