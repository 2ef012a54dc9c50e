"""Review findings in the CNI exec layer (bridge.cni.invoke), each a behaviour the issue requires."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

import pytest

from bridge.cni import invoke


def _plugin(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "plugin"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


async def test_a_timed_out_plugin_is_killed_with_its_children_within_the_timeout(tmp_path: Path) -> None:
    # A delegate such as `bridge` runs its IPAM plugin as a child; when that child hangs,
    # the per-call timeout must still bound the call and leave no process behind.
    pidfile = tmp_path / "child.pid"
    plugin = _plugin(tmp_path, f"sleep 20 &\necho $! > {pidfile}\nwait\n")
    started = time.monotonic()
    with pytest.raises(invoke.CNIError) as caught:
        await invoke.SubprocessExec().run(plugin, {"PATH": os.environ["PATH"]}, b"{}", 0.5)
    elapsed = time.monotonic() - started
    assert caught.value.code == invoke.ErrorCode.PLUGIN_TIMEOUT
    child = int(pidfile.read_text())
    try:
        assert elapsed < 5, f"the call took {elapsed:.1f}s with a 0.5s timeout"
        await asyncio.sleep(0.1)
        assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, 9)


async def test_a_plugin_the_kernel_cannot_execute_is_a_cni_error_not_an_oserror(tmp_path: Path) -> None:
    # No "#!" line: execve() fails with ENOEXEC. As a CNIError, DEL goes on with the
    # next attachment (NPWG 7.2) instead of stopping at a Python exception.
    plugin = tmp_path / "bridge"
    plugin.write_text("echo not a real plugin\n")
    plugin.chmod(0o755)
    args = invoke.RuntimeArgs(invoke.Command.DEL, "c1", "", "eth0")
    with pytest.raises(invoke.CNIError) as caught:
        await invoke.call(invoke.SubprocessExec(), "bridge", {"cniVersion": "1.0.0", "name": "n", "type": "bridge"},
                          args, [tmp_path], 5.0)
    assert "bridge" in str(caught.value)
