"""The agent's Prometheus metrics (`--metrics-port`), scraped over real HTTP while the shim
drives real ADDs and DELs with the real `bridge` plugin in a network namespace the test made."""

from __future__ import annotations

import pytest

from bridge.agent.daemon import agent as agent_mod
from bridge.agent.daemon.running import Running
from bridge.agent.delegates.invoke import ErrorCode
from tests.api.controller_support import free_port
from tests.api.metrics_support import scrape, total, value
from tests.cni.agent_support import NOTHING_LEFT, NPWG_NETWORKS, World

pytestmark = pytest.mark.cni


async def test_requests_plugin_execs_errors_and_cache_records_move_with_real_cni_calls(world: World) -> None:
    await world.stop_agent()
    port = free_port()
    world.agent = agent_mod.Agent(world.objects, world.agent_config())
    world.running = Running(world.agent, metrics_port=port)
    await world.running.start()
    url = f"http://127.0.0.1:{port}/metrics"
    world.nad("blue", world.network("blue", 1))
    world.pod("web", {NPWG_NETWORKS: "blue"})
    netns = world.make_netns()

    before = await scrape(url)
    assert value(before, "podnetwork_agent_cache_records") == 0
    assert value(before, "podnetwork_agent_requests_in_flight") == 0
    assert total(before, "podnetwork_agent_request_duration_seconds_count") == 0

    added = await world.cni("ADD", "ctr1", netns, "web")
    assert added.returncode == 0, added.stdout
    after_add = await scrape(url)
    assert value(after_add, "podnetwork_agent_request_duration_seconds_count", command="ADD", code="0") == 1
    # The default network and blue: one `bridge` exec each (host-local is the plugin's own child).
    assert value(after_add, "podnetwork_agent_plugin_exec_duration_seconds_count",
                 plugin="bridge", command="ADD", result="ok") == 2
    assert value(after_add, "podnetwork_agent_cache_records") == 1
    assert value(after_add, "podnetwork_agent_requests_in_flight") == 0

    missing = await world.cni("ADD", "ctr2", world.make_netns(), "no-such-pod")
    assert missing.returncode != 0
    code = str(int(ErrorCode.POD_NOT_FOUND))
    after_error = await scrape(url)
    assert value(after_error, "podnetwork_agent_errors_total", code=code) == 1
    assert value(after_error, "podnetwork_agent_request_duration_seconds_count", command="ADD", code=code) == 1

    deleted = await world.cni("DEL", "ctr1", netns, "web")
    assert deleted.returncode == 0, deleted.stdout
    after_del = await scrape(url)
    assert value(after_del, "podnetwork_agent_request_duration_seconds_count", command="DEL", code="0") == 1
    assert value(after_del, "podnetwork_agent_plugin_exec_duration_seconds_count",
                 plugin="bridge", command="DEL", result="ok") >= 2
    assert value(after_del, "podnetwork_agent_cache_records") == 0
    assert total(after_del, "podnetwork_agent_errors_total") == 1
    await world.stop_agent()
    assert world.leftovers() == NOTHING_LEFT


async def test_without_a_metrics_port_nothing_listens_and_requests_are_served(world: World) -> None:
    assert world.running is not None and world.running.metrics_server is None
    world.pod("web")
    netns = world.make_netns()
    assert (await world.cni("ADD", "ctr1", netns, "web")).returncode == 0
    assert (await world.cni("DEL", "ctr1", netns, "web")).returncode == 0
