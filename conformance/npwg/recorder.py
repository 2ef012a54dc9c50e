"""The recording plugin: what every delegate of the plugin under test really is.

This file is copied into the harness's bin dir once per plugin type name the
scenarios use (`npwg-rec-a`, `npwg-rec-default`, ...), with the harness's Python
as its interpreter. It imports only the standard library and reads its settings
from `npwg-recorder.json` beside itself, because a delegating plugin passes its
delegates only the CNI variables (the CNI spec's execution protocol), so nothing
else can reach it through the environment.

For each execution it appends one JSON line to the records file (its type name,
its whole environment, its stdin), then answers as the scenario chose in the
control file: a CNI error for a matching rule, else (ADD) the scenario's result
for this network, else the `prevResult` it was given (a chained plugin passes it
on), else a result of its own for `CNI_IFNAME` in `CNI_NETNS`. DEL and CHECK
answer nothing, VERSION every version the harness speaks.

For the pods the scenario names in the control file's `links`, it behaves like a
real plugin: an ADD it answers with success leaves an interface named
`CNI_IFNAME` in the pod's namespace (a dummy link, or a bridge where the kernel
has no dummy driver), and DEL removes it. A delegating plugin may enforce NPWG
4.1.2.1.5 (an interface name already used by a previous attachment fails the
next) by looking in the pod's namespace, as Multus does (`validateIfName`); a
delegate that reports an interface it never made would hide the earlier one.
Only there: a link without the result's addresses would mislead a plugin that
reports the live addresses of its pods (this project's agent watches them).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SETTINGS_FILE = "npwg-recorder.json"
VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")


def _matches(rule: dict[str, Any], facts: dict[str, str]) -> bool:
    return all(rule.get(key) in (None, value) for key, value in facts.items())


def _own_result(version: str, ifname: str, netns: str, network: str, container: str) -> dict[str, Any]:
    """A result naming one sandbox interface and one IPv4 address, both derived from the tuple (4.2.1)."""
    digest = hashlib.sha256(f"{container}/{network}/{ifname}".encode()).digest()
    mac = "02:" + ":".join(f"{b:02x}" for b in digest[:5])
    address = f"10.{digest[5] % 250 + 1}.{digest[6]}.{digest[7] % 250 + 2}/16"
    if version.startswith(("0.1.", "0.2.")):
        return {"cniVersion": version, "ip4": {"ip": address}}
    ip: dict[str, Any] = {"address": address, "interface": 0}
    if version.startswith("0.3."):
        ip["version"] = "4"
    return {
        "cniVersion": version,
        "interfaces": [{"name": ifname, "mac": mac, "sandbox": netns}],
        "ips": [ip],
    }


def _netns_name(netns: str) -> str | None:
    """The `ip netns` name of a namespace path the bench made (`/run/netns/NAME`), else None."""
    path = Path(netns)
    if not netns or path.parent.resolve() != Path("/run/netns").resolve():
        return None
    return path.name


def _link(ip: str | None, command: str, netns: str, ifname: str) -> None:
    """Makes (ADD) or removes (DEL) the interface `ifname` in the pod's namespace; best effort:
    a chained plugin finds it made, a DEL of a list finds it gone, and neither is an error."""
    name = _netns_name(netns)
    if not ip or name is None or not ifname:
        return
    base = [ip, "-n", name, "link"]
    tries = [[*base, "add", ifname, "type", kind] for kind in ("dummy", "bridge")] if command == "ADD" \
        else [[*base, "del", ifname]]
    for argv in tries:
        done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
        if done.returncode == 0 or b"File exists" in done.stderr:
            return


def _fill(value: Any, ifname: str, netns: str) -> Any:
    """The scenario's result with `$IFNAME` and `$NETNS` replaced by this execution's values."""
    if isinstance(value, str):
        return value.replace("$IFNAME", ifname).replace("$NETNS", netns)
    if isinstance(value, list):
        return [_fill(v, ifname, netns) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, ifname, netns) for k, v in value.items()}
    return value


def main() -> int:
    me = Path(sys.argv[0])
    settings = json.loads((me.parent / SETTINGS_FILE).read_text())
    raw = sys.stdin.buffer.read()
    env = dict(os.environ)
    try:
        conf: Any = json.loads(raw)
    except ValueError:
        conf = None
    conf_map: dict[str, Any] = conf if isinstance(conf, dict) else {}
    command = env.get("CNI_COMMAND", "")
    netns = env.get("CNI_NETNS", "")
    record = {
        "type": me.name,
        "env": env,
        "stdin": raw.decode("utf-8", "replace"),
        "conf": conf,
        "netns_is_file": bool(netns) and os.path.exists(netns),
    }
    # One write(2) of one line, in append mode: records of sequential executions keep their order.
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(settings["records"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)

    version = str(conf_map.get("cniVersion") or "1.0.0")
    if command == "VERSION":
        print(json.dumps({"cniVersion": version, "supportedVersions": list(VERSIONS)}))
        return 0
    try:
        control = json.loads(Path(settings["control"]).read_text())
    except (OSError, ValueError):
        control = {}
    facts = {
        "container": env.get("CNI_CONTAINERID", ""),
        "network": str(conf_map.get("name", "")),
        "type": me.name,
        "ifname": env.get("CNI_IFNAME", ""),
        "command": command,
    }
    for rule in control.get("errors", []):
        if _matches(rule.get("when", {}), facts):
            error = {"cniVersion": version, "code": rule.get("code", 7), "msg": rule.get("msg", "refused")}
            print(json.dumps(error))
            return 1
    links = any(_matches(rule, {"container": facts["container"]}) for rule in control.get("links", []))
    if command == "DEL" and links:
        _link(settings.get("ip"), "DEL", netns, facts["ifname"])
    if command != "ADD":
        return 0
    result: Any = None
    for rule in control.get("results", []):
        if _matches(rule.get("when", {}), facts):
            result = _fill(rule["result"], facts["ifname"], netns)
            break
    if result is None and isinstance(conf_map.get("prevResult"), dict):
        result = conf_map["prevResult"]
    if result is None:
        result = _own_result(version, facts["ifname"], netns, facts["network"], facts["container"])
    if links:
        _link(settings.get("ip"), "ADD", netns, facts["ifname"])
    print(json.dumps({**result, "cniVersion": version}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
