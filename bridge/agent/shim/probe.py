"""The CNI agent's readiness probe: `python3 -I -m bridge.agent.shim.probe [--socket PATH]`.

Asks the agent over its unix socket (GET /v1/ready, `bridge.agent.daemon.server`) whether it can
attach pods now; prints the answer and exits 0 when it can, 1 when it cannot or does not
answer. The kubelet runs it as the DaemonSet's exec probe and shows what it printed in the
probe's failure Event. The agent shares the node's network (hostNetwork), so an HTTP probe
would need a port on every node; the socket is already there.

Cheap on purpose, as it runs every few seconds on every node: the standard library's socket
and json only (~10 MB and ~30 ms of a fresh interpreter); of the agent, only its protocol
(`bridge.agent.shim.protocol`, which imports nothing).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys

from bridge.agent.shim import protocol

DEFAULT_SOCKET = protocol.DEFAULT_SOCKET
TIMEOUT_SECONDS = 5.0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m bridge.agent.shim.probe",
        description="Exit 0 when the CNI agent can attach pods now, else 1, saying why.")
    p.add_argument("--socket", default=DEFAULT_SOCKET, help="the agent's socket (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=TIMEOUT_SECONDS, metavar="SECONDS",
                   help="how long to wait for the answer (default: %(default)s)")
    return p


def ask(path: str, timeout: float) -> tuple[bool, str]:
    """(ready, what to print) from the agent at `path`."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(f"GET {protocol.READY_PATH} HTTP/1.1\r\nHost: {protocol.HOST}\r\n"
                         "Connection: close\r\n\r\n".encode())
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except OSError as exc:
        return False, f"the CNI agent does not answer on {path}: {exc}"
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    try:
        answer = json.loads(body)
        ready = bool(answer["ready"])
        problem = answer.get("problem")
    except (ValueError, KeyError, TypeError):
        status = head.split(b"\r\n", 1)[0].decode("latin-1")
        return False, f"the CNI agent on {path} answered {status!r}, not its readiness"
    return (True, "ready") if ready else (False, f"not ready: {problem}")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    ready, said = ask(args.socket, args.timeout)
    print(said)
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main())
