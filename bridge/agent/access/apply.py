"""Node access and API access on one node (KEP-3698 Phase II requirements 19-21): the node's paths
to the PodNetworks that ask for one, their nftables table, and the API routes of their pods.

`NodeAccess.reconcile` makes the node's namespace (`AgentConfig.node_netns`) hold exactly the
paths `bridge.agent.access.decide` decides, for the PodNetworks of the pods this agent attached (their
records name each attachment's PodNetwork): a path exists while its PodNetwork asks for it and
a pod of it runs on the node, so the last pod's DEL takes it away, and so does removing the
switch. It runs at the agent's start, after every ADD, DEL and hot-plug that concerns such a
network, and every `recheck_interval` (a switch changed on the PodNetwork); it is idempotent,
and what it made is remembered in `node-access.json` of the cache dir, so that a path is
removed exactly as it was made even when its NAD changed since. A network the node cannot
reach is refused with a Warning Event on the PodNetwork and a log line, and nothing is made.

`pod_routes`: a pod whose first network has API access gets, at ADD, a route to each API
address via the node's address on that network (docs/node-access.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path as FilePath
from typing import Any

from bridge.agent.access import decide, state
from bridge.agent.access.decide import Path
from bridge.agent.access.state import STATE_FILE, Made
from bridge.agent.delegates import invoke
from bridge.agent.delegates.cache import Record
from bridge.agent.delegates.invoke import CNIError, Command, RuntimeArgs
from bridge.agent.delegates.records import Records
from bridge.agent.delegates.runner import Runner
from bridge.agent.kube.objects import EventSink, NotFound, ObjectSource
from bridge.agent.netns import nftables
from bridge.agent.node.settings import EVENT_COMPONENT, AgentConfig
from podnetwork.ground import constants

log = logging.getLogger(__name__)

OWN_NETNS = "/proc/self/ns/net"
#: Seconds one `ip` or `nft` run may take.
COMMAND_TIMEOUT = 10.0


class CommandFailed(Exception):
    pass


async def ip(netns: str, *args: str, ok: Iterable[str] = ()) -> str:
    """`ip ARGS` in the namespace at `netns`; stdout. An error message containing one of `ok`
    (an address already gone, ...) is success."""
    proc = await asyncio.create_subprocess_exec(
        "nsenter", f"--net={netns}", "ip", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), COMMAND_TIMEOUT)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise CommandFailed(f"ip {' '.join(args)} in {netns}: no answer within {COMMAND_TIMEOUT:g} s"
                            ) from None
    message = err.decode(errors="replace").strip()
    if proc.returncode != 0 and not any(o in message for o in ok):
        raise CommandFailed(f"ip {' '.join(args)} in {netns}: {message or f'exit code {proc.returncode}'}")
    return out.decode(errors="replace")


@dataclass
class NodeAccess:
    """The node's paths to PodNetworks on one agent (module docstring)."""

    objects: ObjectSource
    config: AgentConfig
    records: Records
    runner: Runner
    events: Callable[[], EventSink | None] = lambda: None
    now: Callable[[], str] = field(default=lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _refused: dict[str, str] = field(default_factory=dict)
    """PodNetwork -> the reason last reported, so a refusal is reported once, not per reconcile."""
    api: tuple[str, ...] = ()
    """The API's addresses as last read."""
    _table_known_absent: bool | None = None
    """Whether the node has no table of ours; None: not known yet (the state file tells: an
    agent that never made a path never touches the node's nftables)."""

    @property
    def netns(self) -> str:
        return str(self.config.node_netns) if self.config.node_netns is not None else OWN_NETNS

    @property
    def state_file(self) -> FilePath:
        return self.config.cache_dir / STATE_FILE

    # --- state ---

    def made(self) -> dict[str, Made]:
        return state.load(self.state_file)

    def _save(self, made: Mapping[str, Made]) -> None:
        state.save(self.state_file, made)

    def concerns(self, record: Record) -> bool:
        """Whether a change of this container's attachments may change the node's paths."""
        return any(a.podnetwork for a in record.attachments)

    def reservations(self) -> dict[str, list[dict[str, str]]]:
        """Network name -> the IPAM reservations of node paths, which a GC must keep."""
        out: dict[str, list[dict[str, str]]] = {}
        for entry in self.made().values():
            if entry.reservation:
                out.setdefault(entry.reservation["config"]["name"], []).append(
                    {"containerID": entry.reservation["container_id"], "ifname": entry.path["interface"]})
        return out

    # --- deciding ---

    async def _wanted(self, made: Mapping[str, Made]) -> tuple[dict[str, tuple[Path, bool]], set[str]]:
        """PodNetwork -> (its path, API access) for each that asks for one and has a pod here; and
        the PodNetworks that could not be read now (their paths are kept as they are)."""
        configs: dict[str, dict[str, Any]] = {}
        for record in self.records.readable():
            for attachment in record.attachments:
                if attachment.podnetwork and attachment.podnetwork not in configs:
                    configs[attachment.podnetwork] = attachment.config
        wanted: dict[str, tuple[Path, bool]] = {}
        unknown: set[str] = set()
        for name, config in sorted(configs.items()):
            try:
                podnetwork = await self.objects.get_podnetwork(name)
            except NotFound:
                continue
            except CNIError as exc:
                log.warning("node access: PodNetwork %s cannot be read now (%s); its node path stays as "
                            "it is", name, exc)
                unknown.add(name)
                continue
            try:
                switches = decide.switches(podnetwork.metadata.annotations)
                if not switches.node:
                    self._refused.pop(name, None)
                    continue
                path = decide.path_for(name, config)
            except decide.Refusal as exc:
                await self._refuse(name, podnetwork.metadata.uid, str(exc))
                continue
            self._refused.pop(name, None)
            wanted[name] = (path, switches.api)
        return wanted, unknown

    async def _refuse(self, name: str, uid: str | None, reason: str) -> None:
        if self._refused.get(name) == reason:
            return
        self._refused[name] = reason
        message = f"no node path to PodNetwork {name} on this node: {reason}"
        log.warning("node access: %s", message)
        await self._event(name, uid, constants.NODE_ACCESS_REFUSED_REASON, message, "Warning")

    async def _event(self, name: str, uid: str | None, reason: str, message: str, type_: str) -> None:
        sink = self.events()
        if sink is None:
            return
        now = self.now()
        key = hashlib.sha256(f"{name}/{reason}/{message}/{now}".encode()).hexdigest()[:16]
        body = {
            "apiVersion": "v1", "kind": "Event",
            # A cluster-scoped object's Events live in the default namespace, as kubectl looks for them.
            "metadata": {"name": f"{name[:200]}.{key}", "namespace": "default"},
            "involvedObject": {"apiVersion": constants.API_VERSION, "kind": constants.PODNETWORK_KIND,
                               "name": name, "uid": uid},
            "reason": reason, "message": message[:1024], "type": type_,
            "source": {"component": EVENT_COMPONENT}, "reportingComponent": EVENT_COMPONENT,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            await sink.post_event(body)
        except Exception as exc:  # an Event is a report; the path is made or not either way
            log.warning("node access: event about PodNetwork %s not posted: %s", name, exc)

    async def _api_addresses(self) -> tuple[str, ...]:
        namespace, name = constants.API_SERVICE_NAMESPACE, constants.API_SERVICE_NAME
        try:
            service = await self.objects.get_service(namespace, name)
            slices = await self.objects.list_endpoint_slices(namespace, name)
        except NotFound:
            log.warning("node access: Service %s/%s not found: API access routes nothing", namespace, name)
            return ()
        except CNIError as exc:
            log.warning("node access: the API's addresses cannot be read now (%s); keeping %s", exc,
                        ", ".join(self.api) or "none")
            return self.api
        return decide.api_addresses(service, slices)

    # --- reconciling ---

    async def reconcile(self) -> None:
        """Makes the node hold exactly the wanted paths and their table (module docstring)."""
        async with self._lock:
            made = self.made()
            wanted, unknown = await self._wanted(made)
            for name in sorted(set(made) - set(wanted) - unknown):
                await self._remove(name, made)
            for name, (path, api) in sorted(wanted.items()):
                current = made.get(name)
                if current is not None and current.path != path.key():
                    await self._remove(name, made)  # the NAD changed: made anew from it
                    current = None
                try:
                    if current is None:
                        made[name] = await self._make(path, api)
                        await self._event(name, None, constants.NODE_ACCESS_READY_REASON,
                                          f"the node reaches PodNetwork {name}'s pods on {path.interface} "
                                          f"from {', '.join(made[name].addresses)}", "Normal")
                    else:
                        await self._ensure(path, current)
                        current.api = api
                except (CommandFailed, CNIError) as exc:
                    log.error("node access: the node's path to PodNetwork %s failed: %s; retried at the next "
                              "reconcile", name, exc)
                self._save(made)
            if any(m.api for m in made.values()):
                self.api = await self._api_addresses()
            await self._table(made)
            if made:
                self._save(made)
            else:  # no path and no table: nothing of node access is left on the node
                self.state_file.unlink(missing_ok=True)

    async def settle(self, why: str) -> None:
        """`reconcile`, its failure logged: the caller's pod is attached either way."""
        try:
            await self.reconcile()
        except (nftables.NftablesError, CommandFailed, CNIError, OSError) as exc:
            log.error("node access (%s): %s; retried at the next reconcile", why, exc)

    async def _table(self, made: Mapping[str, Made]) -> None:
        active = [decide.Active(m.path["interface"], tuple(m.path["subnets"]), m.api) for m in made.values()]
        rules = decide.ruleset(active, self.api)
        if rules is None:
            if self._table_known_absent is None:
                self._table_known_absent = not self.state_file.exists()
            if not self._table_known_absent:  # an nft run per ADD of every pod would be a waste
                await nftables.remove(self.netns, table=nftables.ACCESS)
                self._table_known_absent = True
        else:
            await nftables.apply(self.netns, rules, table=nftables.ACCESS)
            self._table_known_absent = False

    async def _make(self, path: Path, api: bool) -> Made:
        if path.kind == decide.BRIDGE:
            if not path.by_plugin:
                for address in path.addresses:
                    await ip(self.netns, "addr", "replace", address, "dev", path.interface)
            log.info("node access: the node reaches PodNetwork %s on bridge %s from %s%s", path.podnetwork,
                     path.interface, ", ".join(path.addresses),
                     " (the bridge plugin's own gateway address: isGateway)" if path.by_plugin else "")
            return Made(path.key(), list(path.addresses), api)
        digest = hashlib.sha256(path.podnetwork.encode()).hexdigest()[:16]
        reservation = {"config": {"cniVersion": path.cni_version, "name": path.network_name,
                                  "ipam": dict(path.ipam)},
                       "container_id": f"node-access-{digest}"}
        result = await self._ipam(Command.ADD, reservation, path.interface)
        addresses = [str(entry["address"]) for entry in (result or {}).get("ips") or []
                     if isinstance(entry, Mapping) and entry.get("address")]
        made = Made(path.key(), addresses, api, reservation)
        try:
            if not addresses:
                raise CommandFailed(f"its IPAM ({path.ipam.get('type')}) gave the node no address")
            await self._link(path, addresses)
        except BaseException:
            await self._unmake(made)
            raise
        log.info("node access: the node reaches PodNetwork %s on %s (%s on %s) from %s", path.podnetwork,
                 path.interface, path.kind, path.master, ", ".join(addresses))
        return made

    async def _link(self, path: Path, addresses: list[str]) -> None:
        await ip(self.netns, "link", "del", path.interface, ok=("Cannot find device",))
        extra = ["mtu", str(path.mtu)] if path.mtu else []
        await ip(self.netns, "link", "add", path.interface, "link", path.master, *extra, "type", path.kind,
                 "mode", path.mode)
        for address in addresses:
            await ip(self.netns, "addr", "add", address, "dev", path.interface)
        await ip(self.netns, "link", "set", path.interface, "up")

    async def _ensure(self, path: Path, made: Made) -> None:
        """An existing path, put back where something took part of it away (idempotent)."""
        if path.kind == decide.BRIDGE:
            if not path.by_plugin:
                for address in made.addresses:
                    await ip(self.netns, "addr", "replace", address, "dev", path.interface)
            return
        shown = await ip(self.netns, "-j", "addr", "show", "dev", path.interface, ok=("does not exist",))
        present = {f"{a['local']}/{a['prefixlen']}" for link in json.loads(shown or "[]")
                   for a in link.get("addr_info", [])}
        if not set(made.addresses) <= present:
            await self._link(path, made.addresses)

    async def _ipam(self, command: Command, reservation: Mapping[str, Any],
                    ifname: str) -> dict[str, Any] | None:
        config = reservation["config"]
        args = RuntimeArgs(command, reservation["container_id"], self.netns, ifname, ())
        return await invoke.call(self.runner.executor, config["ipam"].get("type"), config, args,
                                 self.runner.bin_dirs, self.runner.timeout)

    async def _unmake(self, made: Made) -> None:
        path = made.path
        if path["kind"] == decide.BRIDGE:
            if not path["by_plugin"]:
                for address in made.addresses:
                    await ip(self.netns, "addr", "del", address, "dev", path["interface"],
                             ok=("Cannot assign requested address", "Cannot find device"))
        else:
            await ip(self.netns, "link", "del", path["interface"], ok=("Cannot find device",))
        if made.reservation:
            await self._ipam(Command.DEL, made.reservation, path["interface"])

    async def _remove(self, name: str, made: dict[str, Made]) -> None:
        try:
            await self._unmake(made[name])
        except (CommandFailed, CNIError) as exc:
            log.error("node access: removing the node's path to PodNetwork %s failed: %s; retried at the "
                      "next reconcile", name, exc)
            return
        gone = made.pop(name)
        log.info("node access: removed the node's path to PodNetwork %s (%s on %s)", name,
                 ", ".join(gone.addresses), gone.path["interface"])
        self._save(made)

    # --- the pods' API routes ---

    async def pod_routes(self, record: Record) -> None:
        """At ADD: routes to the API's addresses via the node, for a pod whose first network has
        API access (its only way out: an explicit list). A failure is logged; the pod runs."""
        first = record.attachments[0] if record.attachments else None
        if not record.explicit or first is None or not first.podnetwork:
            return
        made = self.made().get(first.podnetwork)
        if made is None or not made.api:
            return
        for address, hop in decide.via(made.addresses, self.api):
            prefix = "32" if decide.family(address) == 4 else "128"
            try:
                await ip(record.netns, "route", "replace", f"{address}/{prefix}", "via", hop, "dev",
                         first.ifname)
            except CommandFailed as exc:
                log.error("node access: container %s (pod %s/%s): no route to the API's %s: %s",
                          record.container_id, record.pod_namespace, record.pod_name, address, exc)


__all__ = ["STATE_FILE", "Made", "NodeAccess"]
