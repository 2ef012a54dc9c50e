"""CNI Delegating Plugin Requirements (3.4, 4.1.2.1.x.2, 7.5).

`delegate_config` gives the CNI configuration a delegating plugin executes for one
attachment; `DelegationError` when the spec says the request must fail.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.npwg.names import CAPABILITIES, DEFAULT_BURST_BITS, SECTIONS
from bridge.npwg.selection import ELEMENT_ATTRIBUTES, NetworkSelectionElement


class DelegationError(ValueError):
    """The delegating plugin must fail this attachment (3.4.1 rule 4, 4.1.2.1.x.2)."""


# --- Delegation (3.4, 4.1.2.1.x.2, 7.5) ----------------------------------------------------


def plugins_of(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The plugin configurations of a CNI config list, or `[config]` for a single config."""
    if "plugins" in config:
        return list(config["plugins"])
    return [dict(config)]


def load_cni_config(text: str, source: str) -> dict[str, Any]:
    """Parse and check a CNI configuration or configuration list.

    Checks what a delegating plugin needs before executing anything: JSON object;
    a list has a non-empty `plugins` list of objects; every plugin `type` is a bare
    executable name (no `/`, not `.`/`..`), since it becomes a path under CNI_PATH.
    Raises `DelegationError` whose message starts with `source`.
    """
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise DelegationError(f"{source}: CNI configuration is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise DelegationError(f"{source}: CNI configuration must be a JSON object")
    if "plugins" in config:
        plugins = config["plugins"]
        if not isinstance(plugins, list) or not plugins:
            raise DelegationError(f"{source}: \"plugins\" must be a non-empty list")
    else:
        plugins = [config]
    for i, plugin in enumerate(plugins):
        where = f"{source}: plugins[{i}]" if "plugins" in config else source
        if not isinstance(plugin, dict):
            raise DelegationError(f"{where}: must be a JSON object")
        ptype = plugin.get("type")
        if not isinstance(ptype, str) or not ptype:
            raise DelegationError(f"{where}: \"type\" must name a CNI plugin")
        if "/" in ptype or "\\" in ptype or "\0" in ptype or ptype in (".", ".."):
            raise DelegationError(
                f"{where}: plugin type {ptype!r} must be a bare executable name found in CNI_PATH"
            )
    for key in ("name", "cniVersion"):
        if key in config and not isinstance(config[key], str):
            raise DelegationError(f"{source}: {key!r} must be a string")
    versions = config.get("cniVersions")
    if "cniVersions" in config and (
        not isinstance(versions, list) or not all(isinstance(v, str) for v in versions)
    ):
        # CNI 1.1 "cniVersions": the runtime picks the highest it supports (libcni does).
        raise DelegationError(f"{source}: \"cniVersions\" must be a list of version strings")
    return config


def _from_disk(nad_name: str, conf_dir: Path) -> dict[str, Any] | None:
    """3.4.1 rules 2 and 3: a config list, then a single config, whose `name` matches."""
    if not conf_dir.is_dir():
        return None
    files = sorted(p for p in conf_dir.iterdir() if p.is_file())
    for suffixes in ((".conflist",), (".conf", ".json")):
        for path in files:
            if path.suffix not in suffixes:
                continue
            try:
                config = load_cni_config(path.read_text(encoding="utf-8"), str(path))
            except (OSError, UnicodeDecodeError, DelegationError):
                continue  # a broken file of another network must not hide ours
            if config.get("name") == nad_name and (("plugins" in config) == (suffixes == (".conflist",))):
                return config
    return None


def _runtime_value(key: str, value: Any) -> Any:
    """The runtimeConfig form of a selection value (CNI CONVENTIONS.md)."""
    if key == "portMappings":
        return [
            {**pm, "protocol": str(pm.get("protocol", "tcp")).lower()} for pm in value
        ]
    if key == "bandwidth":
        out = dict(value)
        for direction in ("ingress", "egress"):
            if f"{direction}Rate" in out and f"{direction}Burst" not in out:
                out[f"{direction}Burst"] = DEFAULT_BURST_BITS
        return out
    return value


def _declares(plugin: Mapping[str, Any], capability: str) -> bool:
    caps = plugin.get("capabilities")
    return isinstance(caps, dict) and caps.get(capability) is True


def delegate_config(
    element: NetworkSelectionElement | None,
    nad_name: str,
    nad_namespace: str,
    nad_config: str | None,
    cni_conf_dir: str | Path | None,
    *,
    is_default: bool = False,
    k8s_runtime_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The CNI configuration to execute for one attachment (3.4, 4.1.2.1.x.2, 7.5).

    Source, by 3.4.1's order: `nad_config` (the NAD's `spec.config`, when non-blank);
    else a `.conflist` in `cni_conf_dir` whose `name` is `nad_name`; else a `.conf` or
    `.json` there whose `name` is `nad_name`; else `DelegationError`. A missing or
    empty `name` is injected as `nad_name` (3.4.2).

    The result is a single config or a config list, shaped as found, with per-plugin
    additions applied the way libcni applies capability arguments: each plugin
    gets `runtimeConfig` entries only for the capabilities it declares
    (`"capabilities": {"ips": true}`). The element's `ips`, `mac`, `portMappings`,
    `bandwidth` (rate-only gets a burst of `DEFAULT_BURST_BITS`) and
    `infiniband-guid` (as `infinibandGUID`) require some plugin to declare the
    capability, else `DelegationError` naming it. `cni-args` go into each plugin's
    `args.cni`, the annotation's values winning over the NAD's (4.1.2.1.6.2).
    `k8s_runtime_config` (what the runtime passed the delegating plugin) reaches
    the plugins only when `is_default` (7.5); undeclared keys of it are dropped.
    `interface` (CNI_IFNAME), `default-route` and `ipam-claim-reference` are the
    caller's business: they are not CNI configuration.
    """
    source = f"NetworkAttachmentDefinition {nad_namespace}/{nad_name}"
    config: dict[str, Any] | None
    if nad_config is not None and nad_config.strip():
        config = load_cni_config(nad_config, f"{source} spec.config")
    else:
        config = _from_disk(nad_name, Path(cni_conf_dir)) if cni_conf_dir is not None else None
        if config is None:
            raise DelegationError(
                f"{source} has no spec.config and no CNI .conflist/.conf/.json file named "
                f"{nad_name!r} exists in {cni_conf_dir} (NPWG multi-net spec 3.4.1)"
            )
    config = json.loads(json.dumps(config))  # a private copy we may change
    if not config.get("name"):
        config["name"] = nad_name  # 3.4.2: an empty name is as good as none
    is_list = "plugins" in config
    plugins: list[dict[str, Any]] = config["plugins"] if is_list else [config]

    wanted: dict[str, Any] = {}  # capability -> runtimeConfig value
    if is_default and k8s_runtime_config:
        wanted.update(k8s_runtime_config)
    required: list[tuple[str, str]] = []  # (selection key, capability)
    if element is not None:
        for key, capability in CAPABILITIES.items():
            value = getattr(element, ELEMENT_ATTRIBUTES[key])
            if value is not None:
                wanted[capability] = _runtime_value(key, value)
                required.append((key, capability))
    for key, capability in required:
        if not any(_declares(p, capability) for p in plugins):
            raise DelegationError(
                f"{source}: the selection sets {key!r} but no plugin declares the "
                f"{capability!r} capability (\"capabilities\": {{\"{capability}\": true}}); "
                f"NPWG multi-net spec {SECTIONS[key]}.2"
            )
    for plugin in plugins:
        runtime = {cap: value for cap, value in wanted.items() if _declares(plugin, cap)}
        if runtime:  # why `or {}`: a CNI configuration is JSON handed on as it is, unknown keys and all
            plugin["runtimeConfig"] = {**(plugin.get("runtimeConfig") or {}), **runtime}
        if element is not None and element.cni_args:
            args = plugin.get("args", {})
            if not isinstance(args, dict) or not isinstance(args.get("cni", {}), dict):
                raise DelegationError(
                    f"{source}: the selection sets 'cni-args' but the configuration's \"args\" "
                    "(and its \"cni\") must be JSON objects to merge them into (CNI CONVENTIONS; "
                    "NPWG multi-net spec 4.1.2.1.6.2)"
                )
            args = dict(args)
            args["cni"] = {**(args.get("cni") or {}), **element.cni_args}  # why: as runtimeConfig above
            plugin["args"] = args
    return config


__all__ = [
    "DelegationError",
    "delegate_config",
    "load_cni_config",
    "plugins_of",
]
