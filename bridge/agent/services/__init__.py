"""Services' ClusterIPs in this node's pods, in three doors: `state` (what is kept of the cluster,
no I/O), `decide` (pure: which pods' tables and routes change) and `apply` (the `ClusterIPs`
reconciler). The compiler is `bridge.services`'s.

Imports `netns` and below; never `cni`, `policy` or `access`."""
