"""Which shim `podnetwork cni-agent --install` installs: the compiled one by default (prebuilt when
it is the build of this shim.c and protocol, else built with the C compiler on PATH), the Python one
with one warning saying why when neither can be had, only the compiled one with --compiled-shim
(failing clearly without it), only the Python one with --python-shim. Real builds with this
machine's cc; "no compiler" is a PATH without one; the CLI runs as a process."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.agent.node import install
from bridge.agent.shim import shimbuild
from tests.unit.agent.test_shim_process import PYTHON

ROOT = Path(__file__).resolve().parents[3]
ELF = b"\x7fELF"


def needs_cc() -> None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.fail("no C compiler on this machine: `make system-deps` installs gcc (CI has it)")


@pytest.fixture(scope="module")
def prebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compiled shim built as the image's build stage builds it."""
    needs_cc()
    out = tmp_path_factory.mktemp("prebuilt") / "multinetwork"
    shimbuild.build(out)
    return out


def version_answer(shim: Path) -> subprocess.CompletedProcess[bytes]:
    """VERSION, which the compiled shim hands to the Python shim beside it."""
    return subprocess.run([str(shim)], input=b"{}", env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=30)


def no_compiler_path(tmp_path: Path) -> str:
    empty = tmp_path / "no-compiler"
    empty.mkdir(exist_ok=True)
    return str(empty)


def test_by_default_the_compiled_shim_is_built_where_a_compiler_exists_with_the_python_one_beside_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    needs_cc()
    with caplog.at_level(logging.WARNING, "bridge.agent.node.install"):
        installed = install.install(tmp_path / "bin", PYTHON)
    assert installed.compiled and installed.how.startswith("built with ")
    assert installed.path == tmp_path / "bin" / "multinetwork"
    assert installed.path.read_bytes()[:4] == ELF and os.access(installed.path, os.X_OK)
    assert (tmp_path / "bin" / ".multinetwork.py").read_text().startswith(f"#!{PYTHON} -IS")
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == [".multinetwork.py", "multinetwork"]
    assert caplog.records == [], "nothing to warn about"
    answered = version_answer(installed.path)
    assert answered.returncode == 0 and "supportedVersions" in json.loads(answered.stdout)


def test_without_a_compiler_the_python_shim_is_installed_with_one_warning_naming_what_was_looked_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = no_compiler_path(tmp_path)
    with caplog.at_level(logging.WARNING, "bridge.agent.node.install"):
        installed = install.install(tmp_path / "bin", PYTHON, compiler_path=path)
    assert not installed.compiled
    assert installed.path.read_text().splitlines()[0] == f"#!{PYTHON} -IS"
    (warning,) = caplog.records
    assert warning.levelno == logging.WARNING
    assert f"no C compiler found: looked for cc and gcc in PATH={path}" in warning.getMessage()
    assert "installed the Python shim as" in warning.getMessage()


def test_a_failed_build_installs_the_python_shim_and_says_the_compilers_first_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A compiler that fails as gcc does: a context line, then the error, then more.
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "cc").write_text("#!/bin/sh\necho \"shim.c: In function 'main':\" >&2\n"
                               "echo 'shim.c:12:5: error: expected declaration' >&2\necho 'later: error: x' >&2\n"
                               "exit 1\n")
    (broken / "cc").chmod(0o755)
    with caplog.at_level(logging.WARNING, "bridge.agent.node.install"):
        installed = install.install(tmp_path / "bin", PYTHON, compiler_path=str(broken))
    assert not installed.compiled
    (warning,) = caplog.records
    assert f"{broken / 'cc'} failed to build {shimbuild.SHIM_C_SOURCE}: shim.c:12:5: error: expected declaration" \
        in warning.getMessage()
    assert "later" not in warning.getMessage()
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["multinetwork"], "no temporary file left"


def test_compiled_required_without_a_compiler_fails_saying_why_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(install.NoCompiledShim, match="no C compiler found: looked for cc and gcc"):
        install.install(tmp_path / "bin", PYTHON, shim="compiled", compiler_path=no_compiler_path(tmp_path))
    assert list((tmp_path / "bin").iterdir()) == []


def test_a_prebuilt_shim_of_this_source_is_installed_as_is_and_finds_the_python_shim_beside_its_new_place(
    tmp_path: Path, prebuilt: Path
) -> None:
    # No compiler: the prebuilt one is all there is, as in the image.
    installed = install.install(tmp_path / "bin", PYTHON, name="mn", prebuilt=prebuilt,
                                compiler_path=no_compiler_path(tmp_path))
    assert installed.compiled and installed.how == f"prebuilt {prebuilt}"
    assert installed.path.read_bytes() == prebuilt.read_bytes()
    assert (tmp_path / "bin" / ".mn.py").is_file()
    answered = version_answer(installed.path)
    assert answered.returncode == 0 and "supportedVersions" in json.loads(answered.stdout), answered.stdout


def test_a_prebuilt_shim_of_another_source_is_not_installed(
    tmp_path: Path, prebuilt: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = prebuilt.read_bytes()
    carried = shimbuild.carried_build(data)
    assert carried == shimbuild.build_id()
    stale = tmp_path / "stale"
    stale.write_bytes(data.replace(carried.encode(), b"0" * 64))
    assert "was built from another shim.c or protocol" in (shimbuild.prebuilt_problem(stale) or "")
    with caplog.at_level(logging.WARNING, "bridge.agent.node.install"):
        fallback = install.install(tmp_path / "a", PYTHON, prebuilt=stale, compiler_path=no_compiler_path(tmp_path))
    assert not fallback.compiled and fallback.path.read_bytes()[:2] == b"#!"
    (warning,) = caplog.records
    assert f"the prebuilt shim {stale} was built from another shim.c or protocol" in warning.getMessage()
    assert "no C compiler found" in warning.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, "bridge.agent.node.install"):
        rebuilt = install.install(tmp_path / "b", PYTHON, prebuilt=stale)
    assert rebuilt.compiled and rebuilt.how.startswith("built with ")
    assert shimbuild.carried_build(rebuilt.path.read_bytes()) == shimbuild.build_id()
    (warning,) = caplog.records
    assert "built with" in warning.getMessage() and "built from another shim.c" in warning.getMessage()


def test_a_build_id_covers_the_c_source_and_the_protocols_constants(tmp_path: Path) -> None:
    source = shimbuild.SHIM_C_SOURCE.read_bytes()
    assert shimbuild.build_id() == shimbuild.build_id(source)
    assert shimbuild.build_id(source + b"\n") != shimbuild.build_id()
    assert f'-DSHIM_BUILD="{shimbuild.build_id()}"' in shimbuild.compile_flags()
    assert shimbuild.carried_build(b"x" + shimbuild.MARKER + b"a" * 64 + b"\0y") == "a" * 64
    assert shimbuild.carried_build(b"x" + shimbuild.MARKER + b"a" * 63 + b"\0") is None
    assert "does not exist" in (shimbuild.prebuilt_problem(tmp_path / "nothing") or "")
    for i, (what, data) in enumerate((("not an executable (ELF)", b"#!/bin/sh\n"),
                                      ("carries no build id", ELF + b"\0" * 64))):
        (tmp_path / str(i)).write_bytes(data)
        assert what in (shimbuild.prebuilt_problem(tmp_path / str(i)) or "")


def cni_agent(tmp_path: Path, *flags: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    """`podnetwork cni-agent --install ...` as a process; it installs, then stops at its unreadable
    --objects (exit 2): the install step alone, as the DaemonSet's container runs it."""
    env = {**os.environ, "PATH": path if path is not None else os.environ.get("PATH", os.defpath)}
    return subprocess.run(
        [sys.executable, "-m", "podnetwork.cli", "cni-agent", "--install", "--install-bin-dir", str(tmp_path / "bin"),
         "--shim-python", PYTHON, "--objects", str(tmp_path / "missing.yaml"), "--socket", str(tmp_path / "a.sock"),
         *flags],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=180,
    )


def test_the_command_installs_the_compiled_shim_by_default_and_the_python_one_with_one_line_without_a_compiler(
    tmp_path: Path,
) -> None:
    needs_cc()
    done = cni_agent(tmp_path / "default")
    assert "missing.yaml: no such file or directory" in done.stderr, done.stderr
    assert f"installed {tmp_path / 'default' / 'bin' / 'multinetwork'}: the compiled shim (built with " in done.stderr
    assert (tmp_path / "default" / "bin" / "multinetwork").read_bytes()[:4] == ELF
    assert "WARNING" not in done.stderr

    path = no_compiler_path(tmp_path)
    done = cni_agent(tmp_path / "bare", path=path)
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, done.stderr
    assert f"no C compiler found: looked for cc and gcc in PATH={path}" in warnings[0]
    assert "the Python shim (the fallback: see the warning)" in done.stderr and "missing.yaml: no such file or directory" in done.stderr
    assert done.stderr.count("looked for cc and gcc") == 1, "the reason is said once"
    assert (tmp_path / "bare" / "bin" / "multinetwork").read_text().startswith(f"#!{PYTHON} -IS")


def test_the_command_with_compiled_shim_and_no_compiler_fails_before_starting_and_says_what_to_do(
    tmp_path: Path,
) -> None:
    done = cni_agent(tmp_path, "--compiled-shim", path=no_compiler_path(tmp_path))
    assert done.returncode == 1
    assert "error: --compiled-shim: the compiled shim cannot be installed: no C compiler found" in done.stderr
    assert "install a C compiler" in done.stderr and "--prebuilt-shim" in done.stderr
    assert "missing.yaml: no such file or directory" not in done.stderr, "it stopped at the install"
    assert not (tmp_path / "bin" / "multinetwork").exists()


def test_the_command_takes_the_prebuilt_shim_and_the_python_one_when_asked(tmp_path: Path, prebuilt: Path) -> None:
    done = cni_agent(tmp_path / "pre", "--prebuilt-shim", str(prebuilt), path=no_compiler_path(tmp_path))
    assert f"the compiled shim (prebuilt {prebuilt})" in done.stderr, done.stderr
    assert (tmp_path / "pre" / "bin" / "multinetwork").read_bytes() == prebuilt.read_bytes()

    done = cni_agent(tmp_path / "py", "--python-shim", "--prebuilt-shim", str(prebuilt))
    assert "the Python shim (as asked)" in done.stderr, done.stderr
    assert "WARNING" not in done.stderr
    assert (tmp_path / "py" / "bin" / "multinetwork").read_text().startswith(f"#!{PYTHON} -IS")


def test_compiled_and_python_shim_flags_exclude_each_other_and_help_says_the_default(tmp_path: Path) -> None:
    done = cni_agent(tmp_path, "--compiled-shim", "--python-shim")
    assert done.returncode == 2 and "not allowed with argument" in done.stderr
    helped = subprocess.run([sys.executable, "-m", "podnetwork.cli", "cni-agent", "--help"], capture_output=True,
                            text=True, cwd=ROOT, timeout=60)
    text = " ".join(helped.stdout.split())
    assert "Default: the compiled shim where it can be had" in text
    assert f"default: {install.DEFAULT_PREBUILT_SHIM} if it exists" in text
