"""What the agent writes in a pod's network namespace, for any feature: rtnetlink (`netlink`), the
default-route moves (`routes`), our nftables tables (`nftables`), the Services' table and routes
(`clusterips`), one local container as the decisions see it (`local`), and the loop that keeps one
table per container to what a pure decision says (`reconciler`).

Imports `kube`, `delegates`, and the compilers of `bridge.policy` and `bridge.services`."""
