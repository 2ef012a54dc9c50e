"""The agent as a node runs it: the composition (`agent.Agent`), its unix-socket `server`, `running`
(the agent behind its server), its `metrics`, `hotplug` (networks changed on running pods), and
`command` (`podnetwork cni-agent`).

The top room: it may import every other."""
