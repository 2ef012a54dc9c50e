"""The cluster default network, found (NPWG 6): the network every pod attaches first.

In this order: `--default-network-conf`; else the `default` PodNetwork's
NetworkAttachmentDefinition when this bridge provides it (through `bridge.translate`); else the
node's own network, the CNI configuration the runtime would run without the agent
(`node_default_file`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge import npwg, translate
from bridge.agent.cni import selection
from bridge.agent.delegates import conflist, invoke
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.delegates.runner import Runner
from bridge.agent.kube.objects import NotFound, ObjectSource
from bridge.agent.node.install import default_version
from bridge.agent.node.settings import PLUGIN_TYPE, AgentConfig
from podnetwork.ground import constants

#: The files libcni (and so the runtimes) read CNI configurations from, in lexical order.
CONF_EXTENSIONS = (".conf", ".conflist", ".json")


def node_default_file(conf_dir: Path, own: Path | None) -> tuple[Path, str] | None:
    """(path, text) of the CNI configuration the runtime would run without the agent: the first
    file of `conf_dir` in lexical order with a CNI extension, other than `own` (the agent's conflist)
    and any other configuration of the agent's shim. A file that cannot be read as JSON is returned
    as it is (the runtime would pick it too, and fail on it): loading it names it."""
    try:
        names = sorted(e.name for e in os.scandir(conf_dir) if e.name.endswith(CONF_EXTENSIONS))
    except OSError:
        return None
    for name in names:
        path = conf_dir / name
        if own is not None and path == own:
            continue
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue  # a directory, or gone since the listing
        with contextlib.suppress(ValueError, RecursionError):
            parsed = json.loads(text)
            plugins = parsed.get("plugins") if isinstance(parsed, dict) and "plugins" in parsed else [parsed]
            if isinstance(plugins, list) and any(isinstance(p, dict) and p.get("type") == PLUGIN_TYPE
                                                 for p in plugins):
                continue  # the agent's shim: it would delegate to itself
        return path, text
    return None


def from_text(text: str, source: str, k8s_runtime_config: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(status name, delegate config) of a default network given as CNI configuration text."""
    try:
        parsed = npwg.load_cni_config(text, f"default network {source}")
        name = str(parsed.get("name") or "default")
        config = npwg.delegate_config(
            None, name, "", text, None, is_default=True, k8s_runtime_config=k8s_runtime_config
        )
    except npwg.DelegationError as exc:
        raise CNIError(
            ErrorCode.INVALID_CONFIG, "invalid default network configuration", str(exc)
        ) from None
    return name, config


class DefaultNetwork:
    """Finds the cluster default network for each ADD, and says whether it is usable (6.1)."""

    def __init__(self, objects: ObjectSource, config: AgentConfig, runner: Runner) -> None:
        self.objects = objects
        self.config = config
        self.runner = runner

    async def resolve(self, k8s_runtime_config: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """(status name, delegate config) of the cluster default network (module docstring)."""
        source = self.config.default_network
        if source is None:
            return await self._from_podnetwork(k8s_runtime_config)
        if isinstance(source, Path):
            try:
                text = source.read_text()
            except OSError as exc:
                raise CNIError(
                    ErrorCode.INVALID_CONFIG, "cannot read the default network configuration", str(exc)
                ) from None
            except UnicodeDecodeError as exc:
                raise CNIError(
                    ErrorCode.INVALID_CONFIG, "cannot read the default network configuration",
                    f"{source}: not UTF-8 text (byte {exc.start}); save it as UTF-8",
                ) from None
            return from_text(text, str(source), k8s_runtime_config)
        return from_text(json.dumps(dict(source)), str(source), k8s_runtime_config)

    async def problem(self) -> str | None:
        """Why the default network is not usable now, or None when a pod could attach to it."""
        try:
            name, config = await self.resolve({})
            self.runner.resolve(conflist.load(config, what=f"default network {name!r}"))
        except CNIError as exc:
            return str(exc)
        version = default_version(config)
        if version not in invoke.SUPPORTED_VERSIONS:
            # The agent's conflist speaks the default network's version (install.own_conflist), and
            # parse_request refuses a version it does not speak: every pod would fail.
            return (
                f"the default network {name!r} has cniVersion {version!r}, which this agent does not speak "
                f"(it speaks {', '.join(invoke.SUPPORTED_VERSIONS)}); set the cniVersion of the default "
                "network's configuration (--default-network-conf or the default PodNetwork's "
                "NetworkAttachmentDefinition) to one of those that its plugins also support"
            )
        return None

    def _from_node(
        self, podnetwork: translate.PodNetwork, k8s_runtime_config: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """The network the node had before the agent: the runtime's choice without the agent's conflist."""
        found = node_default_file(self.config.conf_dir, self.config.conf_file)
        if found is None:
            provider = f"provider {podnetwork.spec.provider}" if podnetwork.spec.provider else "no provider"
            raise CNIError(
                ErrorCode.INVALID_CONFIG,
                "no cluster default network on this node",
                f"the PodNetwork {constants.DEFAULT_PODNETWORK!r} ({provider}) "
                f"is the network the node was installed with, and {self.config.conf_dir} holds no CNI "
                "configuration (.conf, .conflist, .json) other than this agent's: install the cluster's "
                "network plugin first (it writes its configuration there), or give --default-network-conf "
                f"FILE, or create {constants.DEFAULT_PODNETWORK!r} with provider {constants.BRIDGE_PROVIDER} "
                "and one "
                "NetworkAttachmentDefinition (docs/deploy.md \"The cluster default network\")",
            )
        path, text = found
        return from_text(text, str(path), k8s_runtime_config)

    async def _from_podnetwork(self, k8s_runtime_config: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """The `default` PodNetwork's NetworkAttachmentDefinition, through the translation."""
        try:
            podnetwork = await self.objects.get_podnetwork(constants.DEFAULT_PODNETWORK)
        except NotFound:
            raise CNIError(
                ErrorCode.INVALID_CONFIG,
                "no cluster default network",
                f"the PodNetwork {constants.DEFAULT_PODNETWORK!r} does not exist: `podnetwork controller` "
                "creates it "
                "(KEP \"Default PodNetwork\"; deploy/controller), or create it yourself; or give "
                "--default-network-conf FILE",
            ) from None
        if not translate.is_bridge(podnetwork):
            # Another provider, or none (as the controller creates it): the network the cluster
            # was installed with, which the node's own CNI configuration runs (KEP "Default PodNetwork").
            return self._from_node(podnetwork, k8s_runtime_config)
        found = selection.Found(self.objects)
        await found.follow_refs(podnetwork)
        try:
            (namespace, name), nad = translate.podnetwork_nad(podnetwork, found.objects())
            config = npwg.delegate_config(
                None,
                name,
                namespace,
                nad.spec.config,
                self.config.conf_dir,
                is_default=True,
                k8s_runtime_config=k8s_runtime_config,
            )
        except (translate.TranslationError, npwg.DelegationError) as exc:
            raise CNIError(
                ErrorCode.INVALID_CONFIG, "the cluster default network is unusable", str(exc)
            ) from None
        return npwg.nad_ref(namespace, name), config


__all__ = ["CONF_EXTENSIONS", "DefaultNetwork", "from_text", "node_default_file"]
