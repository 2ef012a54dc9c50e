"""How this project reaches Kubernetes, and how the API server reaches it.

Every command and component (controller, bridge, scheduler extender, CNI agent,
migrate, explain/graph) finds its cluster through `credentials.resolve` and
talks to it through the clients of `client`, so one precedence and one set of
TLS and token rules hold everywhere (docs/architecture.md "Reaching the API").

- `credentials`, `client`: finding the cluster; lightkube clients, retries, list+watch
  (their parts: `credentialmodel`, `kubeconfig`, `authentication`, `clienttls`;
  `resources`, `apierrors`, `transport`, `useragent`);
- `lite`: the CNI agent's small asyncio client (GET, merge patch, list+watch);
- `peering`: the one adapter to kopf's peering objects (kopf's public API has none);
- `certificates`, `webhooks`, `webhooksecret`, `registration`: the webhooks' serving
  certificate (its key kept in memory), HTTPS serving, the certificate kept in a Secret,
  and the webhook configurations registered once the webhooks answer.

Of this project it imports only `podnetwork.ground` (`.importlinter`), so the NPWG
layer, the extender and the agent may use it without learning about PodNetworks.
Its modules import lightkube (and kopf, for the operators' login) only where
they are used, so importing `credentials` stays cheap.
"""

__all__: list[str] = []
