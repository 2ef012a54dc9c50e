"""`podnetwork conformance` as a process: bad arguments and an unreachable cluster exit 2 with a
message saying what to fix, before any test runs; --list shows every test under its feature."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from conformance.kep import command
from conformance.kep.tests import ALL
from tests.api.kube_emulator import write_kubeconfig
from tests.unit.ports_support import free_port


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podnetwork", "conformance", *argv], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})


def test_list_shows_every_test() -> None:
    done = _run("--list")
    assert done.returncode == 0
    assert all(f"    {t.name}: " in done.stdout for t in ALL)


def test_an_unknown_feature_exits_2_naming_the_known_ones() -> None:
    done = _run("--features", "PodNetworkAPI,Teleport")
    assert done.returncode == 2
    assert "unknown feature(s) Teleport; known: PodNetworkAPI, PodNetworkConditions" in done.stderr


def test_list_refuses_an_unknown_feature_or_test_too() -> None:
    done = _run("--features", "nosuch", "--list")
    assert done.returncode == 2, done.stdout
    assert done.stdout == ""
    assert "podnetwork conformance: --features: unknown feature(s) nosuch; known: PodNetworkAPI, " in done.stderr
    done = _run("--skip-tests", "NoSuchTest", "--list")
    assert done.returncode == 2 and "--skip-tests: unknown test(s) NoSuchTest; see --list" in done.stderr


def test_an_unknown_test_to_skip_exits_2() -> None:
    done = _run("--skip-tests", "NoSuchTest")
    assert done.returncode == 2 and "--skip-tests: unknown test(s) NoSuchTest; see --list" in done.stderr


def test_a_report_needs_the_implementation_named() -> None:
    done = _run("--report", "r.yaml", "--implementation-name", "x")
    assert done.returncode == 2
    assert "--report needs --implementation-name, --implementation-version and --implementation-url" in done.stderr


def test_profile_and_features_are_exclusive() -> None:
    done = _run("--profile", "core", "--features", "PodNetworkAPI")
    assert done.returncode == 2 and "not allowed with argument" in done.stderr


def test_an_unreachable_cluster_exits_2_naming_it(tmp_path: Path) -> None:
    port = free_port()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    done = _run("--kubeconfig", str(kubeconfig), "--request-timeout", "2")
    assert done.returncode == 2
    assert f"cannot reach the cluster at http://127.0.0.1:{port}" in done.stderr


def test_no_cluster_configured_exits_2_with_the_credentials_message() -> None:
    done = _run()
    assert done.returncode == 2 and "podnetwork conformance: " in done.stderr


def _named(*argv: str) -> tuple[str, ...]:
    return (*argv, "--implementation-name", "x", "--implementation-version", "1", "--implementation-url", "u")


def test_a_report_that_cannot_be_written_is_refused_before_the_cluster_is_asked(tmp_path: Path) -> None:
    # An unreachable cluster would be the first error if the report were checked only at the end.
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{free_port()}")
    for target, words in [(tmp_path / "missing" / "r.yaml", f"the directory {tmp_path / 'missing'} does not exist"),
                          (tmp_path, "is a directory; give a file name inside it"),
                          ("", "--report: an empty path; give a file name")]:
        done = _run("--kubeconfig", str(kubeconfig), *_named("--report", str(target)))
        assert done.returncode == 2
        assert words in done.stderr and "cannot reach the cluster" not in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_a_report_that_fails_to_write_at_the_end_is_printed_instead_of_lost(tmp_path: Path) -> None:
    full = tmp_path / "report.json"
    full.symlink_to("/dev/full")  # checked writable before the run; the write itself fails
    document = {"apiVersion": "x", "kind": "ConformanceReport", "profiles": []}
    out, err = io.StringIO(), io.StringIO()
    assert not command.save_report(full, document, out, err)
    assert err.getvalue() == (f"podnetwork conformance: --report {full}: cannot write it: No space left on device; "
                              "the report follows on standard output\n")
    assert json.loads(out.getvalue()) == document
