"""The operators' kopf identity never needs a passwd entry (a container's uid often has none).

kopf makes an identity from $POD_ID, else from `getpass.getuser()`, which raises for a uid
missing from /etc/passwd: the bridge, run as uid 65532 without POD_ID, died of it at start.
These run `podnetwork.kube.peering.identity` in a process whose uid has no passwd entry
(root is needed to switch to it; CI runs as root).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.unit.uid_support import NONROOT, needs_root, python_for, switch_to, without_passwd_entry


@pytest.fixture
def root() -> None:
    needs_root()


def identity_as(uid: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "from podnetwork.kube import peering; print(peering.identity())"
    python, extra = python_for(uid)
    return subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**env, **extra}, cwd="/", preexec_fn=switch_to(uid))


def test_without_pod_id_a_uid_with_no_passwd_entry_still_gets_an_identity_naming_it(root: None) -> None:
    uid = without_passwd_entry(NONROOT)
    env = {k: v for k, v in os.environ.items() if k not in ("POD_ID", "USER", "LOGNAME", "LNAME", "USERNAME")}
    done = identity_as(uid, env)
    assert done.returncode == 0, done.stderr
    who, _, rest = done.stdout.strip().partition("@")
    assert who == str(uid) and rest, done.stdout


def test_pod_id_is_the_identity_when_given(root: None) -> None:
    uid = without_passwd_entry(NONROOT)
    done = identity_as(uid, {**os.environ, "POD_ID": "podnetwork-bridge-7d9c-x2"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "podnetwork-bridge-7d9c-x2"
