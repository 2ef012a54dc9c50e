"""The NPWG layer: PodNetworks on any Network Plumbing WG implementation.

Modules, imported as modules (`from bridge import npwg, translate`):

- `npwg`: the NPWG multi-net spec v1.3 as a library; imports nothing of this project.
- `translate`: KEP networks -> NPWG selection; the only module that knows PodNetworks.
- `params`, `podips`, `pods`: pure decisions (ParamsReady, pod IPs, what to write on a pod).
- `controller`, `command`: the kopf handlers and `podnetwork bridge`.
- `cni`: the CNI agent and shim; `migrate*`: NPWG annotations -> PodNetwork objects.

Nothing is imported here, so `import bridge.npwg` stays free of the KEP layer.
"""
