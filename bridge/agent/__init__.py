"""The CNI agent and its shim: this project's NPWG delegating plugin (spec section 2.4).

Modules, from the bottom up (docs/architecture.md "The agent"):

- `protocol`: the shim <-> agent protocol, defined once (it imports nothing: the installed
  shim carries its text, the compiled shim its constants);
- `invoke`: one CNI plugin execution; `conflist`: network configuration lists;
- `cache` and `records`: what the agent attached, on disk, written before each delegate ADD,
  and who may touch a container now; `runner`: the delegates of one attachment (libcni's
  `CNIConfig`);
- `objects`: the agent's read/patch access to the cluster; `defaultnet`, `selection`, `plan`,
  `planner`: which networks a pod gets, in which order, on which interface;
- `attachments` (ADD, DEL, CHECK), `collector` (GC), `reports` (network-status, live
  addresses, Events), composed by `agent`; `server`: its unix-socket HTTP API;
- `shim`: the tiny CNI plugin executable that forwards a runtime's request to the agent;
  `install`: putting the shim and the agent's conflist on the node;
- `command`: `podnetwork cni-agent`.
"""
