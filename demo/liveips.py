"""The demo's live IP changes (KEP Story 9, Req 25): an address added inside a running pod
shows in its network-status and its pod IPs, and goes when it is removed.

The address is added with `ip` inside the pod's network namespace, as a workload (or
SLAAC) would; the node's agent sees it through its netlink watch
(`bridge.agent.pods.addresswatch`) and writes network-status, from which the bridge makes the
pod IPs. It comes from 2001:2::/48 (RFC 5180, benchmarking), as the demo's IPv4 addresses
come from 198.18.0.0/15, and stays inside the pod: only the pod's own routing table
gains the prefix. `nodad` skips IPv6 duplicate address detection, which would keep the
address tentative (and out of the status) for about a second.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from bridge import npwg
from demo import host as host_mod
from demo.report import Report
from demo.store import Store
from podnetwork.ground import constants
from podnetwork.kep import networks

#: Benchmarking addresses (RFC 5180), the IPv6 counterpart of the demo's 198.18.0.0/15.
ADDRESS = "2001:2::a"
PREFIX_LENGTH = 64
#: How long the demo waits for the status to follow: the watch writes within
#: `addresswatch.Settings().min_interval` + `quiet` seconds (2.5 s) on an idle machine.
WAIT = 20.0


def _annotations(api: Store, namespace: str, pod: str) -> Mapping[str, str]:
    return networks.annotations_of(api.get("v1", "Pod", pod, namespace))


def status_ips(api: Store, namespace: str, pod: str, interface: str) -> list[str]:
    """The `ips` of the pod's network-status entry for `interface`."""
    text = _annotations(api, namespace, pod).get(npwg.NETWORK_STATUS_ANNOTATION) or "[]"
    entry: dict[str, Any] = next((e for e in json.loads(text) if e.get("interface") == interface), {})
    ips: list[str] = entry.get("ips") or []
    return ips


def pod_ips(api: Store, namespace: str, pod: str) -> list[dict[str, Any]]:
    text = _annotations(api, namespace, pod).get(constants.POD_IPS_ANNOTATION)
    ips: list[dict[str, Any]] = json.loads(text) if text else []
    return ips


async def _until(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def _link_local(netns: str, interface: str) -> list[str]:
    out = host_mod.run(["ip", "-n", netns, "-j", "-6", "addr", "show", "dev", interface], check=False).stdout
    return [
        a["local"]
        for link in json.loads(out or "[]")
        for a in link.get("addr_info", [])
        if ipaddress.ip_address(a["local"]).is_link_local
    ]


async def show(
    report: Report, api: Store, namespace: str, pod: str, netns: str, interface: str, network: str
) -> None:
    """Adds an IPv6 address on `interface` in the pod's namespace `netns`, shows the status
    follow, removes it and shows it go. `network` is the PodNetwork the interface belongs to."""
    r = report
    r.section("4b. Live IP changes: an address added inside a running pod (KEP Req 25)")
    cidr = f"{ADDRESS}/{PREFIX_LENGTH}"
    before_status = status_ips(api, namespace, pod, interface)
    before_pod_ips = pod_ips(api, namespace, pod)
    r.say(f"{pod} {interface} network-status ips: {before_status}")
    r.say(f"$ ip -n {netns} addr add {cidr} dev {interface} nodad")
    host_mod.run(["ip", "-n", netns, "addr", "add", cidr, "dev", interface, "nodad"])
    wanted = {"ip": ADDRESS, "podNetwork": network}

    def has_pod_ip() -> bool:
        return any(wanted.items() <= e.items() for e in pod_ips(api, namespace, pod))

    seen = await _until(lambda: cidr in status_ips(api, namespace, pod, interface) and has_pod_ip())
    r.say(f"the agent's address watch -> network-status ips: {status_ips(api, namespace, pod, interface)}")
    r.say(f"the bridge -> {constants.POD_IPS_ANNOTATION}: {json.dumps(pod_ips(api, namespace, pod))}")
    r.check(
        cidr in status_ips(api, namespace, pod, interface),
        f"{pod}'s network-status lists {cidr} on {interface}",
        status_ips(api, namespace, pod, interface),
    )
    r.check(
        seen and has_pod_ip(),
        f"{pod}'s pod IPs list {ADDRESS} on PodNetwork {network}",
        pod_ips(api, namespace, pod),
    )
    local = _link_local(netns, interface)
    reported = status_ips(api, namespace, pod, interface)
    r.say(f"{interface} also has {local or 'no'} link-local address(es): not pod IPs, not reported")
    r.check(
        not any(ipaddress.ip_interface(ip).ip.is_link_local for ip in reported),
        "no link-local (fe80::/10) address is in the network-status",
        reported,
    )

    r.say(f"$ ip -n {netns} addr del {cidr} dev {interface}")
    host_mod.run(["ip", "-n", netns, "addr", "del", cidr, "dev", interface])
    gone = await _until(
        lambda: (
            status_ips(api, namespace, pod, interface) == before_status
            and pod_ips(api, namespace, pod) == before_pod_ips
        )
    )
    r.say(f"network-status ips: {status_ips(api, namespace, pod, interface)}")
    r.say(f"{constants.POD_IPS_ANNOTATION}: {json.dumps(pod_ips(api, namespace, pod))}")
    r.check(
        gone,
        f"{ADDRESS} left {pod}'s network-status and pod IPs with the address",
        {
            "network-status": status_ips(api, namespace, pod, interface),
            "pod-ips": pod_ips(api, namespace, pod),
        },
    )


__all__ = ["ADDRESS", "pod_ips", "show", "status_ips"]
