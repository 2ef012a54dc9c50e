"""The command layer: the `podnetwork` program and what its commands share.

- `program`: the entry point (`main`), the subcommands found by entry point (`Command`);
- `arguments`: argument types and flag groups; `logs`: logging set-up and start-up lines;
- `operatorshell`: what the commands that run an operator or serve webhooks share (the
  --webhook-* flags and their checks, ports bound before start, one owner of SIGTERM);
  `handlers`: kopf's decorators with each handler's runs counted; `metrics`: Prometheus;
- `manifests`: the one loader of manifest files (its parts: `manifestlimits`, `manifestparse`,
  `manifestfiles`); `outputs`: the one writer of output files.

It knows nothing of the KEP or the NPWG (`.importlinter`: it stands on `podnetwork.kube` and
`podnetwork.ground` only), so every product's commands use it. Heavy imports (kopf, uvicorn,
prometheus_client) stay in the modules that need them, so `podnetwork --help` stays fast.
"""

from podnetwork.cli.program import ENTRY_POINT_GROUP, Command, build_parser, main

__all__ = ["ENTRY_POINT_GROUP", "Command", "build_parser", "main"]
