"""Numbers out of range are refused by argparse before anything starts: exit 2, the flag and
what it takes named, no traceback, nothing listening. The commands run as processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CASES = [
    (["scheduler-extender", "--port", "70000"], "argument --port: invalid port '70000': expected a number from 1 to 65535"),
    (["scheduler-extender", "--port", "-1"], "argument --port: invalid port '-1': expected a number from 1 to 65535"),
    (["scheduler-extender", "--watch-timeout", "0"],
     "argument --watch-timeout: invalid number '0': expected a whole number, 1 or more"),
    (["scheduler-extender", "--max-body-bytes", "-1"],
     "argument --max-body-bytes: invalid byte count '-1': expected a whole number, 1 or more"),
    (["scheduler-extender", "--max-connections", "0"],
     "argument --max-connections: invalid number '0': expected a whole number, 1 or more"),
    (["controller", "--inuse-message-interval", "-3"],
     "argument --inuse-message-interval: invalid interval '-3': expected a number of seconds, 0 or more"),
    (["conformance", "--request-timeout", "-1"],
     "argument --request-timeout: invalid interval '-1': expected a number of seconds, more than 0"),
    (["conformance", "--settle-timeout", "0"],
     "argument --settle-timeout: invalid interval '0': expected a number of seconds, more than 0"),
    (["conformance", "--schedule-timeout", "nan"],
     "argument --schedule-timeout: invalid interval 'nan': expected a number of seconds, more than 0"),
    (["cni-agent", "--max-request-bytes", "-1"],
     "argument --max-request-bytes: invalid byte count '-1': expected a whole number, 1 or more"),
    (["bridge", "--liveness", "notaurl"],
     "argument --liveness: invalid URL 'notaurl': expected http://HOST:PORT/PATH, e.g. http://0.0.0.0:8080/healthz"),
    (["bridge", "--liveness", "https://0.0.0.0:8080/healthz"],
     "argument --liveness: invalid URL 'https://0.0.0.0:8080/healthz': expected http://HOST:PORT/PATH, "
     "e.g. http://0.0.0.0:8080/healthz"),
    (["bridge", "--liveness", "http://0.0.0.0:99999/healthz"],
     "argument --liveness: invalid URL 'http://0.0.0.0:99999/healthz': expected http://HOST:PORT/PATH, "
     "e.g. http://0.0.0.0:8080/healthz"),
    (["bridge", "--liveness", "http://0.0.0.0/healthz"],
     "argument --liveness: invalid URL 'http://0.0.0.0/healthz': expected http://HOST:PORT/PATH, "
     "e.g. http://0.0.0.0:8080/healthz"),
    (["cni-agent", "--plugin-timeout", "nan"],
     "argument --plugin-timeout: invalid interval 'nan': expected a number of seconds, more than 0"),
]


@pytest.mark.parametrize(("args", "message"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_an_out_of_range_number_is_refused_before_anything_starts(tmp_path: Path, args: list[str], message: str):
    proc = subprocess.run([sys.executable, "-m", "podnetwork", *args, "--kubeconfig", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"podnetwork {args[0]}: error: {message}" in proc.stderr, proc.stderr
