"""The CNI agent and its shim: this project's NPWG delegating plugin (spec section 2.4).

Modules, from the bottom up:

- `invoke`: one CNI plugin execution (environment, plugin lookup, exec, result or error);
- `conflist`: network configuration lists (name/cniVersion injection, prevResult chains,
  DEL in reverse, CHECK gated on version);
- `cache`: what the agent attached, on disk, written before each delegate ADD;
- `objects`: the agent's read/patch access to the cluster, as a small async protocol;
- `plan`: the pure decision of which networks a pod gets, in which order, on which interface;
- `agent`: the delegating plugin itself (ADD/DEL/CHECK), `server`: its unix-socket HTTP API;
- `shim`: the tiny CNI plugin executable that forwards a runtime's request to the agent;
- `command`: `podnetwork cni-agent`.
"""
