"""What ADD and DEL ask of the per-pod features, as protocols the features' appliers satisfy.

The plugin (`attachments`, `collector`) calls the features at fixed points of a container's life:
MultiNetworkPolicy's table is written before the runtime hears of the pod (fail closed), the
Services' ClusterIPs after the delegates answered (fail open), node access is settled after each
ADD and DEL. It knows them only by these protocols, so `cni` imports no feature and a feature
imports no part of the plugin (the `agent` contract in .importlinter); the daemon hands the
features in (`bridge.agent.daemon.agent.Agent`).
"""

from __future__ import annotations

from typing import Protocol

from bridge.agent.delegates.cache import Record
from bridge.agent.netns.local import Local
from podnetwork.ground.core import Pod


class PolicyTables(Protocol):
    """MultiNetworkPolicy in the pods' namespaces (`bridge.agent.policy.apply.Enforcer`)."""

    async def added(self, record: Record, pod: Pod, *, fail_closed: bool = True,
                    local: Local | None = None) -> None:
        """Write the container's table before the runtime hears of it; CNIError if it cannot."""

    async def attached(self, record: Record) -> None:
        """The delegates answered: the table follows the interfaces as recorded."""

    async def deleted(self, container_id: str, netns: str) -> None:
        """The container is gone: forget it, remove its table."""


class ServiceTables(Protocol):
    """The Services' ClusterIPs in the pods' namespaces (`bridge.agent.services.apply.ClusterIPs`)."""

    async def added(self, record: Record) -> None:
        """Write the container's Services' table and routes; a failure does not fail the ADD."""

    async def deleted(self, container_id: str, netns: str) -> None:
        """The container is gone: forget it, remove its table and routes."""


class NodePaths(Protocol):
    """The node's paths to the PodNetworks that ask for one (`bridge.agent.access.apply.NodeAccess`)."""

    def concerns(self, record: Record) -> bool:
        """Whether an ADD or DEL of this container may change the node's paths."""

    async def settle(self, why: str) -> None:
        """Reconcile the node's paths now; failures are logged and retried, never raised."""

    async def pod_routes(self, record: Record) -> None:
        """Route the pod's API addresses through its first network when that network asks."""

    def reservations(self) -> dict[str, list[dict[str, str]]]:
        """The IPAM reservations the node's paths hold, per network (kept by GC)."""
