"""What the DRA driver shares with the rest of the bridge: its names on the wire (driver, device
attributes, sockets) and its on-node record of prepared claims.

Below the driver (`bridge.dra.driver`), the bridge's admission (`bridge.operator`) and the CNI agent
(`bridge.agent`), which stand beside each other and never import each other (.importlinter): the
operator names the driver's devices in the claims it makes, and the agent reads which claims the
driver prepared for a pod.
"""
