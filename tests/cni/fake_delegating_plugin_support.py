"""A small NPWG delegating plugin that is not this project's: Multus-like, in one stdlib script.

The harness must judge any implementation, so its tests run it against this one
too. Like Multus "thin", it is executed by the runtime, reads its own
configuration (`kubeconfig`, `confDir`, `binDir`, `cacheDir`, `clusterNetwork`: a
file holding the default network's config list), asks the API for the pod and its
NetworkAttachmentDefinitions, runs the delegates itself, keeps what it attached
in a file per container, and writes network-status with a merge patch.

It does what the spec says, except for the faults listed in its configuration's
`"misbehave"` (each one a rule a scenario of the harness checks):

- `del-forward`: DEL tears down in the order of set-up (7.2 and CNI: reverse);
- `no-name-injection`: a NAD config without `name` is passed on without one (3.4.2);
- `continue-after-failure`: ADD goes on with the next network after one failed (7.2);
- `runtime-config-everywhere`: the runtime's runtimeConfig reaches every network (7.5);
- `default-last`: the cluster default network is attached after the selected ones (6.2);
- `no-capability-check`: a selection key is passed on even when no plugin declares it (4.1.2.1.x.2);
- `status-last-sandbox`: network-status names the last sandbox interface, not the first (5.3.2.1).

And what Multus v4.2.4 does where it differs from the above (docs/npwg-conformance.md, "Peers"):

- `config-file-order`: an on-disk configuration is the first `.conf`, `.json` or `.conflist` in
  file-name order whose "name" matches (the NAD client's GetCNIConfigFromFile), not a config list
  first (3.4.1);
- `ifname-from-netns`: a requested interface name is refused when the pod's namespace already has
  an interface of that name, checked before each delegate (Multus's validateIfName), instead of
  against the names of the attachments planned before it;
- `no-check`: CHECK runs no delegate (Multus thin checks only its configuration's own `delegates`,
  none with `clusterNetwork`, and never the pod's NADs);
- `status-per-sandbox`: network-status as the NAD client's CreateNetworkStatuses writes it: one
  entry per sandbox interface, `default` omitted when false, every IP of a result with one interface.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

CAPABILITIES = {"ips": "ips", "mac": "mac", "portMappings": "portMappings", "bandwidth": "bandwidth",
                "infiniband-guid": "infinibandGUID"}
STATUS = "k8s.v1.cni.cncf.io/network-status"


class Failure(Exception):
    def __init__(self, code: int, msg: str) -> None:
        super().__init__(msg)
        self.code, self.msg = code, msg


def api(conf: dict[str, Any], method: str, path: str, body: Any = None) -> Any:
    kubeconfig = json.loads(Path(conf["kubeconfig"]).read_text())
    server = kubeconfig["clusters"][0]["cluster"]["server"]
    request = urllib.request.Request(server + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
    request.add_header("Content-Type", "application/merge-patch+json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise Failure(11, f"{method} {path}: {exc.code}") from None


def parse_selection(value: str, namespace: str) -> list[dict[str, Any]]:
    value = value.strip()
    if not value:
        return []
    if value.startswith("["):
        items = json.loads(value)
    else:
        items = []
        for ref in value.split(","):
            ref = ref.strip()
            ns, _, rest = ref.rpartition("/")
            name, _, interface = rest.partition("@")
            items.append({"name": name, "namespace": ns, **({"interface": interface} if interface else {})})
    for item in items:
        item["namespace"] = item.get("namespace") or namespace
    return items


def on_disk(conf_dir: Path, name: str, misbehave: set[str]) -> dict[str, Any] | None:
    order = (((".conf", ".json", ".conflist"),) if "config-file-order" in misbehave
             else ((".conflist",), (".conf", ".json")))
    for suffixes in order:
        for path in sorted(conf_dir.glob("*")):
            if path.suffix in suffixes:
                try:
                    data = json.loads(path.read_text())
                except ValueError:
                    continue
                if data.get("name") == name:
                    return data
    return None


def as_list(config: dict[str, Any]) -> dict[str, Any]:
    if "plugins" in config:
        return config
    plugin = {k: v for k, v in config.items() if k not in ("name", "cniVersion")}
    out = {"cniVersion": config.get("cniVersion"), "plugins": [plugin]}
    if "name" in config:
        out["name"] = config["name"]
    return out


def plan(conf: dict[str, Any], env: dict[str, str], misbehave: set[str]) -> list[dict[str, Any]]:
    args = dict(p.split("=", 1) for p in env.get("CNI_ARGS", "").split(";") if "=" in p)
    namespace, pod_name = args["K8S_POD_NAMESPACE"], args["K8S_POD_NAME"]
    pod = api(conf, "GET", f"/api/v1/namespaces/{namespace}/pods/{pod_name}")
    if pod is None:
        raise Failure(11, f"pod {namespace}/{pod_name} not found")
    runtime = conf.get("runtimeConfig") or {}
    default = as_list(json.loads(Path(conf["clusterNetwork"]).read_text()))
    default_att = {"name": default["name"], "list": default, "ifname": env["CNI_IFNAME"], "runtime": runtime,
                   "default": True}
    selected: list[dict[str, Any]] = []
    selection = parse_selection(pod["metadata"].get("annotations", {}).get("k8s.v1.cni.cncf.io/networks", ""),
                                namespace)
    used = {env["CNI_IFNAME"]}
    counter = 0
    for element in selection:
        nad = api(conf, "GET", f"/apis/k8s.cni.cncf.io/v1/namespaces/{element['namespace']}/"
                  f"network-attachment-definitions/{element['name']}")
        if nad is None:
            raise Failure(7, f"NAD {element['namespace']}/{element['name']} not found")
        text = (nad.get("spec") or {}).get("config", "")
        config = json.loads(text) if text.strip() else on_disk(Path(conf["confDir"]), element["name"], misbehave)
        if config is None:
            raise Failure(7, f"no configuration for {element['name']}")
        config = as_list(config)
        if not config.get("name") and "no-name-injection" not in misbehave:
            config["name"] = element["name"]
        runtime_config: dict[str, Any] = dict(runtime) if "runtime-config-everywhere" in misbehave else {}
        for key, cap in CAPABILITIES.items():
            if key in element:
                if not any((p.get("capabilities") or {}).get(cap) is True for p in config["plugins"]) and \
                        "no-capability-check" not in misbehave:
                    raise Failure(7, f"no plugin of {element['name']} declares the {cap} capability")
                value = element[key]
                if key == "portMappings":
                    value = [{**m, "protocol": str(m.get("protocol", "tcp")).lower()} for m in value]
                runtime_config[cap] = value
        for plugin in config["plugins"]:
            if "cni-args" in element:
                plugin["args"] = {**(plugin.get("args") or {}),
                                  "cni": {**((plugin.get("args") or {}).get("cni") or {}), **element["cni-args"]}}
        if element.get("interface"):
            ifname = element["interface"]
            if ifname in used and "ifname-from-netns" not in misbehave:
                raise Failure(7, f"interface {ifname} is already used")
        else:
            counter += 1
            while f"net{counter}" in used:
                counter += 1
            ifname = f"net{counter}"
        used.add(ifname)
        selected.append({"name": f"{element['namespace']}/{element['name']}", "list": config, "ifname": ifname,
                         "runtime": runtime_config, "default": False})
    return [*selected, default_att] if "default-last" in misbehave else [default_att, *selected]


def link_exists(env: dict[str, str], ifname: str) -> bool:
    """Whether the pod's namespace (made with `ip netns add`) has an interface of that name."""
    ip = shutil.which("ip", path=env.get("PATH")) or "ip"
    netns = Path(env.get("CNI_NETNS", ""))
    probe = subprocess.run([ip, "-n", netns.name, "link", "show", ifname], capture_output=True, check=False)
    return probe.returncode == 0


def execute(conf: dict[str, Any], env: dict[str, str], att: dict[str, Any], command: str,
            prev: Any = None) -> Any:
    lst = att["list"]
    plugins = lst["plugins"] if command == "ADD" else list(reversed(lst["plugins"]))
    result = prev
    for plugin in plugins:
        net = {**plugin, "cniVersion": lst.get("cniVersion")}
        if lst.get("name"):
            net["name"] = lst["name"]
        caps = {k for k, v in (plugin.get("capabilities") or {}).items() if v is True}
        rc = {k: v for k, v in att["runtime"].items() if k in caps}
        if rc:
            net["runtimeConfig"] = rc
        if result is not None:
            net["prevResult"] = result
        child_env = {"PATH": env.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": command,
                     "CNI_CONTAINERID": env["CNI_CONTAINERID"], "CNI_NETNS": env.get("CNI_NETNS", ""),
                     "CNI_IFNAME": att["ifname"], "CNI_ARGS": env.get("CNI_ARGS", ""), "CNI_PATH": conf["binDir"]}
        proc = subprocess.run([str(Path(conf["binDir"]) / plugin["type"])], input=json.dumps(net).encode(),
                              env=child_env, capture_output=True, timeout=30, check=False)
        if proc.returncode != 0:
            raise Failure(7, f"{command} of {att['name']} failed: {proc.stdout.decode(errors='replace')}")
        if command == "ADD":
            result = json.loads(proc.stdout)
    return result


def multus_entries(att: dict[str, Any], result: Any) -> list[dict[str, Any]]:
    """What the NAD client's CreateNetworkStatuses (and, for one interface, CreateNetworkStatus) make."""
    interfaces = (result or {}).get("interfaces") or []
    ips = (result or {}).get("ips") or []
    dns = {k: v for k, v in ((result or {}).get("dns") or {}).items() if k in ("nameservers", "domain", "search")}
    if len(interfaces) <= 1:
        entry: dict[str, Any] = {"name": att["name"], "dns": dns}
        if interfaces and interfaces[0].get("sandbox"):
            entry["interface"] = interfaces[0]["name"]
            if interfaces[0].get("mac"):
                entry["mac"] = interfaces[0]["mac"]
        entry["ips"] = [ip["address"].split("/")[0] for ip in ips]
        entries = [entry]
    else:
        entries, index_of = [], {}
        for i, itf in enumerate(interfaces):
            if itf.get("sandbox"):
                index_of[i] = len(entries)
                entries.append({"name": att["name"], "interface": itf["name"], "ips": [], "dns": dns,
                                **({"mac": itf["mac"]} if itf.get("mac") else {})})
        for ip in ips:
            if ip.get("interface") in index_of:
                entries[index_of[ip["interface"]]]["ips"].append(ip["address"].split("/")[0])
            elif "interface" not in ip and entries:  # no index: the last sandbox interface's
                entries[-1]["ips"].append(ip["address"].split("/")[0])
    for entry in entries:
        if att["default"]:
            entry["default"] = True  # omitempty: false is never written
    return entries


def status_entry(att: dict[str, Any], result: Any, misbehave: set[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": att["name"], "default": att["default"]}
    interfaces = (result or {}).get("interfaces") or []
    sandboxes = [i for i, itf in enumerate(interfaces) if itf.get("sandbox")]
    index = (sandboxes[-1] if "status-last-sandbox" in misbehave else sandboxes[0]) if sandboxes else None
    if index is not None:
        entry["interface"] = interfaces[index]["name"]
        if interfaces[index].get("mac"):
            entry["mac"] = interfaces[index]["mac"]
    ips = [ip["address"] for ip in (result or {}).get("ips") or []
           if (ip.get("interface") == index if index is not None else ip.get("interface", -1) < 0)]
    if ips:
        entry["ips"] = ips
    dns = {k: v for k, v in ((result or {}).get("dns") or {}).items() if k in ("nameservers", "domain", "search")}
    if dns:
        entry["dns"] = dns
    return entry


def main() -> int:
    env = dict(os.environ)
    conf = json.loads(sys.stdin.buffer.read())
    misbehave = set(conf.get("misbehave") or [])
    command = env.get("CNI_COMMAND")
    if command == "VERSION":
        print(json.dumps({"cniVersion": conf.get("cniVersion"), "supportedVersions": ["0.4.0", "1.0.0"]}))
        return 0
    cache = Path(conf["cacheDir"]) / f"{env['CNI_CONTAINERID']}.json"
    cache.parent.mkdir(parents=True, exist_ok=True)
    try:
        if command == "ADD":
            attachments = plan(conf, env, misbehave)
            done: list[dict[str, Any]] = []
            failed: Failure | None = None
            for att in attachments:
                if "ifname-from-netns" in misbehave and link_exists(env, att["ifname"]):
                    failed = failed or Failure(7, f"interface name {att['ifname']} already exists")
                    break
                done.append(att)
                cache.write_text(json.dumps(done))
                try:
                    att["result"] = execute(conf, env, att, "ADD")
                except Failure as exc:
                    failed = failed or exc
                    if "continue-after-failure" not in misbehave:
                        break
            if failed is not None:
                raise failed
            args = dict(p.split("=", 1) for p in env.get("CNI_ARGS", "").split(";") if "=" in p)
            status = ([e for a in done for e in multus_entries(a, a["result"])] if "status-per-sandbox" in misbehave
                      else [status_entry(a, a["result"], misbehave) for a in done])
            api(conf, "PATCH", f"/api/v1/namespaces/{args['K8S_POD_NAMESPACE']}/pods/{args['K8S_POD_NAME']}",
                {"metadata": {"annotations": {STATUS: json.dumps(status)}}})
            cache.write_text(json.dumps(done))
            default = next(a for a in done if a["default"])
            print(json.dumps(default["result"]))
            return 0
        done = json.loads(cache.read_text()) if cache.exists() else []
        if command == "CHECK":
            if "no-check" in misbehave:
                return 0
            for att in done:
                execute(conf, env, att, "CHECK", att.get("result"))
            return 0
        order = done if "del-forward" in misbehave else list(reversed(done))
        left, errors = [], []
        for att in order:
            try:
                execute(conf, env, att, "DEL", att.get("result"))
            except Failure as exc:
                left.append(att)
                errors.append(exc.msg)
        if left:
            cache.write_text(json.dumps(list(reversed(left)) if "del-forward" not in misbehave else left))
            raise Failure(7, "; ".join(errors))
        cache.unlink(missing_ok=True)
        return 0
    except Failure as exc:
        print(json.dumps({"cniVersion": conf.get("cniVersion"), "code": exc.code, "msg": exc.msg}))
        return 1


if __name__ == "__main__":
    sys.exit(main())
