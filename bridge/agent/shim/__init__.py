"""The shim and the agent's side of its wire: `protocol` (defined once, imports nothing), the Python
`shim` and the compiled `shim.c` (built by `shimbuild`), and the DaemonSet's readiness `probe`.

The bottom room: it imports nothing of the agent, so the shim installs as one file and the probe
runs under `python3 -I` with the standard library only."""
