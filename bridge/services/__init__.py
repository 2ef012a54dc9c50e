"""Services on PodNetworks (KEP-3698 Phase III req 22), the client's half: the pure decisions.

- `model`: the typed inputs (a Service on a network, its endpoints, a client pod);
- `views`: the edge's readers of Service and EndpointSlice objects into those types;
- `dnat`: the compiler of one client pod's table `inet podnetwork_services` (libnftables
  JSON) and of the routes that send each ClusterIP through its network's interface;
- `changes`: from one compiled table to another, the few commands that change it in place.

Nothing here does I/O: the agent's edge builds the inputs, calls `dnat.compile_pod` per local
pod and hands the result to `bridge.agent.netns.clusterips.apply` (the first time) or `update`
(with `changes.changes(old, new)`, after). docs/services.md ("In the pods")
is the user's side.
"""

from __future__ import annotations

from bridge.services.dnat import Route, Ruleset, compile_pod
from bridge.services.model import (
    Address,
    Attachment,
    ClientPod,
    Endpoint,
    EndpointPort,
    Protocol,
    Service,
    ServicePort,
    SessionAffinity,
    attachment,
)

__all__ = [
    "Address",
    "Attachment",
    "ClientPod",
    "Endpoint",
    "EndpointPort",
    "Protocol",
    "Route",
    "Ruleset",
    "Service",
    "ServicePort",
    "SessionAffinity",
    "attachment",
    "compile_pod",
]
