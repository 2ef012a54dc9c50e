"""The test bench: a container runtime, a cluster and recording delegates around one delegating plugin.

`Bench` owns a temporary directory holding the recording plugins' bin dir, a CNI
conf dir for on-disk configurations (NPWG 3.4.1), the cluster default network's
configuration, the kubeconfig of the in-process API (`kubeapi.KubeApi`), the
recordings and the control file the recorders answer from. It executes the plugin
under test as a runtime does (CNI spec "Execution Protocol": the `CNI_*`
variables, the network configuration on stdin, the result or error on stdout) in
network namespaces it creates with `ip netns` and removes afterwards, and it
starts and stops the plugin's daemon, if it has one.

The plugin's own network configuration (`--conf`) is a template: `${NAME}`
placeholders (`PLACEHOLDERS`) are replaced by the bench's paths before it is
parsed, so a Multus conf can name the kubeconfig and a shim conf its socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from conformance.npwg import kubeapi, recorder

NAMESPACE = "npwgc"
"""The namespace of every pod and NetworkAttachmentDefinition the scenarios make."""
OTHER_NAMESPACE = "npwgc-other"
DEFAULT_NETWORK_NAME = "npwgc-default"
DEFAULT_TYPE = "npwg-rec-default"
DEFAULT_CAPABILITIES = {"portMappings": True, "bandwidth": True}
RUNTIME_IFNAME = "eth0"
RECORDER_TYPES = (
    DEFAULT_TYPE,
    "npwg-rec-a",
    "npwg-rec-b",
    "npwg-rec-c",
    "npwg-rec-nad",
    "npwg-rec-conflist",
    "npwg-rec-conf",
    "npwg-rec-decoy",
    "npwg-rec-cap",
    "npwg-rec-nocap",
)
"""The plugin types a scenario may name: each is a copy of the recording plugin."""

PLACEHOLDERS = {
    "KUBECONFIG": "the kubeconfig of the harness's Kubernetes API",
    "CNI_BIN_DIR": "the directory of the recording plugins (every delegate type the scenarios name)",
    "CNI_CONF_DIR": "the directory of on-disk CNI configurations (NPWG 3.4.1 rules 2 and 3)",
    "DEFAULT_NETWORK_CONF": "a file holding the cluster default network's CNI config list",
    "DEFAULT_NETWORK": "the cluster default network's CNI config list, as inline JSON",
    "DEFAULT_NETWORK_NAME": "the cluster default network's name",
    "RUN_DIR": "a private directory for the plugin's own state (sockets, caches)",
    "CNI_VERSION": "the CNI version the runtime speaks",
    "PYTHON": "the Python running the harness",
}
_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")

PODNETWORK_CONF = """{
  "cniVersion": "${CNI_VERSION}",
  "name": "multinetwork",
  "type": "multinetwork",
  "socketPath": "${RUN_DIR}/agent.sock",
  "capabilities": {"portMappings": true, "bandwidth": true}
}
"""
"""This project's shim, talking to the agent the daemon line starts (the default without --conf)."""
PODNETWORK_DAEMON = (
    "${PYTHON} -m podnetwork.cli cni-agent --kubeconfig ${KUBECONFIG} --socket ${RUN_DIR}/agent.sock "
    "--cni-bin-dir ${CNI_BIN_DIR} --cni-conf-dir ${CNI_CONF_DIR} --cache-dir ${RUN_DIR}/agent-cache "
    "--default-network-conf ${DEFAULT_NETWORK_CONF} --plugin-timeout 30"
)
PODNETWORK_READY = "${RUN_DIR}/agent.sock"


class BenchError(Exception):
    """Input the harness cannot run with; the message says what is wrong and how to fix it."""


def substitute(text: str, values: Mapping[str, str], where: str) -> str:
    """`text` with every `${NAME}` replaced; an unknown name is a BenchError naming `where`."""
    unknown = sorted({m for m in _PLACEHOLDER.findall(text) if m not in values})
    if unknown:
        raise BenchError(
            f"{where}: unknown placeholder(s) {', '.join('${' + u + '}' for u in unknown)}; "
            f"known: {', '.join('${' + k + '}' for k in PLACEHOLDERS)}"
        )
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def parse_conf(text: str, values: Mapping[str, str], where: str) -> dict[str, Any]:
    """The delegating plugin's network configuration from its template (`--conf`)."""
    try:
        conf = json.loads(substitute(text, values, where))
    except json.JSONDecodeError as exc:
        raise BenchError(f"{where}: not JSON after the placeholders were replaced: {exc}") from None
    except RecursionError:  # Python's parser recurses per level: ~1,000 levels end it
        raise BenchError(f"{where}: nested too deeply to be a CNI configuration (Python's JSON parser "
                         f"stops near {sys.getrecursionlimit()} levels)") from None
    if not isinstance(conf, dict):
        raise BenchError(f"{where}: a CNI network configuration is a JSON object, got {type(conf).__name__}")
    if "plugins" in conf:
        raise BenchError(
            f"{where}: give the delegating plugin's own configuration (one object with a "
            '"type"), not a configuration list'
        )
    for key in ("type", "name"):
        if not isinstance(conf.get(key), str) or not conf[key]:
            raise BenchError(f"{where}: the configuration needs a non-empty string {key!r}")
    caps = conf.get("capabilities", {})
    if not isinstance(caps, dict):
        raise BenchError(f'{where}: "capabilities" must be an object of booleans')
    return conf


def default_network(cni_version: str) -> dict[str, Any]:
    """The cluster default network every pod gets first (NPWG 6): one recording plugin."""
    return {
        "cniVersion": cni_version,
        "name": DEFAULT_NETWORK_NAME,
        "plugins": [{"type": DEFAULT_TYPE, "capabilities": dict(DEFAULT_CAPABILITIES)}],
    }


def validate(
    template: str, source: str, daemon: str | None, daemon_ready: str | None, cni_version: str
) -> None:
    """Refuses a template or daemon line that could never run, before anything is made (BenchError)."""
    preview = {k: f"/npwg-conformance/{k.lower()}" for k in PLACEHOLDERS}
    preview.update(DEFAULT_NETWORK=json.dumps(default_network(cni_version)), CNI_VERSION=cni_version)
    parse_conf(template, preview, source)
    if daemon is not None:
        try:
            argv = shlex.split(substitute(daemon, preview, "--daemon"))
        except ValueError as exc:
            raise BenchError(f"--daemon: cannot split it into arguments: {exc}") from None
        if not argv:
            raise BenchError("--daemon: empty command")
    if daemon_ready is not None:
        substitute(daemon_ready, preview, "--daemon-ready")


class _Line(BaseModel):
    """One line of the records file, as `recorder.main` writes it (its own format, read once)."""

    model_config = ConfigDict(extra="ignore")

    type: str = ""
    env: dict[str, str] = Field(default_factory=dict)
    conf: Any = None
    """The plugin's stdin as JSON: any value, null when it was not JSON."""
    netns_is_file: bool = False


@dataclass(frozen=True)
class Record:
    """One execution of a recording plugin."""

    seq: int
    type: str
    env: dict[str, str]
    conf: dict[str, Any]
    netns_is_file: bool

    @property
    def command(self) -> str:
        return self.env.get("CNI_COMMAND", "")

    @property
    def container(self) -> str:
        return self.env.get("CNI_CONTAINERID", "")

    @property
    def ifname(self) -> str:
        return self.env.get("CNI_IFNAME", "")

    @property
    def netns(self) -> str:
        return self.env.get("CNI_NETNS", "")

    @property
    def network(self) -> str:
        name = self.conf.get("name")
        return name if isinstance(name, str) else ""

    @property
    def runtime_config(self) -> dict[str, Any]:
        value = self.conf.get("runtimeConfig")
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Invocation:
    """One execution of the plugin under test, as the runtime saw it."""

    command: str
    container: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def answer(self) -> Any:
        try:
            return json.loads(self.stdout) if self.stdout.strip() else None
        except (ValueError, RecursionError):  # not an answer, however deep
            return None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def is_cni_error(self) -> bool:
        """Failed the CNI way: a non-zero exit and an error object with an integer `code` on stdout."""
        answer = self.answer
        return self.returncode != 0 and isinstance(answer, dict) and isinstance(answer.get("code"), int)

    def describe(self) -> str:
        out = self.stdout.strip() or "(no output)"
        err = self.stderr.strip()
        text = f"{self.command} exited {self.returncode}: {out[:600]}"
        return text + (f"; stderr: {err[-600:]}" if err else "")


@dataclass
class Pod:
    name: str
    uid: str
    container: str
    netns: str = ""
    namespace: str = NAMESPACE


@dataclass
class Bench:
    plugin: Path
    conf_template: str
    conf_source: str
    daemon: str | None = None
    daemon_ready: str | None = None
    cni_version: str = "1.0.0"
    timeout: float = 60.0
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="npwg-conformance-")))
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    api: kubeapi.KubeApi | None = None
    conf: dict[str, Any] = field(default_factory=dict)
    _daemon: subprocess.Popen[bytes] | None = None
    _netns: list[str] = field(default_factory=list)
    _control: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {"errors": [], "results": [], "links": []}
    )

    # --- set-up and tear-down ------------------------------------------------------------

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def conf_dir(self) -> Path:
        return self.root / "net.d"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def records_file(self) -> Path:
        return self.root / "records.jsonl"

    @property
    def control_file(self) -> Path:
        return self.root / "control.json"

    def default_network(self) -> dict[str, Any]:
        return default_network(self.cni_version)

    def values(self) -> dict[str, str]:
        return {
            "KUBECONFIG": str(self.root / "kubeconfig"),
            "CNI_BIN_DIR": str(self.bin_dir),
            "CNI_CONF_DIR": str(self.conf_dir),
            "DEFAULT_NETWORK_CONF": str(self.root / "default-network.conflist"),
            "DEFAULT_NETWORK": json.dumps(self.default_network()),
            "DEFAULT_NETWORK_NAME": DEFAULT_NETWORK_NAME,
            "RUN_DIR": str(self.run_dir),
            "CNI_VERSION": self.cni_version,
            "PYTHON": sys.executable,
        }

    def start(self) -> None:
        """Everything the scenarios need, then the plugin's daemon; a BenchError says what failed."""
        values = self.values()
        self.conf = parse_conf(self.conf_template, values, self.conf_source)
        for d in (self.bin_dir, self.conf_dir, self.run_dir):
            d.mkdir(parents=True, exist_ok=True)
        source = Path(recorder.__file__).read_text()
        for name in RECORDER_TYPES:
            target = self.bin_dir / name
            target.write_text(f"#!{sys.executable} -I\n{source}")
            target.chmod(0o755)
        (self.bin_dir / recorder.SETTINGS_FILE).write_text(
            # `ip` by its path: a delegating plugin may run the recorders with a PATH of its own.
            json.dumps({"records": str(self.records_file), "control": str(self.control_file),
                        "ip": shutil.which("ip")})
        )
        self.records_file.touch(mode=0o600)
        self._write_control()
        Path(values["DEFAULT_NETWORK_CONF"]).write_text(json.dumps(self.default_network(), indent=2))
        self.api = kubeapi.KubeApi()
        self.api.write_kubeconfig(Path(values["KUBECONFIG"]))
        if self.daemon:
            self._start_daemon(values)
        self._preflight()

    def _preflight(self) -> None:
        """The plugin must at least execute: VERSION, whose answer is not judged (runtimes need not ask)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": "VERSION"}
        try:
            subprocess.run(
                [str(self.plugin)],
                input=json.dumps({"cniVersion": self.cni_version}).encode(),
                env=env,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except OSError as exc:
            raise BenchError(f"--plugin {self.plugin}: cannot execute it: {exc}") from None
        except subprocess.TimeoutExpired:
            raise BenchError(f"--plugin {self.plugin}: no answer to VERSION in {self.timeout:g} s") from None

    def _start_daemon(self, values: Mapping[str, str]) -> None:
        assert self.daemon is not None
        argv = shlex.split(substitute(self.daemon, values, "--daemon"))
        log = (self.root / "daemon.log").open("wb")
        try:
            self._daemon = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        except OSError as exc:
            raise BenchError(f"--daemon: cannot start {argv[0]!r}: {exc}") from None
        finally:
            log.close()
        if not self.daemon_ready:
            return
        ready = Path(substitute(self.daemon_ready, values, "--daemon-ready"))
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self._daemon.poll() is not None:
                raise BenchError(
                    f"--daemon exited {self._daemon.returncode} before {ready} appeared: "
                    f"{self.daemon_log()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise BenchError(f"--daemon: {ready} did not appear within 60 s: {self.daemon_log()[-2000:]}")
            time.sleep(0.05)

    def daemon_log(self) -> str:
        path = self.root / "daemon.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self, *, keep_files: bool = False) -> None:
        """Removes the namespaces, stops the daemon and the API, and (unless `keep_files`) the directory."""
        self.remove_netns()
        if self._daemon is not None and self._daemon.poll() is None:
            self._daemon.send_signal(signal.SIGTERM)
            try:
                self._daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._daemon.pid, signal.SIGKILL)
                self._daemon.wait(timeout=10)
        if self.api is not None:
            self.api.close()
            self.api = None
        if not keep_files:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Bench:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what a scenario sets up ---------------------------------------------------------

    def name(self, base: str) -> str:
        """A name unique to this bench (objects of different scenarios never meet)."""
        return f"{base}-{self.tag}"

    def nad(self, name: str, config: Mapping[str, Any] | str | None, namespace: str = NAMESPACE) -> None:
        obj: dict[str, Any] = {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": namespace, "uid": secrets.token_hex(8)},
        }
        if config is not None:
            obj["spec"] = {"config": config if isinstance(config, str) else json.dumps(config)}
        assert self.api is not None
        self.api.put(obj)

    def on_disk(self, filename: str, conf: Mapping[str, Any]) -> None:
        (self.conf_dir / filename).write_text(json.dumps(conf, indent=2))

    def pod(self, base: str, selection: str | Sequence[Mapping[str, Any]] | None = None) -> Pod:
        pod = Pod(name=self.name(base), uid=secrets.token_hex(16), container=secrets.token_hex(32))
        annotations: dict[str, str] = {}
        if selection is not None:
            annotations["k8s.v1.cni.cncf.io/networks"] = (
                selection if isinstance(selection, str) else json.dumps(list(selection))
            )
        assert self.api is not None
        self.api.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod.name,
                    "namespace": pod.namespace,
                    "uid": pod.uid,
                    "annotations": annotations,
                },
                "spec": {"containers": [{"name": "c", "image": "pause"}]},
            }
        )
        return pod

    def fail(
        self,
        pod: Pod,
        command: str,
        *,
        network: str | None = None,
        type_: str | None = None,
        code: int = 7,
        msg: str = "refused by the scenario",
    ) -> None:
        """The recorders answer `command` for this pod (and network or type) with a CNI error."""
        when = {"container": pod.container, "command": command, "network": network, "type": type_}
        self._control["errors"].append({"when": when, "code": code, "msg": msg})
        self._write_control()

    def unfail(self, pod: Pod) -> None:
        self._control["errors"] = [
            r for r in self._control["errors"] if r["when"]["container"] != pod.container
        ]
        self._write_control()

    def answer(self, pod: Pod, network: str, result: Mapping[str, Any]) -> None:
        """The recorders answer ADD for this pod and network with `result` (`$IFNAME`, `$NETNS` filled in)."""
        when = {"container": pod.container, "command": "ADD", "network": network}
        self._control["results"].append({"when": when, "result": dict(result)})
        self._write_control()

    def make_links(self, pod: Pod) -> None:
        """The recorders make the interface each ADD of this pod reports (`CNI_IFNAME`, in its
        namespace) and DEL removes it, as a real plugin does: for the scenarios whose rule a
        plugin may enforce by looking in the namespace (4.1.2.1.5, as Multus does)."""
        self._control["links"].append({"container": pod.container})
        self._write_control()

    def _write_control(self) -> None:
        tmp = self.control_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._control))
        tmp.replace(self.control_file)

    # --- the runtime ---------------------------------------------------------------------

    @property
    def netns_prefix(self) -> str:
        """What every network namespace of this run is named with, so a report can say which were its own."""
        return f"npwgc-{self.tag}-"

    def make_netns(self) -> str:
        name = f"{self.netns_prefix}{len(self._netns)}"
        proc = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BenchError(f"cannot create the network namespace {name}: {proc.stderr.strip()}")
        self._netns.append(name)
        return f"/var/run/netns/{name}"

    def remove_netns(self) -> None:
        while self._netns:
            subprocess.run(["ip", "netns", "del", self._netns.pop()], capture_output=True, check=False)

    def runtime_conf(self, runtime_config: Mapping[str, Any] | None, prev_result: Any) -> dict[str, Any]:
        """The plugin's configuration as libcni passes it: `runtimeConfig` only for declared capabilities."""
        conf = dict(self.conf)
        declared = self.declared_capabilities()
        given = {k: v for k, v in (runtime_config or {}).items() if k in declared}
        if given:
            conf["runtimeConfig"] = given
        if prev_result is not None:
            conf["prevResult"] = prev_result
        return conf

    def declared_capabilities(self) -> set[str]:
        # parse_conf refused a "capabilities" that is not an object; absent declares none
        return {k for k, v in self.conf.get("capabilities", {}).items() if v is True}

    def cni(
        self,
        command: str,
        pod: Pod,
        *,
        runtime_config: Mapping[str, Any] | None = None,
        prev_result: Any = None,
    ) -> Invocation:
        """Executes the plugin under test as the runtime does for this pod's sandbox."""
        if not pod.netns:
            pod.netns = self.make_netns()
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": pod.container,
            "CNI_NETNS": pod.netns,
            "CNI_IFNAME": RUNTIME_IFNAME,
            "CNI_PATH": os.pathsep.join(dict.fromkeys([str(self.bin_dir), str(self.plugin.parent)])),
            "CNI_ARGS": (
                f"IgnoreUnknown=1;K8S_POD_NAMESPACE={pod.namespace};K8S_POD_NAME={pod.name};"
                f"K8S_POD_INFRA_CONTAINER_ID={pod.container};K8S_POD_UID={pod.uid}"
            ),
        }
        stdin = json.dumps(self.runtime_conf(runtime_config, prev_result)).encode()
        try:
            proc = subprocess.run(
                [str(self.plugin)],
                input=stdin,
                env=env,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Invocation(command, pod.container, -1, "", f"no answer within {self.timeout:g} s")
        except OSError as exc:
            return Invocation(command, pod.container, -1, "", f"cannot execute {self.plugin}: {exc}")
        return Invocation(
            command,
            pod.container,
            proc.returncode,
            proc.stdout.decode(errors="replace"),
            proc.stderr.decode(errors="replace"),
        )

    # --- what happened -------------------------------------------------------------------

    def records(self, pod: Pod) -> list[Record]:
        """The recorders' executions for this pod's sandbox, in order."""
        out: list[Record] = []
        for seq, text in enumerate(self.records_file.read_text().splitlines()):
            try:
                line = _Line.model_validate_json(text)
            except ValidationError:
                continue  # not a line the recorder wrote whole: it names no execution
            if line.env.get("CNI_CONTAINERID") != pod.container:
                continue
            conf = line.conf if isinstance(line.conf, dict) else {}
            out.append(Record(seq, line.type, dict(line.env), conf, line.netns_is_file))
        return out

    def writes(self, pod: Pod) -> list[kubeapi.AnnotationWrite]:
        assert self.api is not None
        return self.api.writes(pod.namespace, pod.name)
