"""Node access and API access per PodNetwork (KEP-3698 Phase II requirements 19-21), in three doors:
`state` (the node's paths as the agent made them, on disk), `decide` (pure: the switches, the node's
path per NAD type, the node's table) and `apply` (`NodeAccess`: the paths reconciled in the node's
namespace, the pods' API routes).

Imports `netns`, `node` and below; never `cni`, `policy` or `services`."""
