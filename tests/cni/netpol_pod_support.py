"""The program each pod of the netpol harness runs inside its network namespace (stdlib only).

Started by `tests.cni.netpol_support.Node` as `nsenter --net=<pod netns> python3 -S
netpol_pod_support.py [POD]`, it is the pod's servers and its client at once:

- servers on 0.0.0.0: TCP and UDP on ports 80 and 81 (SCTP too when the kernel has it),
  echoing what they receive; ICMP echo is the kernel's own;
- "who" servers on 0.0.0.0 port 8080 (`WHO_PORT`), TCP and UDP (SCTP too): each answers a
  connection (TCP, SCTP) or a datagram (UDP) with `{"pod": POD, "peer": "<the client's address>"}`,
  so a client reaching a Service sees which backend it got, and from which of its addresses;
- a client that reads requests as JSON lines on stdin and answers each with one JSON
  line on stdout:
  - `{"op": "probe", "probes": [{"dst": IP, "protocol": "TCP"|"UDP"|"SCTP"|"ICMP", "port": N}],
    "timeout": S}` -> `{"results": [true|false, ...]}`: all probes at once, one thread
    each, so a dropped packet costs one time-out for the whole batch;
  - `{"op": "open", "conn": K, "dst": IP, "port": N, "timeout": S}` -> `{"ok": bool, "error": str}`:
    a TCP connection kept open under the name K;
  - `{"op": "echo", "conn": K, "timeout": S}` -> `{"ok": bool, "error": str}`: one
    round trip over connection K;
  - `{"op": "close", "conn": K}` -> `{"ok": true}`;
  - `{"op": "who", "dst": IP, "protocol": "TCP"|"UDP"|"SCTP", "port": N, "count": C, "timeout": S}` ->
    `{"answers": [{"pod": ..., "peer": ...} | {"error": "..."}, ...]}`: C new connections at once,
    each asking the who server there (through a Service's DNAT, if any) who it is.

Its first line is `{"ready": true, "sctp": "" | "why SCTP is unavailable"}` once every server listens.
It exits when stdin closes.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

PORTS = (80, 81)
WHO_PORT = 8080
POD = sys.argv[1] if len(sys.argv) > 1 else ""
IPPROTO_SCTP = getattr(socket, "IPPROTO_SCTP", 132)
ICMP_ECHO_REQUEST = 8
ICMP_ECHO_REPLY = 0


def sctp_unavailable() -> str:
    """'' when this kernel makes SCTP sockets, else why not (the module is missing, most often)."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_SCTP).close()
    except OSError as exc:
        return f"the kernel module sctp is not available: socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP) failed: {exc}"
    return ""


def serve_stream(sock: socket.socket) -> None:
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=echo_stream, args=(conn,), daemon=True).start()


def echo_stream(conn: socket.socket) -> None:
    with conn:
        try:
            while data := conn.recv(4096):
                conn.sendall(data)
        except OSError:
            pass


def serve_datagram(sock: socket.socket) -> None:
    while True:
        data, peer = sock.recvfrom(4096)
        with contextlib.suppress(OSError):
            sock.sendto(data, peer)


def serve_who_stream(sock: socket.socket) -> None:
    while True:
        conn, peer = sock.accept()
        with conn, contextlib.suppress(OSError):
            conn.sendall(json.dumps({"pod": POD, "peer": peer[0]}).encode())


def serve_who_datagram(sock: socket.socket) -> None:
    while True:
        _, peer = sock.recvfrom(4096)
        with contextlib.suppress(OSError):
            sock.sendto(json.dumps({"pod": POD, "peer": peer[0]}).encode(), peer)


def who(dst: str, protocol: str, port: int, timeout: float) -> dict[str, Any]:
    """Asks the who server at dst:port (a new connection); its answer, or the error."""
    try:
        if protocol in ("TCP", "SCTP"):
            proto = IPPROTO_SCTP if protocol == "SCTP" else 0
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto) as sock:
                sock.settimeout(timeout)
                sock.connect((dst, port))
                data = b""
                while chunk := sock.recv(4096):
                    data += chunk
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.settimeout(timeout)
                sock.connect((dst, port))
                sock.send(b"?")
                data = sock.recv(4096)
        answer: dict[str, Any] = json.loads(data)
        return answer
    except (OSError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def listen(sctp: bool) -> None:
    kinds = [(socket.SOCK_STREAM, 0), (socket.SOCK_DGRAM, 0)] + ([(socket.SOCK_STREAM, IPPROTO_SCTP)] if sctp else [])
    for kind, proto in kinds:
        for port in PORTS:
            sock = socket.socket(socket.AF_INET, kind, proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("0.0.0.0", port))
            if kind == socket.SOCK_STREAM:
                sock.listen(128)
                target = serve_stream
            else:
                target = serve_datagram
            threading.Thread(target=target, args=(sock,), daemon=True).start()
        sock = socket.socket(socket.AF_INET, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", WHO_PORT))
        if kind == socket.SOCK_STREAM:
            sock.listen(128)
        who_target = serve_who_stream if kind == socket.SOCK_STREAM else serve_who_datagram
        threading.Thread(target=who_target, args=(sock,), daemon=True).start()


def probe(dst: str, protocol: str, port: int, timeout: float) -> bool:
    try:
        if protocol in ("TCP", "SCTP"):
            proto = IPPROTO_SCTP if protocol == "SCTP" else 0
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto) as sock:
                sock.settimeout(timeout)
                sock.connect((dst, port))
                sock.sendall(b"p")
                return sock.recv(16) == b"p"
        if protocol == "UDP":
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.settimeout(timeout)
                sock.connect((dst, port))
                token = secrets.token_bytes(8)
                sock.send(token)
                return sock.recv(64) == token
        if protocol == "ICMP":
            return ping(dst, timeout)
    except OSError:  # refused, timed out, unreachable
        return False
    raise ValueError(f"unknown protocol {protocol!r}")


def ping(dst: str, timeout: float) -> bool:
    ident, seq = secrets.randbelow(0xFFFF), secrets.randbelow(0xFFFF)
    payload = secrets.token_bytes(16)
    header = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, 0, ident, seq)
    packet = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, checksum(header + payload), ident, seq) + payload
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as sock:
        sock.sendto(packet, (dst, 0))
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            data, (src, _) = sock.recvfrom(2048)
            icmp = data[(data[0] & 0x0F) * 4:]  # after the IP header
            if src == dst and len(icmp) >= 8:
                kind, _, _, rid, rseq = struct.unpack("!BBHHH", icmp[:8])
                if kind == ICMP_ECHO_REPLY and (rid, rseq) == (ident, seq):
                    return True
    return False


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def main() -> None:
    unavailable = sctp_unavailable()
    listen(sctp=not unavailable)
    conns: dict[str, socket.socket] = {}
    out = sys.stdout
    out.write(json.dumps({"ready": True, "sctp": unavailable}) + "\n")
    out.flush()
    with ThreadPoolExecutor(max_workers=128) as pool:
        for line in sys.stdin:
            request = json.loads(line)
            answer: dict[str, Any]
            op = request["op"]
            if op == "probe":
                timeout = float(request["timeout"])
                futures = [pool.submit(probe, p["dst"], p["protocol"], int(p["port"]), timeout) for p in request["probes"]]
                answer = {"results": [f.result() for f in futures]}
            elif op == "open":
                try:
                    conns[request["conn"]] = socket.create_connection((request["dst"], request["port"]), request["timeout"])
                    answer = {"ok": True, "error": ""}
                except OSError as exc:
                    answer = {"ok": False, "error": str(exc)}
            elif op == "echo":
                try:
                    sock = conns[request["conn"]]
                    sock.settimeout(request["timeout"])
                    sock.sendall(b"e")
                    answer = {"ok": sock.recv(16) == b"e", "error": ""}
                except OSError as exc:
                    answer = {"ok": False, "error": str(exc)}
            elif op == "who":
                futures = [pool.submit(who, request["dst"], request["protocol"], int(request["port"]),
                                       float(request["timeout"])) for _ in range(int(request["count"]))]
                answer = {"answers": [f.result() for f in futures]}
            elif op == "close":
                conn = conns.pop(request["conn"], None)
                if conn is not None:
                    conn.close()
                answer = {"ok": True}
            else:
                answer = {"error": f"unknown op {op!r}"}
            out.write(json.dumps(answer) + "\n")
            out.flush()
    os._exit(0)  # the servers' threads never end by themselves


if __name__ == "__main__":
    main()
