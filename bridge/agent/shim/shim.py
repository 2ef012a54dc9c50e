#!/usr/bin/python3 -IS
"""multinetwork: the CNI plugin the runtime executes; it forwards the request to the agent.

It runs on every ADD and DEL of every pod, so it starts as fast as Python can:
`-IS` (isolated, no site packages) and no import beyond the built-in `sys`, `posix`
and `_socket`: under `-S` even `os` is not loaded yet, and importing it (with
`_collections_abc`) costs ~2 ms per call, so the environment is read from
`posix.environ` (json, re, enum, http.client each cost more than the interpreter's
own start).
So the few JSON bits it needs are read and written by hand below.

The protocol with the agent (`bridge.agent.shim.protocol`, defined there once): one HTTP/1.1
request per call, the CNI_* variables then stdin; 200 with the result to print, anything else
with the CNI error JSON to print and exit 1. Any status line not by `status_of`'s rule is "not
HTTP", a Transfer-Encoding is not the agent's: both error 102.

The socket is `socketPath` from the network configuration, else DEFAULT_SOCKET.
VERSION is answered here, without the agent. Errors are CNI error JSON on stdout
with exit code 1 (CNI spec "Errors"), pure ASCII (what they quote is escaped).
The compiled shim (`shim.c`) answers every input as this file does, byte for byte.

`podnetwork cni-agent --install` copies this file into the CNI bin dir as `multinetwork`, its
first line naming the node's python3 and the protocol module's text in place of the import
below (`bridge.agent.node.install.install_shim`): one file, importing nothing of this project.
"""

import _socket
import posix
import sys

# --- the protocol: begin (the installed shim has bridge/agent/shim/protocol.py's text here)
from bridge.agent.shim.protocol import (
    AGENT_UNAVAILABLE,
    CONNECT_TIMEOUT_SECONDS,
    DECODING_FAILURE,
    DEFAULT_SOCKET,
    INVALID_CONFIG,
    INVALID_ENVIRONMENT,
    IO_FAILURE,
    LATEST_VERSION,
    MAX_STDIN_BYTES,
    REQUEST_TOO_LARGE,
    SUPPORTED_VERSIONS,
    TIMEOUT_SECONDS,
    framable,
    frame,
    request_head,
    status_of,
)

# --- the protocol: end


def json_string(text: str) -> str:
    """`text` as a JSON string of printable ASCII: whatever stdout's encoding, and lone
    surrogates (from a "\\ud800" escape) included, it prints."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif " " <= ch < "\x7f":
            out.append(ch)
        elif ord(ch) > 0xFFFF:
            code = ord(ch) - 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{ord(ch):04x}")
    out.append('"')
    return "".join(out)


def string_field(data: bytes, key: str) -> str | None:
    """The value of the top-level `"key": "value"` of a JSON object text, or None (not found,
    not a plain string, or escaped).

    Only keys of the outermost object count: nested objects may hold any key, e.g. the
    pod annotations containerd passes in `runtimeConfig`, which Go's sorted keys put
    before `socketPath`, so a pod could otherwise point the shim at another socket.
    """
    want = key.encode()
    n = len(data)
    depth = 0
    i = 0
    while i < n:
        c = data[i]
        if c == 0x22:  # a string: find its closing quote (one not escaped by a backslash)
            start = j = i + 1
            while True:
                j = data.find(b'"', j)
                if j < 0:
                    return None
                b = j - 1
                while b >= start and data[b] == 0x5C:
                    b -= 1
                if (j - 1 - b) % 2 == 0:
                    break
                j += 1
            if depth == 1 and data[start:j] == want:
                k = j + 1
                while k < n and data[k] in b" \t\r\n":
                    k += 1
                if k < n and data[k] == 0x3A:  # ':' -- it is a key, not a value
                    k += 1
                    while k < n and data[k] in b" \t\r\n":
                        k += 1
                    if k >= n or data[k] != 0x22:
                        return None
                    end = data.find(b'"', k + 1)
                    value = data[k + 1 : end] if end > 0 else b""
                    if end < 0 or b"\\" in value:
                        return None
                    return value.decode("utf-8", "replace")
            i = j + 1
            continue
        if c == 0x7B or c == 0x5B:  # { [
            depth += 1
        elif c == 0x7D or c == 0x5D:  # } ]
            depth -= 1
        i += 1
    return None


def fail(version: str, code: int, msg: str, details: str = "") -> int:
    text = f'{{"cniVersion": {json_string(version)}, "code": {code}, "msg": {json_string(msg)}'
    if details:
        text += f', "details": {json_string(details)}'
    sys.stdout.write(text + "}\n")
    return 1


def socket_address(path: str) -> bytes | None:
    """The socket path as the kernel takes it; None when no file can have that name (a lone
    surrogate, which has no UTF-8 form, or a NUL)."""
    try:
        raw = path.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return None if b"\0" in raw else raw


class NotAccepted(OSError):
    """The agent did not accept the connection within CONNECT_TIMEOUT_SECONDS."""


def _timeval(seconds: int) -> bytes:
    """A struct timeval (two C longs: this interpreter's pointer size on Linux), without `struct`."""
    size = 8 if sys.maxsize > 2**32 else 4
    return seconds.to_bytes(size, sys.byteorder) + bytes(size)


def exchange(path: str | bytes, request: bytes, timeout: float) -> bytes:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        # A unix-socket connect() waits while the agent's listen queue is full (a stuck agent) for
        # as long as SO_SNDTIMEO allows, for ever without it; settimeout() would not wait at all (its
        # non-blocking connect fails with EAGAIN at once), failing a healthy agent's burst.
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_SNDTIMEO, _timeval(CONNECT_TIMEOUT_SECONDS))
        try:
            sock.connect(path)
        except BlockingIOError:
            raise NotAccepted(
                f"the agent did not accept the connection within {CONNECT_TIMEOUT_SECONDS} s (its queue of "
                "connections is full: it is stuck or overloaded)"
            ) from None
        sock.settimeout(timeout)
        sock.sendall(request)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        sock.close()


class Done(Exception):
    """The call is answered (printed, or nothing to print): the shim exits with `status`."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def variables(environ: dict[bytes, bytes], version: str) -> list[tuple[bytes, bytes]]:
    """The CNI_* variables to send, as the runtime passed them; `Done` when one cannot be framed."""
    found = []
    deleting = environ.get(b"CNI_COMMAND") == b"DEL"
    for name, value in environ.items():
        if name.startswith(b"CNI_"):
            if not framable(name, value):
                if deleting and name == b"CNI_CONTAINERID":
                    # ADD refuses such an ID (below), so nothing was ever attached under it; a DEL
                    # refused would keep the pod forever (CRI: tear-down must succeed).
                    raise Done(0)
                if deleting:
                    continue  # DEL needs only the container ID; the agent has the rest on record
                shown = name.decode("utf-8", "replace")
                raise Done(fail(version, INVALID_ENVIRONMENT, f"invalid {shown}", "contains a newline"))
            found.append((name, value))
    return found


def socket_of(stdin: bytes, version: str) -> tuple[str, bytes]:
    """(path, address) of the agent's socket: the configuration's `socketPath`, else the default."""
    path = string_field(stdin, "socketPath")
    if path is None:
        # The slow path, for configurations without a plain socketPath: parse them for real.
        import json

        try:
            conf = json.loads(stdin)
        except (ValueError, RecursionError) as exc:
            raise Done(fail(version, DECODING_FAILURE, "network configuration is not valid JSON",
                            str(exc)[:200])) from None
        socket_path = conf.get("socketPath") if isinstance(conf, dict) else None
        path = socket_path if isinstance(socket_path, str) else DEFAULT_SOCKET
    address = socket_address(path)
    if address is None:
        raise Done(fail(
            version,
            INVALID_CONFIG,
            "invalid socketPath in the network configuration",
            f"{path[:200]!r} cannot be a file path; it must name the agent's unix socket",
        ))
    return path, address


def answer(response: bytes, version: str) -> int:
    """Prints the agent's answer, or the error it is; the exit status."""
    header, sep, payload = response.partition(b"\r\n\r\n")
    status = status_of(header.split(b"\r\n", 1)[0]) if sep else None
    if status is None:
        return fail(version, AGENT_UNAVAILABLE, "the agent's answer is not HTTP", repr(response[:200]))
    if b"\r\ntransfer-encoding:" in header.lower():
        return fail(
            version,
            AGENT_UNAVAILABLE,
            "the agent's answer is not the agent's",
            "it has a Transfer-Encoding, and the multinetwork agent sends a Content-Length: is another "
            "server listening on its socket?",
        )
    if status == 200:
        sys.stdout.buffer.write(payload)
        return 0
    if payload.strip().startswith(b"{"):
        sys.stdout.buffer.write(payload.rstrip() + b"\n")
        return 1
    return fail(
        version,
        AGENT_UNAVAILABLE,
        f"the agent answered HTTP {status}",
        payload[:200].decode("utf-8", "replace"),
    )


def main() -> int:
    stdin = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    version = string_field(stdin, "cniVersion") or LATEST_VERSION
    if len(stdin) > MAX_STDIN_BYTES:
        return fail(
            version, REQUEST_TOO_LARGE, "request too large", f"more than {MAX_STDIN_BYTES} bytes on stdin"
        )
    environ = posix.environ  # bytes -> bytes, exactly what the runtime passed
    if environ.get(b"CNI_COMMAND") == b"VERSION":
        versions = ", ".join(json_string(v) for v in SUPPORTED_VERSIONS)
        sys.stdout.write(f'{{"cniVersion": {json_string(version)}, "supportedVersions": [{versions}]}}')
        return 0
    try:
        body = frame(variables(environ, version), stdin)
        path, address = socket_of(stdin, version)
    except Done as done:
        return done.status
    try:
        response = exchange(address, request_head(len(body)) + body, TIMEOUT_SECONDS)
    except NotAccepted as exc:
        return fail(version, AGENT_UNAVAILABLE, "the multinetwork agent is not reachable", f"{path}: {exc}")
    except OSError as exc:
        return fail(
            version,
            AGENT_UNAVAILABLE,
            "the multinetwork agent is not reachable",
            f"{path}: {exc}; is `podnetwork cni-agent` running on this node?",
        )
    return answer(response, version)


if __name__ == "__main__":
    try:
        status = main()
    except Exception as exc:
        # The runtime reads a CNI error from stdout; a traceback would tell it nothing.
        status = fail(LATEST_VERSION, IO_FAILURE, "internal shim error", repr(exc)[:500])
    # Once stdout is flushed the shim holds nothing that needs cleaning up, so it skips the
    # interpreter's finalization (module teardown, a GC pass): ~1.5 ms of every CNI call.
    sys.stdout.flush()
    sys.stderr.flush()
    posix._exit(status)
