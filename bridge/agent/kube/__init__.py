"""The agent's access to the cluster: `objects` (read by name, patch a pod, post an Event) and
`watchcache` (list + watch per kind, and the `KeptKinds` listener the features' states share).

Imports `delegates` (errors are CNI errors) and nothing above."""
