"""KEP-3698 Multi-Network: the PodNetwork API, its controller, and what every component shares.

Layers, top to bottom, each importing only those below it (`.importlinter`):

- `commands`: the KEP layer's subcommands (`podnetwork validate|controller|explain|graph`);
- `kep`: the KEP layer itself: the API's models, validation, decisions and controller;
- `cli`: the command layer every product's commands use: the entry point, arguments,
  logging, the operators' shell, metrics, manifest files in, output files out;
- `kube`: how every component reaches Kubernetes (credentials, clients, webhooks);
- `ground`: the names on the wire and the typed views of the objects, for every layer.
"""

__all__: list[str] = []
