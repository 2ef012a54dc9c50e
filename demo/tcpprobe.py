"""A TCP server and client for the demo's policy stage, standard library only.

`ip netns exec POD python -m demo.tcpprobe serve ADDRESS PORT` listens in the pod's
namespace, prints `listening` once it does, and answers each connection with `ok` until
killed. `... connect ADDRESS PORT` exits 0 when it connected and read `ok` within
`--timeout` seconds, 1 when not (refused, dropped, timed out), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys

ANSWER = b"ok\n"


def serve(address: str, port: int) -> None:
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((address, port))
        server.listen(8)
        print("listening", flush=True)
        while True:
            conn, _ = server.accept()
            with conn:
                conn.sendall(ANSWER)


def connect(address: str, port: int, timeout: float) -> str | None:
    """None when the server answered, else what happened."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as conn:
            data = conn.recv(len(ANSWER))
    except TimeoutError:
        return f"no answer in {timeout:g}s"
    except OSError as exc:
        return exc.strerror or str(exc)
    return None if data == ANSWER else f"unexpected answer {data!r}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.tcpprobe", description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("serve", "connect"))
    parser.add_argument("address")
    parser.add_argument("port", type=int)
    parser.add_argument("--timeout", type=float, default=1.0, help="seconds to connect and read (connect)")
    args = parser.parse_args(argv)
    try:
        ipaddress.ip_address(args.address)
    except ValueError as exc:
        print(f"tcpprobe: {exc}", file=sys.stderr)
        return 2
    if args.mode == "serve":
        serve(args.address, args.port)
        return 0
    problem = connect(args.address, args.port, args.timeout)
    print(f"{args.address}:{args.port}: {problem or 'connected'}")
    return 0 if problem is None else 1


if __name__ == "__main__":
    sys.exit(main())
