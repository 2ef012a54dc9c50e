"""bridge.agent.netns.clusterips without the kernel: the `ip` batch it sends to make a pod's ClusterIP routes
exactly the wanted ones (ours only, by protocol 201), against stand-in `nsenter` and `ip` scripts
under tmp_path and this process's own namespace file. The real thing: tests/cni/test_service_cluster_ips.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bridge.agent.netns import clusterips, nftables
from bridge.services.dnat import Route

OWN_NETNS = "/proc/self/ns/net"


def fake_ip(tmp_path: Path, v4: list[dict[str, str]], v6: list[dict[str, str]]) -> dict[str, str]:
    nsenter = tmp_path / "nsenter"
    nsenter.write_text('#!/bin/sh\nshift\nexec "$@"\n')
    (tmp_path / "v4").write_text(json.dumps(v4))
    (tmp_path / "v6").write_text(json.dumps(v6))
    ip = tmp_path / "ip"
    ip.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\n'
                  f'case "$*" in *-batch*) cat > {tmp_path}/batch;; *-4*) cat {tmp_path}/v4;; *) cat {tmp_path}/v6;; esac\n')
    for script in (nsenter, ip):
        script.chmod(0o755)
    return {"nsenter": str(nsenter), "ip": str(ip)}


def test_stale_routes_go_wanted_ones_come_and_those_in_place_are_left(tmp_path: Path) -> None:
    fake = fake_ip(tmp_path, [{"dst": "10.96.0.1", "dev": "net1", "prefsrc": "10.1.0.9", "protocol": "201"},
                              {"dst": "10.96.0.2", "dev": "net1", "prefsrc": "10.1.0.9"}],
                   [{"dst": "fd00:96::1", "dev": "net1", "prefsrc": "fd00:1::9"}])
    wanted = [Route("10.96.0.1/32", "net1", "10.1.0.9"), Route("10.96.0.3/32", "net2", "10.2.0.9")]

    asyncio.run(clusterips.sync_routes(OWN_NETNS, wanted, **fake))

    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[:2] == ["-j -4 route show table main proto 201", "-j -6 route show table main proto 201"]
    assert (tmp_path / "batch").read_text().splitlines() == [
        "route del 10.96.0.2/32 dev net1 proto 201",
        "route del fd00:96::1/128 dev net1 proto 201",
        "route replace 10.96.0.3/32 dev net2 src 10.2.0.9 proto 201",
    ]


def test_nothing_to_change_runs_no_batch(tmp_path: Path) -> None:
    fake = fake_ip(tmp_path, [{"dst": "10.96.0.1", "dev": "net1", "prefsrc": "10.1.0.9"}], [])
    asyncio.run(clusterips.sync_routes(OWN_NETNS, [Route("10.96.0.1/32", "net1", "10.1.0.9")], **fake))
    assert not (tmp_path / "batch").exists()


def test_an_answer_that_is_not_ips_json_is_an_error_naming_the_namespace(tmp_path: Path) -> None:
    fake = fake_ip(tmp_path, [], [])
    (tmp_path / "v4").write_text("10.96.0.1 dev net1")
    with pytest.raises(nftables.NftablesError, match=f"list our routes \\(-4\\) in network namespace {OWN_NETNS} "
                                                    "failed: ip answered what is not its JSON: 10.96.0.1 dev net1"):
        asyncio.run(clusterips.routes(OWN_NETNS, **fake))
