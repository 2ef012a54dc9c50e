"""The KEP-3698 layer: the PodNetwork API, its validation, decisions and controller.

- `api`: the pydantic models of PodNetwork and PodNetworkAttachment (the CRDs follow them);
- `networks`: the pod's spec-style networks annotation; `validation`: static validation;
- `conditions`, `inuse`, `defaultnet`, `activevalidation`, `admission` (with `podchange`,
  `usepermission`, `admissionconfig`), `explain`, `graph`: the decisions, pure;
- `admissionreview`, `controller`, `graph_source`: the edges (the AdmissionReview, the kopf
  handlers, where explain/graph read objects).

It knows nothing of CNI or of the NPWG standard (`.importlinter`: it stands on
`podnetwork.cli`, `podnetwork.kube` and `podnetwork.ground` only).
"""

__all__: list[str] = []
