"""Applies `plan.RouteOp`s (moving a pod's default routes) over rtnetlink inside the pod's netns.

The namespace is entered once per `apply`, to open one netlink socket: a socket
stays in the namespace it was created in, so every request after that runs on the
agent's event loop (pyroute2's asyncio API) without entering anything again.
setns(2) moves only the calling thread, so the socket is opened by a short-lived
thread of its own: a pooled thread would carry the pod's namespace into unrelated
work, and the event loop's thread must never leave the agent's namespace.

No child process is involved (the agent used to run `nsenter --net=… ip route …`),
so an agent killed during a route change leaves nothing running that could finish
the change later (compare `bridge.agent.orphans`).

The effect is that of the `ip` commands `RouteOp.argv` names, and failures read
the same: CNI error 5 "<ip command> failed in <netns>" with `ip`'s own wording in
the details ("Error: Nexthop has invalid gateway.", `Cannot find device "net1"`),
and CNI error 100 when the whole change outlasts the timeout.
pyroute2 is imported on first use, off the event loop (docs/benchmarks.md: ~6.6 MB
of RSS and ~55 ms), so an agent whose pods never move a default route never pays it.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import importlib
import os
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from bridge.agent.invoke import CNIError, ErrorCode
from bridge.agent.plan import RouteAction, RouteOp

CLONE_NEWNET = 0x40000000
NETLINK_ROUTE = 0
RT_TABLE_MAIN = 254
#: The protocol `ip route add` gives a route; tools and the tests see it as "proto boot".
RTPROT_BOOT = 3
RT_SCOPE_UNIVERSE = 0
RTN_UNICAST = 1
RTM_F_CLONED = 0x200
RTM_DELROUTE = 25
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
#: `ip route flush` dumps and deletes until a dump finds nothing; a namespace whose
#: default routes reappear this many times in a row is being changed by someone else.
MAX_FLUSH_ROUNDS = 10

_FAMILIES = {4: socket.AF_INET, 6: socket.AF_INET6}


async def apply(netns: str, ops: Sequence[RouteOp], timeout: float) -> None:
    """Applies `ops` in order inside the network namespace at path `netns`; stops at the first failure.

    Raises CNIError 5 naming the failing step, or 100 when all of it takes longer than `timeout` seconds.
    """
    if not ops:
        return
    progress = [ops[0]]  # the step under way, for the timeout's message
    try:
        await asyncio.wait_for(_apply(netns, ops, progress), timeout)
    except TimeoutError:
        raise CNIError(
            ErrorCode.PLUGIN_TIMEOUT, f"{' '.join(progress[0].argv())} timed out in {netns}"
        ) from None


async def _apply(netns: str, ops: Sequence[RouteOp], progress: list[RouteOp]) -> None:
    try:
        # The first import takes ~55 ms: in the opening thread rather than on the event loop.
        sock = await socket_in(netns, prepare=pyroute2_module)
    except OSError as exc:
        raise _failed(ops[0], netns, f"cannot enter network namespace {netns}: {exc.strerror}") from None
    except ImportError as exc:
        raise _failed(
            ops[0],
            netns,
            f"the agent needs pyroute2 to move default routes ({exc}); install podnetwork's "
            "dependencies, e.g. pip install 'pyroute2-minimal>=0.9.7,<0.10'",
        ) from None
    pyroute2 = pyroute2_module()
    # pyroute2 owns the descriptor from here on (it dups it on first use and closes it in close()).
    ipr = pyroute2.AsyncIPRoute(fileno=sock.detach(), ext_ack=True)
    indexes: dict[str, int] = {}  # each interface looked up once, however many gateways and families
    try:
        for op in ops:
            progress[0] = op
            try:
                if op.action is RouteAction.FLUSH_DEFAULT:
                    await _flush_default(ipr, op, netns)
                else:
                    await _add_default(ipr, op, netns, indexes)
            except pyroute2.NetlinkError as exc:
                raise _failed(op, netns, _ip_wording(exc)) from None
    finally:
        ipr.close()


async def _flush_default(ipr: Any, op: RouteOp, netns: str) -> None:
    """`ip -N route flush exact <default>`: every default route of the family in the main table."""
    family = _FAMILIES[op.family]
    for _ in range(MAX_FLUSH_ROUNDS):
        doomed = [r async for r in await ipr.route("dump", family=family) if _is_default(r, family)]
        if not doomed:
            return
        for route in doomed:
            # The route as dumped, sent back as a deletion: it matches exactly that route (what `ip` does).
            try:
                async for _reply in await ipr.nlm_request(
                    route, msg_type=RTM_DELROUTE, msg_flags=NLM_F_REQUEST | NLM_F_ACK
                ):
                    pass
            except pyroute2_module().NetlinkError as exc:
                if exc.code != errno.ESRCH:  # gone since the dump: what the flush wanted
                    raise
    raise _failed(
        op,
        netns,
        f"default routes kept reappearing after {MAX_FLUSH_ROUNDS} rounds of deleting them; "
        "something else in the pod's namespace is adding them",
    )


def _is_default(route: Any, family: int) -> bool:
    table = route.get_attr("RTA_TABLE") or route["table"]
    return bool(
        route["family"] == family
        and route["dst_len"] == 0
        and table == RT_TABLE_MAIN
        and not route["flags"] & RTM_F_CLONED
    )


async def _add_default(ipr: Any, op: RouteOp, netns: str, indexes: dict[str, int]) -> None:
    """`ip -N route add default via GW dev IF [metric M]`."""
    assert op.ifname is not None
    if op.ifname not in indexes:
        try:
            links = await ipr.link("get", ifname=op.ifname)
        except pyroute2_module().NetlinkError as exc:
            if exc.code != errno.ENODEV:
                raise
            raise _failed(op, netns, f'Cannot find device "{op.ifname}"') from None
        indexes[op.ifname] = int(links[0]["index"])
    spec: dict[str, Any] = {
        "family": _FAMILIES[op.family],
        "dst_len": 0,
        "gateway": op.gateway,
        "oif": indexes[op.ifname],
        "table": RT_TABLE_MAIN,
        "proto": RTPROT_BOOT,
        "scope": RT_SCOPE_UNIVERSE,
        "type": RTN_UNICAST,
    }
    if op.metric is not None:
        spec["priority"] = op.metric
    await ipr.route("add", **spec)


def _failed(op: RouteOp, netns: str, details: str) -> CNIError:
    return CNIError(ErrorCode.IO_FAILURE, f"{' '.join(op.argv())} failed in {netns}", details)


def _ip_wording(exc: Any) -> str:
    """A kernel refusal as `ip` prints it: the extended ack's text if any, else the errno's."""
    code = int(exc.code)
    text = str(exc.args[1]) if len(exc.args) > 1 else ""
    if text and text != os.strerror(code):
        return f"Error: {text}."
    return f"RTNETLINK answers: {os.strerror(code)}"


def pyroute2_module() -> Any:
    """The pyroute2 package (imported on the first route change; untyped, hence Any)."""
    return importlib.import_module("pyroute2")


async def socket_in(netns: str, prepare: Callable[[], object] | None = None) -> socket.socket:
    """A netlink socket in the namespace at path `netns`, opened by a thread of its own (which
    first runs `prepare`, if given: slow work kept off the event loop)."""
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[socket.socket] = loop.create_future()

    def deliver(result: socket.socket | BaseException) -> None:
        if opened.cancelled():  # `apply` timed out meanwhile: nobody will close it otherwise
            if isinstance(result, socket.socket):
                result.close()
        elif isinstance(result, BaseException):
            opened.set_exception(result)
        else:
            opened.set_result(result)

    def run() -> None:
        result: socket.socket | BaseException
        try:
            if prepare is not None:
                prepare()
            result = open_in(netns)
        except BaseException as exc:
            result = exc
        try:
            loop.call_soon_threadsafe(deliver, result)
        except RuntimeError:  # the loop is closed: the agent is gone
            if isinstance(result, socket.socket):
                result.close()

    # The thread ends inside the pod's namespace; it never runs anything else.
    threading.Thread(target=run, name=f"netns {netns}", daemon=True).start()
    return await opened


def open_in(netns: str) -> socket.socket:
    """An rtnetlink socket in the namespace at path `netns`; the calling thread stays in it."""
    fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(fd)
    finally:
        os.close(fd)
    return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_ROUTE)


def setns(fd: int) -> None:
    if sys.version_info >= (3, 12):
        os.setns(fd, os.CLONE_NEWNET)
        return
    result = _libc().setns(fd, CLONE_NEWNET)
    if result != 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


@functools.cache
def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)
