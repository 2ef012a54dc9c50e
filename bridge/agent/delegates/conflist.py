"""Network configuration lists (CNI spec section 1 "Configuration format"), ready to execute.

A single plugin configuration is treated as a list of one. For each plugin call the
list's `name` and `cniVersion` are injected (NPWG spec 7.1), and `runtimeConfig` carries
only the capabilities that plugin declares (CNI CONVENTIONS "capabilities"):
`plugin_config`. Executing a list (section 3, "Execution of Network Configurations") is
the runner's (`bridge.agent.delegates.runner.Runner`), which holds the executor and the bin dirs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bridge.agent.delegates import invoke
from bridge.agent.delegates.invoke import CNIError, ErrorCode

#: Keys of a plugin configuration the runtime derives; never taken from the list's plugins.
_INJECTED = ("name", "cniVersion", "prevResult")


@dataclass(frozen=True)
class ConfList:
    """A validated configuration list, ready to execute."""

    name: str
    cni_version: str
    plugins: tuple[dict[str, Any], ...]
    disable_check: bool = False
    runtime_config: Mapping[str, Any] | None = None
    """List-level runtimeConfig, handed to each plugin per its declared capabilities."""
    disable_gc: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cniVersion": self.cni_version,
            "name": self.name,
            "plugins": [dict(p) for p in self.plugins],
        }
        if self.disable_check:
            out["disableCheck"] = True
        if self.runtime_config:
            out["runtimeConfig"] = dict(self.runtime_config)
        if self.disable_gc:
            out["disableGC"] = True
        return out


def chosen_version(conf: Mapping[str, Any], *, what: str = "network configuration") -> str:
    """The version a configuration runs at, as libcni chooses it: with CNI 1.1's
    `cniVersions`, the highest of those listed (and of `cniVersion`, when also given) that
    this agent speaks; versions newer than it speaks are skipped. Raises INVALID_CONFIG
    for a malformed version, INCOMPATIBLE_VERSION when `cniVersions` names none it speaks."""

    def bad(detail: str) -> CNIError:
        return CNIError(ErrorCode.INVALID_CONFIG, f"invalid {what}", detail)

    version = conf.get("cniVersion")
    if "cniVersion" in conf and (not isinstance(version, str) or not version):
        raise bad('"cniVersion" must be a version string such as "1.0.0"')
    if "cniVersions" not in conf:
        if not isinstance(version, str):
            raise bad('"cniVersion" (or CNI 1.1\'s "cniVersions") must give a version such as "1.0.0"')
        return version
    listed = conf["cniVersions"]
    if not isinstance(listed, list) or not all(isinstance(v, str) for v in listed):
        raise bad('"cniVersions" must be a list of version strings such as ["1.0.0", "1.1.0"]')
    candidates = [*listed, *([version] if isinstance(version, str) else [])]
    for v in candidates:
        parts = v.split(".")
        if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
            raise bad(f'"cniVersions": {v!r} is not a version such as "1.0.0"')
    newest = invoke.version_tuple(invoke.SUPPORTED_VERSIONS[-1])
    usable = [v for v in candidates if invoke.version_tuple(v) <= newest]
    if not usable:
        raise CNIError(
            ErrorCode.INCOMPATIBLE_VERSION,
            f"no version of \"cniVersions\" {candidates} in {what} is one this agent speaks",
            f"supported: {', '.join(invoke.SUPPORTED_VERSIONS)}",
        )
    return str(max(usable, key=invoke.version_tuple))


def load(conf: Any, *, what: str = "network configuration") -> ConfList:
    """A CNI configuration (single or list) -> ConfList, validating everything before any exec."""

    def bad(detail: str) -> CNIError:
        return CNIError(ErrorCode.INVALID_CONFIG, f"invalid {what}", detail)

    if not isinstance(conf, Mapping):
        raise bad("must be a JSON object")
    name = conf.get("name")
    if not isinstance(name, str) or not name:
        raise bad('"name" must be a non-empty string')
    version = chosen_version(conf, what=what)
    if invoke.version_tuple(version) > invoke.version_tuple(invoke.SUPPORTED_VERSIONS[-1]):
        raise CNIError(
            ErrorCode.INCOMPATIBLE_VERSION,
            f"unsupported cniVersion {version!r} in {what}",
            f"supported: {', '.join(invoke.SUPPORTED_VERSIONS)}",
        )
    disable_check, disable_gc = (conf.get(key, False) for key in ("disableCheck", "disableGC"))
    # Some runtimes accept the string "true"; the spec says boolean.
    if not isinstance(disable_check, bool):
        disable_check = str(disable_check).lower() == "true"
    if not isinstance(disable_gc, bool):
        disable_gc = str(disable_gc).lower() == "true"
    runtime_config = conf.get("runtimeConfig")
    if runtime_config is not None and not isinstance(runtime_config, Mapping):
        raise bad('"runtimeConfig" must be an object')
    if "plugins" in conf:
        plugins = conf["plugins"]
        if not isinstance(plugins, list) or not plugins:
            raise bad('"plugins" must be a non-empty list')
        for i, plugin in enumerate(plugins):
            if not isinstance(plugin, Mapping):
                raise bad(f"plugins[{i}] must be an object")
            try:
                invoke.check_plugin_type(plugin.get("type"))
            except CNIError as exc:
                raise bad(f"plugins[{i}].type: {exc.details}") from None
        return ConfList(
            name,
            version,
            tuple(copy.deepcopy(dict(p)) for p in plugins),
            disable_check,
            runtime_config,
            disable_gc,
        )
    try:
        invoke.check_plugin_type(conf.get("type"))
    except CNIError as exc:
        raise bad(f"type: {exc.details}") from None
    # A single configuration is its own only plugin; its own runtimeConfig stays in it.
    plugin = copy.deepcopy(dict(conf))
    return ConfList(name, version, (plugin,), disable_check, None, disable_gc)


def plugin_config(
    conflist: ConfList,
    plugin: Mapping[str, Any],
    prev_result: Mapping[str, Any] | None,
    runtime_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The configuration one plugin receives on stdin (CNI spec "Deriving execution configuration")."""
    conf = {k: copy.deepcopy(v) for k, v in plugin.items() if k not in _INJECTED}
    conf["name"] = conflist.name
    conf["cniVersion"] = conflist.cni_version
    if prev_result is not None:
        conf["prevResult"] = copy.deepcopy(dict(prev_result))
    offered = {**(conflist.runtime_config or {}), **(runtime_config or {})}
    capabilities = plugin.get("capabilities")
    if offered and isinstance(capabilities, Mapping):
        chosen = {k: v for k, v in offered.items() if capabilities.get(k) is True}
        if chosen:
            own = conf.get("runtimeConfig")
            conf["runtimeConfig"] = {**(own if isinstance(own, Mapping) else {}), **chosen}
    return conf


#: The key of a GC request's configuration that lists the attachments to keep (CNI 1.1).
VALID_ATTACHMENTS = "cni.dev/valid-attachments"
