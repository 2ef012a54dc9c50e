"""`podnetwork export-dra`: PodNetworks and their workloads as Dynamic Resource Allocation objects.

- `objects`: the DRA `resource.k8s.io/v1` objects and the drivers' parameters, as models;
- `export`: the pure mapping, an inventory of objects in, DeviceClasses,
  ResourceClaimTemplates, rewritten workloads, KEP-4817 networkData and what cannot
  be expressed out;
- `command`: the subcommand (files or a cluster in, YAML out).

A product of the bridge beside `operator`, `agent` and `migrate`: it reads
PodNetworks through `bridge.translate`, as they do, because a network's devices
and parameters are in its NPWG NetworkAttachmentDefinition. docs/dra.md.
"""
