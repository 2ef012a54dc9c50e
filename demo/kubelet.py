"""A kubelet and container runtime stand-in: pod sandboxes are network namespaces, set up
through the CNI shim exactly as a runtime invokes a CNI plugin.

For each pod bound to its node, `Kubelet.start_pod` creates a namespace
(`pn-demo-<tag>-<pod>`), then runs the shim executable with the CNI environment
(`CNI_COMMAND`, `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME`, `CNI_ARGS` with the
pod's namespace and name, `CNI_PATH`) and the network configuration on stdin,
the way containerd or CRI-O run the plugin named by the node's CNI config. The
shim forwards the request to the node's agent over its unix socket, and the
agent runs the real plugins. `stop_pod` runs DEL the same way and removes the
namespace (CRI: StopPodSandbox, then RemovePodSandbox).
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo.host import Host, run
from demo.store import Store

SHIM_TIMEOUT = 60.0


class CNIFailed(RuntimeError):
    """The shim exited non-zero; the message is the CNI error it printed."""


@dataclass
class Sandbox:
    pod: str
    """`namespace/name`."""
    container_id: str
    netns: str
    """The namespace's name (`ip netns` name)."""

    @property
    def netns_path(self) -> str:
        return f"/var/run/netns/{self.netns}"


@dataclass
class ShimCall:
    """One shim execution, for the demo's narrative."""

    command: str
    pod: str
    env: dict[str, str]
    stdin: dict[str, Any]
    exit_code: int
    stdout: str
    stderr: str
    seconds: float


class Kubelet:
    """The node's pod lifecycle, reduced to what networking needs."""

    def __init__(
        self,
        node: str,
        api: Store,
        host: Host,
        *,
        shim: Sequence[str],
        plugin_config: dict[str, Any],
        cni_path: Sequence[Path],
    ) -> None:
        self.node = node
        self.api = api
        self.host = host
        self.shim = list(shim)
        self.plugin_config = plugin_config
        """The node's CNI network configuration as the runtime hands it to the shim."""
        self.cni_path = list(cni_path)
        self.sandboxes: dict[str, Sandbox] = {}
        self.calls: list[ShimCall] = []

    async def start_pod(self, namespace: str, name: str) -> dict[str, Any]:
        """Create the sandbox and attach it (CNI ADD); returns the CNI result; sets the pod Running."""
        key = f"{namespace}/{name}"
        pod = self.api.get("v1", "Pod", name, namespace)
        netns = self.host.netns(name)
        sandbox = Sandbox(key, uuid.uuid4().hex, netns)
        self.sandboxes[key] = sandbox
        result = await self._shim("ADD", sandbox, pod)
        ips = [ip["address"].split("/")[0] for ip in result.get("ips") or [] if ip.get("address")]
        status: dict[str, Any] = {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
        }
        if ips:
            status["podIP"] = ips[0]
            status["podIPs"] = [{"ip": ip} for ip in ips]
        self.api.patch("v1", "Pod", name, {"status": status}, namespace, subresource="status")
        return result

    async def stop_pod(self, namespace: str, name: str) -> None:
        """Tear the sandbox down (CNI DEL), then remove its namespace."""
        key = f"{namespace}/{name}"
        sandbox = self.sandboxes.get(key)
        if sandbox is None:
            return
        pod = self.api.find("v1", "Pod", name, namespace) or {
            "metadata": {"name": name, "namespace": namespace, "uid": ""}
        }
        await self._shim("DEL", sandbox, pod)
        del self.sandboxes[key]
        run(["ip", "netns", "delete", sandbox.netns], check=False)

    async def check_pod(self, namespace: str, name: str) -> None:
        """CNI CHECK: the agent asks every delegate whether the attachment is still as set up."""
        sandbox = self.sandboxes[f"{namespace}/{name}"]
        await self._shim("CHECK", sandbox, self.api.get("v1", "Pod", name, namespace))

    async def _shim(self, command: str, sandbox: Sandbox, pod: dict[str, Any]) -> dict[str, Any]:
        meta = pod["metadata"]
        cni_args = ";".join(
            [
                "IgnoreUnknown=1",
                f"K8S_POD_NAMESPACE={meta['namespace']}",
                f"K8S_POD_NAME={meta['name']}",
                f"K8S_POD_INFRA_CONTAINER_ID={sandbox.container_id}",
                f"K8S_POD_UID={meta.get('uid', '')}",
            ]
        )
        env = {
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": sandbox.container_id,
            "CNI_NETNS": sandbox.netns_path,
            "CNI_IFNAME": "eth0",
            "CNI_ARGS": cni_args,
            "CNI_PATH": ":".join(str(p) for p in self.cni_path),
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        }
        stdin = json.dumps(self.plugin_config).encode()
        loop = asyncio.get_running_loop()
        started = loop.time()
        proc = await asyncio.create_subprocess_exec(
            *self.shim,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), SHIM_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise CNIFailed(f"the shim did not answer {command} within {SHIM_TIMEOUT:.0f}s") from None
        call = ShimCall(
            command,
            sandbox.pod,
            env,
            self.plugin_config,
            proc.returncode or 0,
            out.decode(errors="replace"),
            err.decode(errors="replace"),
            loop.time() - started,
        )
        self.calls.append(call)
        if proc.returncode != 0:
            raise CNIFailed(
                f"CNI {command} of {sandbox.pod} failed (exit {proc.returncode}): "
                f"{call.stdout.strip() or call.stderr.strip()}"
            )
        text = call.stdout.strip()
        return json.loads(text) if text else {}
