"""MultiNetworkPolicy on this node's pods, in three doors: `state` (what is kept of the cluster, no
I/O), `decide` (pure: which pods' tables change) and `apply` (the `Enforcer`: the tables written in the
pods' namespaces). The compiler is `bridge.policy`'s.

Imports `netns` and below; never `cni`, `services` or `access` (docs/architecture.md "Adding a
per-pod feature")."""
