"""What the agent reports about its pods: `reports` (network-status, live addresses, Warning Events),
its `publisher` (network-status off the critical path) and the `addresswatch` (live IP changes).

Imports `netns`, `node`, `kube`, `delegates`."""
