"""Applying one pod's policy table in its netns: `nsenter` + `nft -j -f -` against the alternatives.

The table is what a pod with policies on two networks needs: base chains on input and
output, `ct state established,related accept`, a chain per interface and direction, and
a named set of peer addresses per chain (`--peers` addresses each), ~20 rules. Each
iteration replaces it (the whole transaction `bridge.agent.netns.nftables.apply` sends), once
with each way, in alternating order, so all see the same state and the same noise:

- nsenter + nft: `bridge.agent.netns.nftables.apply` as the agent runs it (nsenter enters the
  namespace through an inherited descriptor and execs nft; asyncio child process);
- nft + setns in preexec_fn: the same nft, the namespace entered by `setns(2)` in the
  child between fork and exec (ctypes, Python 3.11), no nsenter exec;
- libnftables in-process: `nft_run_cmd_from_buffer` of libnftables.so.1 through ctypes,
  in a short-lived thread that entered the namespace (what the `nftables` Python binding
  does, without the binding); no child process at all.

Wall time per apply (median, p90) and the ratio to nsenter + nft.

Needs root and nftables. Run:  sudo .venv/bin/python benchmarks/bench_nftables.py [-n 200] [--peers 100]
Prints a Markdown table for docs/benchmarks.md. Removes its netns.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from bridge.agent.netns import nftables

T = {"family": "inet", "table": nftables.TABLE}


def ruleset(peers: int) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"add": {"table": {"family": "inet", "name": nftables.TABLE}}}]
    established = {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}}
    for hook, meta, field in (("input", "iifname", "saddr"), ("output", "oifname", "daddr")):
        items.append({"add": {"chain": {**T, "name": hook, "type": "filter", "hook": hook, "prio": 0,
                                        "policy": "accept"}}})
        items.append({"add": {"rule": {**T, "chain": hook, "expr": [established, {"accept": None}]}}})
        for ifname in ("net1", "net2"):
            chain = f"{hook}_{ifname}"
            items.append({"add": {"chain": {**T, "name": chain}}})
            items.append({"add": {"rule": {**T, "chain": hook, "expr": [
                {"match": {"op": "==", "left": {"meta": {"key": meta}}, "right": ifname}},
                {"jump": {"target": chain}}]}}})
            elements = [f"10.{ifname[-1]}.{i // 250}.{i % 250 + 1}" for i in range(peers)]
            items.append({"add": {"set": {**T, "name": f"{chain}_peers", "type": "ipv4_addr", "elem": elements}}})
            for port in (80, 81, 443):
                items.append({"add": {"rule": {**T, "chain": chain, "expr": [
                    {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": field}},
                               "right": f"@{chain}_peers"}},
                    {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": port}},
                    {"accept": None}]}}})
            items.append({"add": {"rule": {**T, "chain": chain, "expr": [{"drop": None}]}}})
    return {"nftables": items}


def via_nsenter(netns: str, doc: dict[str, Any]) -> None:
    asyncio.run(nftables.apply(netns, doc))


_libc = ctypes.CDLL(None, use_errno=True)


def via_preexec_setns(netns: str, doc: dict[str, Any]) -> None:
    body = json.dumps(nftables.document(doc)).encode()
    fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)

    def enter() -> None:
        if _libc.setns(fd, 0x40000000) != 0:
            raise OSError(ctypes.get_errno(), "setns")

    try:
        proc = subprocess.run([NFT, "-j", "-f", "-"], input=body, capture_output=True, preexec_fn=enter,
                              timeout=10, check=False)
    finally:
        os.close(fd)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode())


_lib = ctypes.CDLL("libnftables.so.1")
_lib.nft_ctx_new.restype = ctypes.c_void_p
_lib.nft_ctx_new.argtypes = [ctypes.c_uint32]
_lib.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_lib.nft_ctx_free.argtypes = [ctypes.c_void_p]
_lib.nft_ctx_output_set_flags.argtypes = [ctypes.c_void_p, ctypes.c_uint]
NFT_CTX_OUTPUT_JSON = 1 << 4


def via_libnftables(netns: str, doc: dict[str, Any]) -> None:
    body = json.dumps(nftables.document(doc)).encode()
    errors: list[str] = []

    def run() -> None:
        fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if _libc.setns(fd, 0x40000000) != 0:
                raise OSError(ctypes.get_errno(), "setns")
        finally:
            os.close(fd)
        ctx = _lib.nft_ctx_new(0)
        try:
            _lib.nft_ctx_output_set_flags(ctx, NFT_CTX_OUTPUT_JSON)
            if _lib.nft_run_cmd_from_buffer(ctx, body) != 0:
                errors.append("libnftables refused the ruleset")
        finally:
            _lib.nft_ctx_free(ctx)

    # The thread ends inside the namespace; it never runs anything else.
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise RuntimeError(errors[0])


NFT = shutil.which("nft") or "nft"
WAYS: dict[str, Callable[[str, dict[str, Any]], None]] = {
    "nsenter + nft (bridge.agent.netns.nftables)": via_nsenter,
    "nft + setns in preexec_fn": via_preexec_setns,
    "libnftables in-process (ctypes, a thread in the netns)": via_libnftables,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=200, help="applies per way")
    parser.add_argument("--peers", type=int, default=100, help="addresses in each of the 4 sets")
    args = parser.parse_args()
    name = f"pnbench-nft-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    netns = f"/var/run/netns/{name}"
    doc = ruleset(args.peers)
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    try:
        for way, apply in WAYS.items():  # warm-up, and a check that each way applies the table
            apply(netns, doc)
            assert asyncio.run(nftables.exists(netns)), way
        ways = list(WAYS.items())
        for i in range(args.n):
            for way, apply in ways if i % 2 == 0 else reversed(ways):
                started = time.perf_counter()
                apply(netns, doc)
                times[way].append(time.perf_counter() - started)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    base = statistics.median(times[next(iter(WAYS))])
    print(f"{args.n} applies each, {len(doc['nftables'])} commands, 4 sets of {args.peers} addresses; "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}\n")
    print("| way | median | p90 | ratio (median) |")
    print("| --- | --- | --- | --- |")
    for way, samples in times.items():
        p90 = statistics.quantiles(samples, n=10)[-1]
        print(f"| {way} | {statistics.median(samples) * 1000:.1f} ms | {p90 * 1000:.1f} ms | "
              f"{statistics.median(samples) / base:.2f} |")


if __name__ == "__main__":
    main()
