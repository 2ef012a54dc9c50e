"""The shim <-> agent protocol, defined once: what the shims send and read, what the agent's
server reads and answers, and the numbers the compiled shim is built with.

One HTTP/1.1 request per CNI call, on the agent's unix socket (the network configuration's
`socketPath`, else `DEFAULT_SOCKET`)::

    POST /v1/cni HTTP/1.1
    Host: multinetwork-agent
    Content-Type: application/x-cni-request
    Content-Length: <the body's length>
    Connection: close

    CNI_COMMAND=ADD\\n        one line per CNI_* variable, byte for byte as the runtime passed it
    CNI_CONTAINERID=...\\n
    \\n                       an empty line
    <stdin>                  the runtime's network configuration, verbatim

No JSON encoder is needed to send it (the shim has none, `bridge.agent.shim.shim`). The answer
carries a Content-Length and `Connection: close`, never a Transfer-Encoding: 200 with the CNI
result to print (empty when the command has none); any other status with the CNI error JSON
`{"cniVersion", "code", "msg", "details"}`: 400 for a code of the CNI spec (below 100), 500
for one of this project (`answer_status`), and the transport's own (404, 405, 408, 411, 413,
503) for a request the server does not take. `GET /v1/ready` answers 200 or 503 with
`{"ready": ..., "problem": ...}` (the DaemonSet's probe, `bridge.agent.shim.probe`).

Who uses it: `shim.py` (the installed shim carries the text of the shim's side inlined, up to
"the agent's side" below: `bridge.agent.node.install.install_shim`), `server.py`, `probe.py`,
`invoke.py` (its error codes and versions), and `shim.c`, compiled with these constants as `-D`
flags (`bridge.agent.shim.shimbuild.compile_flags`) and run against one table with the Python shim
(tests/unit/agent/test_compiled_shim.py). So this module imports nothing, not even from the
standard library: the shim runs under `python3 -IS` on every CNI call and every import is
start time; and what the shim does not need is kept apart, since a script's every line is
compiled again on every call (docs/benchmarks.md).
"""

#: The agent's socket when the configuration names none.
DEFAULT_SOCKET = "/run/multinetwork/agent.sock"
#: The request path of a CNI call, and of the readiness question.
API_PATH = "/v1/cni"
READY_PATH = "/v1/ready"
#: The Host and Content-Type of a CNI call (HTTP/1.1 needs a Host; the socket names the agent).
HOST = "multinetwork-agent"
CONTENT_TYPE = "application/x-cni-request"

#: Versions of the CNI specification this project speaks, oldest first; the shim answers
#: VERSION with them, without the agent.
SUPPORTED_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
#: The version an answer is in when the caller names none.
LATEST_VERSION = "1.1.0"

# Limits.
#: stdin larger than this is refused by the shim before it contacts the agent (error 103; the
#: agent's own limit, `--max-request-bytes`, is lower).
MAX_STDIN_BYTES = 8 * 1024 * 1024
#: Seconds an accepted connection has for the agent's answer (an ADD of many networks).
TIMEOUT_SECONDS = 300
#: Seconds a connection may wait for the agent to accept it (its listen queue full: stuck or
#: overloaded) before the call fails with AGENT_UNAVAILABLE.
CONNECT_TIMEOUT_SECONDS = 10

# CNI error codes either end answers with: 1-99 are the CNI spec's well-known codes, 100+ this
# project's (`bridge.agent.delegates.invoke.ErrorCode` names every code the agent uses).
INCOMPATIBLE_VERSION = 1
INVALID_ENVIRONMENT = 4
IO_FAILURE = 5
DECODING_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
#: The shim could not reach the agent (not running, socket missing), or what answered is not it.
AGENT_UNAVAILABLE = 102
#: The request is larger than the shim or the agent accepts.
REQUEST_TOO_LARGE = 103


def request_head(length: int) -> bytes:
    """The request line and headers of a CNI call whose body has `length` bytes."""
    return (
        f"POST {API_PATH} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: {CONTENT_TYPE}\r\n"
        f"Content-Length: {length}\r\nConnection: close\r\n\r\n"
    ).encode()


def framable(name: bytes, value: bytes) -> bool:
    """Whether a variable can travel as one line of the body: no newline in its name or value."""
    return b"\n" not in name and b"\n" not in value


def frame(variables: list[tuple[bytes, bytes]], stdin: bytes) -> bytes:
    """The body of a CNI call: `NAME=value` lines (each `framable`), an empty line, stdin."""
    return b"".join(name + b"=" + value + b"\n" for name, value in variables) + b"\n" + stdin


def status_of(line: bytes) -> int | None:
    """The status of an answer's status line, `HTTP/1.<digit> <three digits>` then a space or the
    end; None for anything else (`HTTP/1.1 2000` is not 200): what the shims take from the agent."""
    if (len(line) < 12 or line[:7] != b"HTTP/1." or not line[7:8].isdigit() or line[8:9] != b" "
            or not line[9:12].isdigit() or line[12:13] not in (b"", b" ")):
        return None
    return int(line[9:12])


# --- the agent's side: what the shim does not need, so the installed shim does not carry it (its
# every line is compiled on every CNI call: a script has no cached bytecode).

#: The request line and headers may take this much (the shim sends ~150 bytes).
MAX_HEAD_BYTES = 64 * 1024
#: Room for the environment lines in a body, beyond the agent's limit on the configuration.
ENVIRONMENT_BYTES = 64 * 1024

#: The status lines' reasons the agent sends.
REASONS = {
    200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
    411: "Length Required", 413: "Payload Too Large", 500: "Internal Server Error",
    503: "Service Unavailable",
}


class Malformed(ValueError):
    """A body not framed as `frame` frames it; the message says what is wrong."""


def unframe(body: bytes) -> tuple[dict[str, str], bytes]:
    """A body -> (the CNI variables, stdin), as `frame` made it; `Malformed` otherwise.

    Values are decoded as UTF-8 with surrogateescape, so every byte the runtime passed goes
    back out unchanged (`os.fsencode`)."""
    if body.startswith(b"\n"):
        return {}, body[1:]  # no variable: all that follows the empty line is stdin
    # No line is empty (a name is never empty, a value holds no newline): the first empty line
    # ends them, whatever stdin holds.
    head, sep, stdin = body.partition(b"\n\n")
    if not sep:
        raise Malformed("expected CNI_*=value lines, an empty line, then the network configuration")
    env: dict[str, str] = {}
    for line in head.decode("utf-8", "surrogateescape").split("\n"):
        name, eq, value = line.partition("=")
        if not eq or not name.startswith("CNI_"):
            raise Malformed(f"bad line {line[:80]!r}")
        env[name] = value
    return env, stdin


def answer_status(code: int) -> int:
    """The HTTP status of an answer carrying CNI error `code`."""
    return 400 if code < 100 else 500
