"""`podnetwork dra-driver`: a DRA driver for PodNetworks, run on each node as a kubelet plugin.

- `names`: the driver's names on the wire (driver, attributes, sockets, device and slice names);
- `slices`: which devices a node offers and the ResourceSlice writes that publish them (pure);
- `claims`: which of a claim's allocated devices are this driver's on this node (pure);
- `state`: the prepared claims on disk; `classes`: the DeviceClass and claim templates (pure);
- `plugin`: GetInfo and NodePrepareResources/NodeUnprepareResources; `wire`: those services on
  unix sockets (grpc.aio), and the kubelet's side of them; `protos`: their messages;
- `publisher`: the watches and the writer of the node's slices; `command`: the subcommand;
- `views`: the parts of served ResourceClaims, ResourceSlices and Pods the driver reads, typed.

docs/dra.md ("The DRA driver").
"""
