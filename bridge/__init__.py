"""The NPWG layer: PodNetworks on any Network Plumbing WG implementation.

One package per product, each imported by its parts (`from bridge import npwg, translate`):

- `npwg`: the NPWG multi-net spec v1.3 as a library (names, selection, delegation,
  status); of this project it uses only the shared name rules.
- `translate`: KEP networks -> NPWG selection, `parametersRefs`, ParamsReady, pod IPs;
  the only package of this layer that knows PodNetworks.
- `operator`: `podnetwork bridge`: the kopf handlers, the pod webhook, what it writes on pods.
- `agent`: `podnetwork cni-agent`: the CNI agent and its shim, an NPWG delegating plugin.
- `migrate`: `podnetwork migrate`: NPWG annotations -> PodNetwork objects.

Operator, agent and migrate stand on translate, which stands on npwg (`.importlinter`).
Nothing is imported here, so `import bridge.npwg` stays free of the KEP layer.
"""
