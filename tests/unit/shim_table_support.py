"""One table of inputs for the CNI shims (`bridge/agent/shim/shim.py` and its compiled fast path
`bridge/agent/shim/shim.c`): a runtime's stdin and environment, and what a fake agent on a unix
socket answers. Every shim must answer each row the same way (stdout byte for byte, exit code,
and the requests the agent received); each row also says what that answer is.

`run(exe, case, workdir)` runs one shim on one row: the fake agent listens on
`workdir/agent.sock` (`SOCK` in a row's stdin stands for it), the environment is passed
entry by entry as given (`launcher`: a row may hold an entry without `=`, or a name twice,
which no `env=` mapping can express).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

SOCK = b"@SOCK@"
OK_RESULT = b'{"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}]}\n'


def answer(status: bytes, body: bytes = b"", *headers: bytes) -> bytes:
    """An answer as the agent frames it (a status line, a Content-Length, Connection: close)."""
    extra = b"".join(h + b"\r\n" for h in headers)
    return (status + b"\r\nContent-Type: application/json\r\n" + extra
            + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)


def conf(**extra: object) -> bytes:
    return json.dumps({"cniVersion": "1.0.0", "name": "m", "type": "multinetwork", **extra,
                       "socketPath": SOCK.decode()}).encode()


ENV = (b"CNI_COMMAND=ADD", b"CNI_CONTAINERID=c1", b"CNI_NETNS=/var/run/netns/x", b"CNI_IFNAME=eth0",
       b"CNI_ARGS=K8S_POD_NAMESPACE=ns;K8S_POD_NAME=caf\xe9", b"CNI_PATH=/opt/cni/bin", b"PATH=/usr/bin",
       b"NOT_CNI=secret")
OK = answer(b"HTTP/1.1 200 OK", OK_RESULT)


@dataclass(frozen=True)
class Case:
    """One input to both shims, and what they must answer."""

    name: str
    answer: bytes | None = OK
    """What the fake agent sends back (it reads the whole request first); None: nobody listens."""
    code: int = 0
    """0: success (exit 0); else the CNI error code printed (exit 1)."""
    words: str = ""
    """Part of what is printed (an error's msg or details, JSON-escaped as printed)."""
    stdin: bytes = field(default_factory=conf)
    env: tuple[bytes, ...] = ENV
    reaches_agent: bool = True


def _env(*changes: bytes, drop: tuple[bytes, ...] = ()) -> tuple[bytes, ...]:
    names = {c.split(b"=", 1)[0] for c in changes} | set(drop)
    return tuple(e for e in ENV if e.split(b"=", 1)[0] not in names) + changes


def _error(code: int, msg: str) -> bytes:
    return json.dumps({"cniVersion": "1.0.0", "code": code, "msg": msg}).encode()


TABLE: tuple[Case, ...] = (
    Case("an ordinary ADD"),
    Case("a DEL answered with an empty body", answer(b"HTTP/1.1 200 OK"), env=_env(b"CNI_COMMAND=DEL")),
    Case("the agent's CNI error, padded with whitespace of every kind",
         answer(b"HTTP/1.1 400 Bad Request", b" \t\r\n" + _error(7, "bad conf") + b" \x0b\x0c\r\n"), 7, "bad conf"),
    Case("an error body that is not JSON", answer(b"HTTP/1.1 500 Oops", b"boom"), 102,
         "the agent answered HTTP 500"),
    Case("an error body that is not UTF-8", answer(b"HTTP/1.1 500 Oops", b"caf\xe9 \xff\xfe \xe2\x82 \xf0\x9f\x98\x80 "
                                                  b"\xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf \x00\x1f\x7f ok"), 102,
         "caf\\ufffd \\ufffd\\ufffd \\ufffd \\ud83d\\ude00"),
    Case("an error body cut inside a character at 200 bytes", answer(b"HTTP/1.1 503 Busy", b"x" * 199 + b"\xc3\xa9"),
         102, "x\\ufffd"),
    Case("an error without a body", answer(b"HTTP/1.1 502 Bad Gateway"), 102, "the agent answered HTTP 502"),
    Case("a 200 whose result is not UTF-8, printed as sent", answer(b"HTTP/1.1 200 OK", b'{"x": "\xff"}')),
    Case("status 2000 is not 200", answer(b"HTTP/1.1 2000 OK", OK_RESULT), 102, "the agent's answer is not HTTP"),
    Case("status 0200 is not 200", answer(b"HTTP/1.1 0200 OK", OK_RESULT), 102, "the agent's answer is not HTTP"),
    Case("a status line without a reason", b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\n{}"),
    Case("HTTP/1.0", answer(b"HTTP/1.0 404 Not Found", b"no"), 102, "the agent answered HTTP 404"),
    Case("HTTP/2", answer(b"HTTP/2 200 OK", OK_RESULT), 102, "the agent's answer is not HTTP"),
    Case("a tab instead of a space", answer(b"HTTP/1.1\t200 OK", OK_RESULT), 102, "the agent's answer is not HTTP"),
    Case("no head at all, with quotes and bytes that are not text", b"it's \"odd\"\xff\x00\t", 102,
         "b'it\\\\'s \\\"odd\\\"\\\\xff\\\\x00\\\\t'"),
    Case("quotes of one kind only", b"it's \xe9", 102, 'b\\"it\'s \\\\xe9\\"'),
    Case("the agent closes without answering", b"", 102, "b''"),
    Case("a chunked answer", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 102,
         "the agent's answer is not the agent's"),
    Case("a chunked answer, in capitals", b"HTTP/1.1 200 OK\r\nTRANSFER-ENCODING: CHUNKED\r\n\r\n0\r\n\r\n", 102,
         "not the agent's"),
    Case("a cniVersion that is not UTF-8", answer(b"HTTP/1.1 500 Oops", b"boom"),
         stdin=conf().replace(b'"1.0.0"', b'"1.0.\xff"'), code=102, words="the agent answered HTTP 500"),
    Case("a cniVersion with a control character", answer(b"HTTP/1.1 500 Oops"),
         stdin=conf().replace(b'"1.0.0"', b'"1.0.\x01"'), code=102, words="the agent answered HTTP 500"),
    Case("a cniVersion outside the BMP", answer(b"HTTP/1.1 500 Oops"),
         stdin=conf().replace(b'"1.0.0"', "\"1.0.\U0001f600\"".encode()), code=102, words="500"),
    Case("stdin of 3 MiB is forwarded whole", stdin=conf(pad="p" * (3 << 20))),
    Case("stdin over 8 MiB is refused", stdin=conf(pad="p" * (8 << 20)), code=103, words="request too large",
         reaches_agent=False),
    Case("an environment entry without '='", env=_env(b"CNI_BROKEN")),
    Case("a CNI name given twice: the first counts", env=(*_env(b"CNI_IFNAME=net1"), b"CNI_IFNAME=net2")),
    Case("a newline in a CNI value", env=_env(b"CNI_IFNAME=eth0\nCNI_NETNS=/evil"), code=4,
         words="invalid CNI_IFNAME", reaches_agent=False),
    Case("a newline in a CNI name", env=_env(b"CNI_X\nCNI_NETNS=/evil"), code=4, words="invalid CNI_X\\u000aCNI_NETNS",
         reaches_agent=False),
    Case("no CNI_COMMAND", env=_env(drop=(b"CNI_COMMAND",)), answer=answer(b"HTTP/1.1 400 Bad Request",
                                                                            _error(4, "CNI_COMMAND")), code=4),
    Case("VERSION", env=_env(b"CNI_COMMAND=VERSION"), reaches_agent=False),
    Case("no agent on the socket", None, code=102, words="the multinetwork agent is not reachable",
         reaches_agent=False),
    Case("a socketPath that cannot name a file", stdin=conf().replace(SOCK, b"\\ud800"), code=7,
         words="invalid socketPath", reaches_agent=False),
    Case("a socketPath nested deeper does not count", stdin=json.dumps(
        {"cniVersion": "1.0.0", "runtimeConfig": {"socketPath": "/elsewhere"}, "socketPath": SOCK.decode()}).encode()),
)


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: bytes
    requests: tuple[bytes, ...]

    def code(self) -> int:
        return 0 if self.returncode == 0 else int(json.loads(self.stdout)["code"])


class FakeAgent:
    """A unix-socket peer that reads each whole request, records it, and sends `answer`."""

    def __init__(self, path: Path, answer: bytes) -> None:
        self.path, self.answer = path, answer
        self.requests: list[bytes] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(8)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    received = conn.recv(65536)
                    if not received:
                        break
                    data += received
                head, _, body = data.partition(b"\r\n\r\n")
                found = re.search(rb"Content-Length: (\d+)", head)
                length = int(found.group(1)) if found else 0
                while len(body) < length:
                    received = conn.recv(1 << 20)
                    if not received:
                        break
                    body += received
                self.requests.append(body)
                with contextlib.suppress(OSError):
                    conn.sendall(self.answer)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the thread
        self._sock.close()
        self._thread.join(5)
        self.path.unlink(missing_ok=True)


LAUNCHER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
/* launcher ENVFILE PROGRAM: exec PROGRAM with the NUL-separated entries of ENVFILE as its environment. */
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    static char data[1 << 16];
    size_t n = fread(data, 1, sizeof data, f);
    char *envp[256];
    int k = 0;
    for (size_t i = 0; i < n && k < 255; i++) {
        envp[k++] = data + i;
        while (i < n && data[i]) i++;
    }
    envp[k] = NULL;
    execve(argv[2], argv + 2, envp);
    return 127;
}
"""


def build_launcher(directory: Path) -> Path:
    """The launcher, built with this machine's C compiler (the compiled shim needs one too)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise FileNotFoundError("no C compiler")
    source, exe = directory / "launcher.c", directory / "launcher"
    source.write_text(LAUNCHER_C)
    subprocess.run([compiler, "-O2", "-o", str(exe), str(source)], check=True, capture_output=True, timeout=120)
    return exe


def run(exe: Path, case: Case, workdir: Path, launcher: Path) -> Result:
    """`exe` (a shim) on `case`, against a fake agent in `workdir`."""
    sock = workdir / "agent.sock"
    envfile = workdir / "env"
    envfile.write_bytes(b"".join(e + b"\0" for e in case.env))
    agent = FakeAgent(sock, case.answer) if case.answer is not None else None
    try:
        done = subprocess.run([str(launcher), str(envfile), str(exe)], input=case.stdin.replace(SOCK, bytes(sock)),
                              capture_output=True, timeout=60)
    finally:
        if agent is not None:
            agent.close()
    requests = tuple(r.replace(bytes(sock), SOCK) for r in (agent.requests if agent else []))
    return Result(done.returncode, done.stdout.replace(bytes(sock), SOCK), requests)
