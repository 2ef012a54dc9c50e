"""The agent on its node: `settings` (`AgentConfig`, its names and paths), `install` (the shim and the
agent's conflist put on the node, a step of its own), `preflight` (the paths checked before any is
made) and `readiness` (each change logged once and posted on the Node).

Imports `delegates` and `shim`; nothing that runs a pod's feature."""
