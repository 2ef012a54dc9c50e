"""The NPWG delegating-plugin harness: `podnetwork npwg-conformance` (docs/npwg-conformance.md).

It runs any CNI delegating plugin of the NPWG multi-net spec v1.3 (this project's
shim with its agent, Multus, ...) the way a container runtime does, against
recording delegates (`recorder`) and a small Kubernetes API (`kubeapi`) set up by
the bench (`bench`), and judges each scenario (`scenarios`, with `judging`, `selectionkeys`
and `networkstatus`) by the spec's text.
It imports nothing of this project but itself (`.importlinter`).
"""
