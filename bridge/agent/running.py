"""The agent as a node runs it: the `Agent` behind its unix-socket `Server`.

The server knows the agent only as a `server.Handler` (handle a request, say
whether a pod could attach now), and the agent knows nothing of its transport;
this is where the two meet. The order is the point: the socket is bound before
the agent's conflist tells the runtime to use it (NPWG 6.1), and on the way out
the socket closes before the conflist goes, so the runtime never calls a shim
whose agent is gone while the node still looks ready.
"""

from __future__ import annotations

from bridge.agent.agent import Agent
from bridge.agent.server import Server


class Running:
    """An agent and its socket, started and stopped together."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.server = Server(agent, agent.config.socket_path, agent.config.max_request_bytes)

    async def start(self) -> None:
        await self.agent.start()
        try:
            await self.server.start()
        except BaseException:
            await self.agent.stop()
            raise
        self.agent.announce()

    async def stop(self) -> None:
        await self.server.stop()
        await self.agent.stop()

    async def __aenter__(self) -> Running:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


__all__ = ["Running"]
