#!/usr/bin/python3 -I -S
"""multinetwork: the CNI plugin the runtime executes; it forwards the request to the agent.

Standard library only, and started with `-I -S` (isolated, no site packages) so
it starts fast and cannot be changed by the environment. It reads the CNI
environment and the network configuration on stdin, sends both to the agent
over its unix socket (`socketPath` in the configuration, else the default), and
prints the agent's result. Errors are CNI error JSON on stdout with exit code 1
(CNI spec "Errors"). VERSION is answered here, without the agent.

`podnetwork cni-agent --install` copies this file into the CNI bin dir as
`multinetwork`, with the first line naming the node's python3.
"""

import http.client
import json
import os
import socket
import sys

DEFAULT_SOCKET = "/run/multinetwork/agent.sock"
SUPPORTED_VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
#: stdin larger than this is refused before contacting the agent (the agent's own limit is lower).
MAX_STDIN_BYTES = 8 * 1024 * 1024
DEFAULT_TIMEOUT = 300.0
AGENT_UNAVAILABLE = 102
REQUEST_TOO_LARGE = 103


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _fail(version, code, msg, details=""):
    error = {"cniVersion": version, "code": code, "msg": msg}
    if details:
        error["details"] = details
    sys.stdout.write(json.dumps(error))
    sys.stdout.write("\n")
    return 1


def main():
    stdin = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    version = "1.1.0"
    conf = None
    if stdin.strip():
        try:
            conf = json.loads(stdin)
        except ValueError as exc:
            return _fail(version, 6, "network configuration is not valid JSON", str(exc)[:200])
    if isinstance(conf, dict) and isinstance(conf.get("cniVersion"), str):
        version = conf["cniVersion"]
    if len(stdin) > MAX_STDIN_BYTES:
        return _fail(
            version, REQUEST_TOO_LARGE, "request too large", f"more than {MAX_STDIN_BYTES} bytes on stdin"
        )
    command = os.environ.get("CNI_COMMAND", "")
    if command == "VERSION":
        sys.stdout.write(json.dumps({"cniVersion": version, "supportedVersions": SUPPORTED_VERSIONS}))
        return 0
    socket_path = DEFAULT_SOCKET
    timeout = DEFAULT_TIMEOUT
    if isinstance(conf, dict):
        if isinstance(conf.get("socketPath"), str):
            socket_path = conf["socketPath"]
        if isinstance(conf.get("timeoutSeconds"), (int, float)) and conf["timeoutSeconds"] > 0:
            timeout = float(conf["timeoutSeconds"])
    env = {k: v for k, v in os.environ.items() if k.startswith("CNI_")}
    body = json.dumps({"env": env, "stdin": stdin.decode("utf-8", "replace")})
    conn = _UnixConnection(socket_path, timeout)
    try:
        conn.request("POST", "/v1/cni", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        payload = response.read()
    except (OSError, http.client.HTTPException) as exc:
        return _fail(
            version,
            AGENT_UNAVAILABLE,
            "the multinetwork agent is not reachable",
            f"{socket_path}: {exc}; is `podnetwork cni-agent` running on this node?",
        )
    finally:
        conn.close()
    try:
        answer = json.loads(payload)
    except ValueError:
        return _fail(
            version,
            AGENT_UNAVAILABLE,
            "the agent answered something that is not JSON",
            payload[:200].decode("utf-8", "replace"),
        )
    if not isinstance(answer, dict):
        return _fail(version, AGENT_UNAVAILABLE, "the agent answered something that is not a JSON object")
    if answer.get("error") is not None:
        sys.stdout.write(json.dumps(answer["error"]))
        sys.stdout.write("\n")
        return 1
    result = answer.get("result")
    if result is not None:
        sys.stdout.write(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
