"""The CNI agent and its shim: this project's NPWG delegating plugin (spec section 2.4).

One room per concern, from the bottom up (docs/architecture.md "The agent"; the `agent` contract
of .importlinter orders them):

- `shim`: the shim the runtime executes, the compiled one, the protocol they share with the
  agent's server (it imports nothing: the installed shim carries its text), the readiness probe;
- `delegates`: executing delegate plugins (libcni's part): one exec, configuration lists, the
  runner, the containers' records on disk and their locks;
- `kube`: the agent's read/patch access to the cluster and its watch cache;
- `node` and `netns`: the agent on its node (settings, install, preflight, readiness); what it
  writes in a pod's namespace (rtnetlink, routes, nftables tables, the table reconciler);
- `pods`: network-status, live addresses, Events;
- `cni` beside `policy`, `services` and `access`: the plugin's ADD, DEL, CHECK and GC, and the
  per-pod features, each as `state`, `decide` (pure) and `apply`; none imports another;
- `daemon`: the composition (`Agent`), its unix-socket server, metrics, hot-plug and
  `podnetwork cni-agent`.
"""
