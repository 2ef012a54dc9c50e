"""The agent as a node runs it: the `Agent` behind its unix-socket `Server`.

The server knows the agent only as a `server.Handler` (handle a request, say
whether a pod could attach now), and the agent knows nothing of its transport;
this is where the two meet. The order is the point: the socket is bound before
the agent's conflist tells the runtime to use it (NPWG 6.1), and on the way out
the socket closes before the conflist goes, so the runtime never calls a shim
whose agent is gone while the node still looks ready.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.agent.daemon.agent import Agent
from bridge.agent.daemon.server import Server
from bridge.agent.delegates import invoke

if TYPE_CHECKING:  # prometheus_client: only with --metrics-port (the agent's RSS)
    from bridge.agent.daemon.metrics import AgentMetrics, MetricsServer


class Running:
    """An agent and its socket, started and stopped together; with `metrics_port`, its
    metrics served on `metrics_host`:`metrics_port` (`bridge.agent.daemon.metrics`)."""

    def __init__(self, agent: Agent, *, metrics_port: int | None = None,
                 metrics_host: str = "127.0.0.1") -> None:
        self.agent = agent
        self.metrics: AgentMetrics | None = None
        self.metrics_server: MetricsServer | None = None
        if metrics_port is not None:
            from bridge.agent.daemon.metrics import AgentMetrics, MetricsServer

            self.metrics = AgentMetrics(lambda: sum(1 for _ in agent.cache.container_ids()))
            # Every plugin the agent runs goes through its executor (ADD, DEL, CHECK, GC).
            agent.runner.executor = invoke.Measured(agent.runner.executor, self.metrics.observe_exec)
            self.metrics.watch_status_writes(lambda: agent.status.pending, lambda: agent.status.failed)
            self.metrics_server = MetricsServer(self.metrics, metrics_host, metrics_port)
        config = agent.config
        self.server = Server(agent, config.socket_path, config.max_request_bytes, self.metrics,
                             max_connections=config.max_connections, read_timeout=config.read_timeout)

    async def start(self) -> None:
        await self.agent.start()
        try:
            if self.metrics_server is not None:
                await self.metrics_server.start()
            await self.server.start()
        except BaseException:
            if self.metrics_server is not None:
                await self.metrics_server.stop()
            await self.agent.stop()
            raise
        self.agent.announce()

    async def stop(self) -> None:
        await self.server.stop()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        await self.agent.stop()

    async def __aenter__(self) -> Running:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


__all__ = ["Running"]
