"""A TCP server and client for the demo's policy and Services stages, standard library only.

`ip netns exec POD python -m demo.tcpprobe serve ADDRESS PORT` listens in the pod's
namespace, prints `listening` once it does, and answers each connection with `ok` until
killed; with `--name NAME` it answers `NAME from PEER` instead, PEER the address the
connection came from (a Service's backend says who it is and whom it saw).
`... connect ADDRESS PORT` exits 0 when it connected and read `ok` within `--timeout`
seconds, 1 when not (refused, dropped, timed out), 2 on bad arguments. With `--count N` it
opens N connections one after the other (each a new connection, so a ClusterIP picks an
endpoint for each), prints each one's answer (any one line), or `- ` and what happened, on a
line of its own, and exits 0 when every one was answered.
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys

ANSWER = b"ok\n"
#: The longest answer a named server sends (a name, " from ", an address).
MAX_ANSWER = 256


def answer(name: str | None, peer: str) -> bytes:
    """What the server sends to a connection from `peer`."""
    return ANSWER if name is None else f"{name} from {peer}\n".encode()


def serve(address: str, port: int, name: str | None = None) -> None:
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((address, port))
        server.listen(8)
        print("listening", flush=True)
        while True:
            conn, peer = server.accept()
            with conn:
                conn.sendall(answer(name, str(peer[0])))


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n") and len(data) < MAX_ANSWER:
        chunk = conn.recv(MAX_ANSWER - len(data))
        if not chunk:
            break
        data += chunk
    return data


def exchange(address: str, port: int, timeout: float) -> tuple[bytes | None, str | None]:
    """(the answer, None) when the server answered, else (None, what happened)."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as conn:
            data = _read_line(conn)
    except TimeoutError:
        return None, f"no answer in {timeout:g}s"
    except OSError as exc:
        return None, exc.strerror or str(exc)
    return data, None


def connect(address: str, port: int, timeout: float) -> str | None:
    """None when the server answered `ok`, else what happened."""
    data, problem = exchange(address, port, timeout)
    if problem is not None:
        return problem
    return None if data == ANSWER else f"unexpected answer {data!r}"


def connect_many(address: str, port: int, timeout: float, count: int) -> list[tuple[str | None, str]]:
    """Each of `count` new connections: (its answer, one line without its newline, or None when
    it had none; what happened then)."""
    outcomes: list[tuple[str | None, str]] = []
    for _ in range(count):
        data, problem = exchange(address, port, timeout)
        text = None if data is None else data.decode(errors="replace").strip()
        outcomes.append((text or None, problem or "an empty answer"))
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.tcpprobe", description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("serve", "connect"))
    parser.add_argument("address")
    parser.add_argument("port", type=int)
    parser.add_argument("--timeout", type=float, default=1.0, help="seconds to connect and read (connect)")
    parser.add_argument("--name", help="answer 'NAME from PEER' instead of 'ok' (serve)")
    parser.add_argument("--count", type=int, help="open this many connections, print each answer (connect)")
    args = parser.parse_args(argv)
    try:
        ipaddress.ip_address(args.address)
    except ValueError as exc:
        print(f"tcpprobe: {exc}", file=sys.stderr)
        return 2
    if args.count is not None and args.count < 1:
        print(f"tcpprobe: --count must be at least 1, not {args.count}", file=sys.stderr)
        return 2
    if args.mode == "serve":
        serve(args.address, args.port, args.name)
        return 0
    if args.count is not None:
        outcomes = connect_many(args.address, args.port, args.timeout, args.count)
        for text, why in outcomes:
            print(text if text is not None else f"- {why}", flush=True)
        return 0 if all(text is not None for text, _ in outcomes) else 1
    problem = connect(args.address, args.port, args.timeout)
    print(f"{args.address}:{args.port}: {problem or 'connected'}")
    return 0 if problem is None else 1


if __name__ == "__main__":
    sys.exit(main())
