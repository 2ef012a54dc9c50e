"""Every attachment of an ADD, resolved and checked before the first plugin runs.

The cluster default network first (NPWG 6.2, `defaultnet`), then each selected network
(`selection`) on its interface (`plan.interface_names`, 4.2.1), its delegate configuration made
from its NAD (`bridge.npwg.delegate_config`: 3.4, 4.1.2.1, 7.5), and every plugin it names
present in a bin dir. A pod whose KEP networks leave out `default` gets exactly those (KEP-3698:
the list is explicit): the first on the runtime's interface, with the runtime's `runtimeConfig`,
in place of the cluster default network (`plan.placements`). The pure decisions are
`bridge.agent.cni.plan`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bridge import npwg, translate
from bridge.agent.cni import claims, plan, selection
from bridge.agent.cni.defaultnet import DefaultNetwork
from bridge.agent.cni.request import Request
from bridge.agent.cni.selection import Selected
from bridge.agent.delegates import conflist
from bridge.agent.delegates.invoke import CNIError, ErrorCode
from bridge.agent.delegates.runner import Runner
from bridge.agent.kube.objects import NotFound, ObjectSource
from bridge.agent.node.settings import PLUGIN_TYPE, AgentConfig
from bridge.dracontract import prepared
from podnetwork.ground.core import Pod

log = logging.getLogger(__name__)


class Planner:
    """Plans the attachments of one agent's ADDs and hot-plugs."""

    def __init__(self, objects: ObjectSource, config: AgentConfig, runner: Runner,
                 default: DefaultNetwork) -> None:
        self.objects = objects
        self.config = config
        self.runner = runner
        self.default = default
        self.claims = prepared.Records(config.dra_state_dir) if config.dra_state_dir is not None else None
        """The DRA driver's records of prepared claims (`claims`); None: claims are not read."""

    async def selection(self, pod: Pod) -> selection.Selected:
        """The pod's selected networks in order, and whether they are explicit: its recorded
        claims' (`claims`), else its annotations' (`selection`)."""
        if self.claims is not None:
            by_claims = await claims.selected(self.objects, pod, self.claims, self.config.dra_driver)
            if by_claims is not None:
                return by_claims
        return await selection.of(self.objects, pod)

    async def attachments(self, request: Request, pod: Pod) -> tuple[list[plan.Planned], Selected]:
        """Every attachment of this ADD, resolved and validated before anything executes, and
        the selection they come from (`Selected.explicit`: no cluster default network)."""
        selected = await self.selection(pod)
        elements = selected.elements
        placements = plan.placements(request.args.ifname, [e.interface for e in elements],
                                     explicit=selected.explicit)
        planned: list[plan.Planned] = []
        podnetworks: list[str | None] = [s.pod_network for s in selected.sources] or [None] * len(elements)
        for index, ifname in placements:
            if index is None:
                default_name, default_config = await self.default.resolve(request.runtime_config)
                planned.append(plan.Planned(default_name, ifname, default_config, default=True))
            elif selected.explicit and index == 0:
                planned.append(await self.selected(elements[0], ifname, primary=request.runtime_config,
                                                   podnetwork=podnetworks[0]))
                if elements[0].interface not in (None, ifname):
                    log.warning("pod %s/%s: %s is its first network, on the runtime's interface %s; its "
                                "interface name %r is not applied", pod.metadata.namespace, pod.metadata.name,
                                elements[0].ref, ifname, elements[0].interface)
            else:
                planned.append(await self.selected(elements[index], ifname, podnetwork=podnetworks[index]))
        for p in planned:  # all configs valid and all plugins present, before the first exec
            self.check(p)
        return planned, selected

    async def selected(self, element: npwg.NetworkSelectionElement, ifname: str, *,
                       primary: Mapping[str, Any] | None = None,
                       podnetwork: str | None = None) -> plan.Planned:
        """One selected network's attachment as `ifname`, resolved from its NAD (4.1.2.1, 3.4).

        `primary`: this network takes the runtime's interface (the first of an explicit list),
        and gets what the runtime passed in `runtimeConfig` (portMappings, ...; 7.5 gives it to
        the network holding the pod's interface) for the capabilities its plugins declare."""
        try:
            nad = await self.objects.get_nad(element.namespace, element.name)
        except NotFound:
            raise CNIError(
                ErrorCode.DELEGATION_FAILED,
                f"NetworkAttachmentDefinition {element.ref} not found",
                "the pod selects it in k8s.v1.cni.cncf.io/networks; create it or fix the selection",
            ) from None
        try:
            config = npwg.delegate_config(
                element, element.name, element.namespace, nad.spec.config, self.config.conf_dir,
                is_default=primary is not None, k8s_runtime_config=primary,
            )
        except npwg.DelegationError as exc:
            raise CNIError(
                ErrorCode.DELEGATION_FAILED, f"cannot attach {element.ref}", str(exc)
            ) from None
        route = tuple(element.default_route) if element.default_route is not None else None
        families = (
            plan.route_families(element.extensions.get(translate.DEFAULT_ROUTE_FAMILIES_KEY))
            if route is not None
            else None
        )
        return plan.Planned(
            element.ref,
            ifname,
            config,
            default=primary is not None,
            default_route=route,
            default_route_families=families,
            podnetwork=podnetwork,
        )

    def check(self, p: plan.Planned) -> None:
        """A planned attachment's configuration loads and its plugins are installed; CNIError if not."""
        loaded = conflist.load(p.config, what=f"network {p.name!r}")
        if any(plugin.get("type") == PLUGIN_TYPE for plugin in loaded.plugins):
            # The agent's own shim as a delegate would call back into this ADD and wait
            # for the container's lock it holds; killed by the timeout, it would still
            # run later as an ADD of its own that nothing deletes.
            raise CNIError(
                ErrorCode.DELEGATION_FAILED,
                f"cannot attach {p.name}: its plugin {PLUGIN_TYPE!r} is this agent itself",
                "a network's configuration must name the plugins to run (bridge, macvlan, ...), "
                f"not the {PLUGIN_TYPE!r} shim",
            )
        self.runner.resolve(loaded)


__all__ = ["Planner"]
