"""How this project reaches Kubernetes: credentials, API clients, retries, watches.

Every command and component (controller, bridge, scheduler extender, CNI agent,
migrate, explain/graph) finds its cluster through `credentials.resolve` and
talks to it through the clients of `client`, so one precedence and one set of
TLS and token rules hold everywhere (docs/architecture.md "Reaching the API").

This package imports nothing else of `podnetwork`, so the NPWG layer, the
extender and the agent may use it without learning about PodNetworks.
Its modules import lightkube (and kopf, for the operators' login) only where
they are used, so importing `credentials` stays cheap.
"""

__all__: list[str] = []
