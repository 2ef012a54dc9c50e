"""`podnetwork npwg-conformance` refuses bad input with a clear error (exit 2) and makes nothing.

The command runs as a process with its own TMPDIR, which must stay empty: no bench
directory, no recorders, no API, no namespace is made before the input is known
to be usable. These checks come before the root check, so they hold for any user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "podnetwork.cli", "npwg-conformance", *args],
        env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=60, check=False,
    )
    assert list(tmp.iterdir()) == [], "bad input must make nothing"
    return proc


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    path = tmp_path / "plugin"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def conf(tmp_path: Path, text: str) -> str:
    path = tmp_path / "conf.json"
    path.write_text(text)
    return str(path)


def test_a_missing_plugin_path_is_named(tmp_path: Path) -> None:
    proc = run(tmp_path, "--plugin", str(tmp_path / "nowhere" / "multus"))
    assert proc.returncode == 2
    assert f"error: --plugin {tmp_path / 'nowhere' / 'multus'}: no such file" in proc.stderr


def test_no_plugin_at_all_says_the_option_is_required(tmp_path: Path) -> None:
    proc = run(tmp_path)
    assert proc.returncode == 2
    assert "--plugin PATH is required" in proc.stderr


def test_a_plugin_that_is_not_executable_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "multus"
    path.write_text("not a program")
    proc = run(tmp_path, "--plugin", str(path))
    assert proc.returncode == 2
    assert f"--plugin {path}: not an executable file (chmod +x it" in proc.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not JSON after the placeholders were replaced"),
        ('["a", "list"]', "a CNI network configuration is a JSON object, got list"),
        ('{"name": "m", "plugins": [{"type": "multus"}]}', "not a configuration list"),
        ('{"name": "m"}', "the configuration needs a non-empty string 'type'"),
        ('{"type": "multus"}', "the configuration needs a non-empty string 'name'"),
        ('{"type": "multus", "name": "m", "capabilities": ["portMappings"]}', '"capabilities" must be an object'),
        ('{"type": "multus", "name": "m", "kubeconfig": "${KUBE_CONFIG}"}',
         "unknown placeholder(s) ${KUBE_CONFIG}; known: ${KUBECONFIG}"),
        ("[" * 200_000 + "]" * 200_000, "nested too deeply to be a CNI configuration"),
        ('{"type": "multus", "name": "m", "x": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001,
         "nested too deeply to be a CNI configuration"),
    ],
    ids=["not-json", "not-an-object", "a-list", "no-type", "no-name", "bad-capabilities", "unknown-placeholder",
         "200k-deep-list", "100k-deep-object"],
)
def test_a_bad_conf_is_refused_naming_the_file_and_the_fault(
    tmp_path: Path, plugin: Path, text: str, message: str
) -> None:
    path = conf(tmp_path, text)
    proc = run(tmp_path, "--plugin", str(plugin), "--conf", path)
    assert proc.returncode == 2
    assert f"error: --conf {path}: " in proc.stderr and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_missing_conf_file_is_named(tmp_path: Path, plugin: Path) -> None:
    proc = run(tmp_path, "--plugin", str(plugin), "--conf", str(tmp_path / "multus.json"))
    assert proc.returncode == 2
    assert f"error: --conf {tmp_path / 'multus.json'}: no such file" in proc.stderr


def test_an_unknown_scenario_lists_the_known_ones(tmp_path: Path, plugin: Path) -> None:
    proc = run(tmp_path, "--plugin", str(plugin), "--scenario", "del-backwards")
    assert proc.returncode == 2
    assert "unknown scenario(s) del-backwards; known: config-source-order," in proc.stderr


def test_a_daemon_line_with_an_unknown_placeholder_or_unbalanced_quotes_is_refused(
    tmp_path: Path, plugin: Path
) -> None:
    path = conf(tmp_path, '{"type": "multus", "name": "m"}')
    proc = run(tmp_path, "--plugin", str(plugin), "--conf", path, "--daemon", "multus-daemon --config ${CONFIG}")
    assert proc.returncode == 2
    assert "--daemon: unknown placeholder(s) ${CONFIG}" in proc.stderr
    proc = run(tmp_path, "--plugin", str(plugin), "--conf", path, "--daemon", "multus-daemon 'unclosed")
    assert proc.returncode == 2
    assert "--daemon: cannot split it into arguments: No closing quotation" in proc.stderr


def test_daemon_ready_without_a_daemon_and_a_report_in_a_missing_directory_are_refused(
    tmp_path: Path, plugin: Path
) -> None:
    path = conf(tmp_path, '{"type": "multus", "name": "m"}')
    proc = run(tmp_path, "--plugin", str(plugin), "--conf", path, "--daemon-ready", "/run/x.sock",
               "--report", str(tmp_path / "no" / "r.json"))
    assert proc.returncode == 2
    assert "--daemon-ready needs --daemon" in proc.stderr
    assert f"--report {tmp_path / 'no' / 'r.json'}: the directory {tmp_path / 'no'} does not exist" in proc.stderr


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("", "--report: an empty path; give a file name"),
        ("{tmp}", "--report {tmp}: is a directory; give a file name inside it"),
        ("{tmp}/sub/", "--report {tmp}/sub/: names a directory; give a file name"),
    ],
)
def test_a_report_path_that_cannot_be_a_file_is_refused_before_any_scenario(
    tmp_path: Path, plugin: Path, target: str, message: str
) -> None:
    (tmp_path / "sub").mkdir()
    path = conf(tmp_path, '{"type": "multus", "name": "m"}')
    proc = run(tmp_path, "--plugin", str(plugin), "--conf", path, "--report", target.format(tmp=tmp_path))
    assert proc.returncode == 2
    assert f"error: {message.format(tmp=tmp_path)}" in proc.stderr, proc.stderr
    assert "npwg-conformance:" not in proc.stdout, "no scenario ran"


def test_list_shows_every_scenario_with_its_sections_and_every_placeholder(tmp_path: Path) -> None:
    proc = run(tmp_path, "--list")
    assert proc.returncode == 0
    assert "del-reverse            [7.2]" in proc.stdout
    assert "key-infiniband-guid    [4.1.2.1.10.2]" in proc.stdout
    assert "${KUBECONFIG}: the kubeconfig of the harness's Kubernetes API" in proc.stdout


def test_a_conf_that_is_not_utf8_says_where(tmp_path: Path, plugin: Path) -> None:
    path = tmp_path / "conf.json"
    path.write_bytes(b'{"cniVersion": "\xff"}')
    proc = run(tmp_path, "--plugin", str(plugin), "--conf", str(path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "codec" not in proc.stderr, proc.stderr
    assert f"error: --conf {path}: not UTF-8 text (byte 16); save it as UTF-8" in proc.stderr, proc.stderr


def test_a_conf_past_the_size_limit_is_refused_before_it_is_read(tmp_path: Path, plugin: Path) -> None:
    path = tmp_path / "conf.json"
    with path.open("wb") as f:
        f.truncate(50 * 1024 * 1024)  # sparse: 50 MiB the harness must not read
    proc = run(tmp_path, "--plugin", str(plugin), "--conf", str(path))
    assert proc.returncode == 2
    assert (f"error: --conf {path}: is {50 * 1024 * 1024} bytes, more than the 1 MiB (1048576 bytes) a network "
            "configuration may have; give the plugin's CNI configuration file") in proc.stderr, proc.stderr


def test_a_conf_the_user_may_not_read_is_named_without_errno_text(tmp_path: Path, plugin: Path) -> None:
    from tests.unit.uid_support import NONROOT, needs_root, python_for, switch_to

    needs_root()
    shared = Path(tempfile.mkdtemp(prefix="npwg-conf-"))
    try:
        shared.chmod(0o755)
        (shared / "tmp").mkdir()
        os.chown(shared / "tmp", NONROOT, NONROOT)
        path = shared / "conf.json"
        path.write_text('{"cniVersion": "1.1.0", "name": "n", "type": "multus"}')
        path.chmod(0o600)
        shim = shared / "plugin"
        shim.write_text("#!/bin/sh\nexit 0\n")
        shim.chmod(0o755)
        python, extra = python_for(NONROOT)
        proc = subprocess.run([python, "-m", "podnetwork.cli", "npwg-conformance", "--plugin", str(shim),
                               "--conf", str(path)], capture_output=True, text=True, timeout=60, cwd=shared,
                              env={"PATH": "/usr/bin:/bin", "TMPDIR": str(shared / "tmp"), **extra},
                              preexec_fn=switch_to(NONROOT))
        assert list((shared / "tmp").iterdir()) == []
    finally:
        shutil.rmtree(shared)
    assert proc.returncode == 2, proc.stderr
    assert "Errno" not in proc.stderr, proc.stderr
    assert f"error: --conf {path}: permission denied; give a file this user (uid {NONROOT}) may read" in proc.stderr
