"""A loopback TCP port for a process the test starts, which no other test gets meanwhile.

`make test` runs the suite on several workers at once (tests/README.md, "How the suite runs").
A port that the kernel chose for a socket that was then closed (`bind(("127.0.0.1", 0))`) is
free again at once: until the test's process binds it, another worker's `bind(0)` may get the
same number, and one of the two then fails with "address in use", or talks to the other's
server. `free_port` leaves the port in TIME_WAIT instead (a connection to it, closed from its
side): for the next 60 s the kernel's `bind(0)` skips it, while a server that binds it by
number with SO_REUSEADDR, as ours do (`podnetwork.kube.webhooks.listen`, uvicorn, aiohttp),
gets it at once. With nothing listening, a connection to it is refused, so it also serves as
"a port nobody listens on".
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nothing listens on, kept from the kernel's other choices for 60 s."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = int(server.getsockname()[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            # Closed here first: the TIME_WAIT is this side's, on `port` (the client's side,
            # closed second, leaves none).
            accepted.close()
            client.recv(1)  # the FIN arrived
    return port
