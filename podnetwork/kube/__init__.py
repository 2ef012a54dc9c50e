"""How this project reaches Kubernetes, and how the API server reaches it.

Every command and component (controller, bridge, scheduler extender, CNI agent,
migrate, explain/graph) finds its cluster through `credentials.resolve` and
talks to it through the clients of `client`, so one precedence and one set of
TLS and token rules hold everywhere (docs/architecture.md "Reaching the API").

- `credentials`, `client`: finding the cluster; lightkube clients, retries, list+watch;
- `peering`: the one adapter to kopf's peering objects (kopf's public API has none);
- `certificates`, `webhooks`: the webhooks' serving certificate and HTTPS serving;
- `operatorshell`: what the commands of the controller, the bridge and the extender
  share: the --webhook-* flags and their checks, binding ports before start, and
  running kopf and the servers until a signal;
- `names`: the DNS-1123 and interface-name rules; `core`: typed views of core objects.

This package imports nothing else of `podnetwork` (`.importlinter`), so the NPWG
layer, the extender and the agent may use it without learning about PodNetworks.
Its modules import lightkube (and kopf, for the operators' login) only where
they are used, so importing `credentials` stays cheap.
"""

__all__: list[str] = []
