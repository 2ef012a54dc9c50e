"""The runner of delegate plugins: what libcni's `CNIConfig` is to a runtime, for this agent.

One object holds what every plugin call needs (the executor, the bin dirs, the time a plugin
may take) and the containers' records (`records.Records`, as libcni holds its cache dir), and
runs one attachment:

- `add` records the attachment's intent in the container's record, then runs its
  configuration list's ADD; the attachment is then ATTACHED with its result, or FAILED;
- `delete` and `check` hand each plugin the attachment's cached result (`prevResult`);
- `gc` tells a list's plugins which attachments to keep (CNI 1.1).

`add_list`, `delete_list` and `check_list` run a configuration list for one
[container, interface] as the CNI spec's section 3 says: `name` and `cniVersion` injected
(`conflist.plugin_config`), ADD chaining `prevResult` forward, DEL in reverse with the cached
result (0.4.0+), CHECK only for 0.4.0 and later and not with `disableCheck`, GC only for 1.1.0
and later and not with `disableGC`. One plugin call is `invoke.call`. Every delegate runs
marked as this agent's (`orphans.Marking`), so that a later agent process can find one this
process left running (`stop_orphans`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from bridge.agent.delegates import invoke, orphans
from bridge.agent.delegates.cache import Attachment, Record, State
from bridge.agent.delegates.conflist import VALID_ATTACHMENTS, ConfList, load, plugin_config
from bridge.agent.delegates.invoke import CNIError, Command, ErrorCode, RuntimeArgs
from bridge.agent.delegates.records import Records

#: Times a named span of a request (`request.Phases.timed`).
Timer = Callable[[str], AbstractContextManager[Any]]


class Runner:
    """Runs the delegates of one agent's attachments (see the module docstring)."""

    def __init__(self, executor: invoke.Exec, bin_dirs: Sequence[Path], timeout: float,
                 records: Records) -> None:
        self.bin_dirs = tuple(bin_dirs)
        self.timeout = timeout
        """Seconds one plugin call may take before it is killed (CNI error 100)."""
        self.records = records
        self.owner = os.path.abspath(records.cache.directory)
        """Marks this agent's delegates (`orphans`): its cache dir, which no other agent shares."""
        self.executor: invoke.Exec = orphans.Marking(executor, self.owner)
        """Every plugin call goes through it; a wrapper may replace it (metrics, tests)."""

    # --- configuration lists ---

    @staticmethod
    def load(config: Any, name: str) -> ConfList:
        """The configuration list of network `name`, validated; CNIError 7 (or 1) if it cannot run."""
        return load(config, what=f"network {name!r}")

    def resolve(self, conflist: ConfList) -> None:
        """Fails before anything runs if any plugin of the list is missing from the bin dirs."""
        for plugin in conflist.plugins:
            invoke.find_plugin(plugin.get("type"), self.bin_dirs)

    async def _call(self, plugin: Mapping[str, Any], conf: Mapping[str, Any],
                    args: RuntimeArgs) -> dict[str, Any] | None:
        return await invoke.call(self.executor, plugin.get("type"), conf, args, self.bin_dirs, self.timeout)

    async def add_list(self, conflist: ConfList, args: RuntimeArgs,
                       runtime_config: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """ADD through the list, each plugin getting the previous one's result; the last result."""
        self.resolve(conflist)
        args = args.with_command(Command.ADD)
        prev: dict[str, Any] | None = None
        for plugin in conflist.plugins:
            prev = await self._call(plugin, plugin_config(conflist, plugin, prev, runtime_config), args)
        return prev

    async def delete_list(self, conflist: ConfList, args: RuntimeArgs, prev_result: Mapping[str, Any] | None,
                          runtime_config: Mapping[str, Any] | None = None) -> None:
        """DEL through the list in reverse, each plugin getting the cached ADD result (0.4.0+)."""
        args = args.with_command(Command.DEL)
        if invoke.version_tuple(conflist.cni_version) < (0, 4, 0):
            prev_result = None
        for plugin in reversed(conflist.plugins):
            await self._call(plugin, plugin_config(conflist, plugin, prev_result, runtime_config), args)

    async def check_list(self, conflist: ConfList, args: RuntimeArgs, prev_result: Mapping[str, Any] | None,
                         runtime_config: Mapping[str, Any] | None = None) -> bool:
        """CHECK through the list in order; False when skipped (`disableCheck`).

        Raises CNIError code 1 for lists older than 0.4.0, which have no CHECK.
        """
        if invoke.version_tuple(conflist.cni_version) < (0, 4, 0):
            raise CNIError(
                ErrorCode.INCOMPATIBLE_VERSION,
                f"network {conflist.name!r} has cniVersion {conflist.cni_version}, which has no CHECK",
                "CHECK needs cniVersion 0.4.0 or later",
            )
        if conflist.disable_check:
            return False
        self.resolve(conflist)
        args = args.with_command(Command.CHECK)
        for plugin in conflist.plugins:
            await self._call(plugin, plugin_config(conflist, plugin, prev_result, runtime_config), args)
        return True

    async def gc(self, conflist: ConfList, valid: Sequence[Mapping[str, str]]) -> bool:
        """GC through the list in order, each plugin told the attachments to keep (CNI spec 1.1 "GC").

        False when skipped: lists older than 1.1.0 have no GC, and `disableGC` turns it off.
        Every plugin is called even when one fails; then a CNIError names each failure.
        """
        if invoke.version_tuple(conflist.cni_version) < (1, 1, 0) or conflist.disable_gc:
            return False
        args = RuntimeArgs(Command.GC)
        problems: list[str] = []
        for plugin in conflist.plugins:
            conf = plugin_config(conflist, plugin, None)
            conf[VALID_ATTACHMENTS] = [dict(v) for v in valid]
            try:
                await self._call(plugin, conf, args)
            except CNIError as exc:
                problems.append(f"{plugin.get('type')}: {exc}")
        if problems:
            raise CNIError(
                ErrorCode.PLUGIN_FAILED, f"GC failed in network {conflist.name!r}", "; ".join(problems)
            )
        return True

    # --- one attachment ---

    async def add(self, record: Record, attachment: Attachment, args: RuntimeArgs,
                  timed: Timer | None = None) -> None:
        """Appends `attachment` to the container's record and saves it (the intent, before the
        delegate runs), then ADDs it as `args` (CNI_IFNAME the attachment's). ATTACHED with its
        result (saved with the next write of the record), or FAILED and the CNIError raised.
        `timed(name)`, when given, times the record's write (`cache`) and the delegates' run."""
        record.attachments.append(attachment)
        with _span(timed, "cache"):
            self.records.save(record)
        try:
            with _span(timed, f"exec {attachment.ifname}"):
                attachment.result = await self.add_list(self.load(attachment.config, attachment.name),
                                                         args.with_ifname(attachment.ifname))
        except CNIError:
            attachment.state = State.FAILED
            raise
        attachment.state = State.ATTACHED

    async def delete(self, record: Record, attachment: Attachment, args: RuntimeArgs) -> None:
        """DELs the attachment with its cached result, then drops it from the record (not saved:
        a DEL retried after a crash repeats DELs the CNI spec requires plugins to accept)."""
        await self.delete_list(self.load(attachment.config, attachment.name),
                               args.with_ifname(attachment.ifname), attachment.result)
        record.attachments.remove(attachment)

    async def check(self, attachment: Attachment, args: RuntimeArgs) -> bool:
        """CHECKs the attachment with its cached result; False when its list has no CHECK to ask
        (older than 0.4.0, or `disableCheck`)."""
        conflist = self.load(attachment.config, attachment.name)
        if invoke.version_tuple(conflist.cni_version) < (0, 4, 0):
            return False
        return await self.check_list(conflist, args.with_ifname(attachment.ifname), attachment.result)

    async def stop_orphans(self, container_id: str) -> None:
        """Unless this process wrote the container's record, stops the delegates an earlier
        agent process left running for it: a DEL must not run, let alone succeed, while a
        delegate ADD may still be creating what it removes. CNI error 11 if they outlive SIGKILL."""
        if not self.records.wrote(container_id):
            await orphans.stop(self.owner, container_id)


def _span(timed: Timer | None, name: str) -> AbstractContextManager[Any]:
    return contextlib.nullcontext() if timed is None else timed(name)


__all__ = ["Runner"]
