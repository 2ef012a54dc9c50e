"""Fixtures of the CNI tier: a World (temp dirs, netns, bridges, objects) with its agent running,
and the CNI version it speaks.

A test marked `every_cni_version` runs once per version the agent speaks
(`bridge.agent.delegates.invoke.SUPPORTED_VERSIONS`, from `since`). The installed plugins are asked
once per session which versions they speak; a version they lack is skipped with that
reason, never left out of the list, and in CI it fails unless agent_support.KNOWN_GAPS
explains it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.agent.delegates import invoke
from tests.cni.agent_support import CNI_VERSION, KNOWN_GAPS, TIER_PLUGINS, World, by_version, spoken_versions


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "every_cni_version(since=None): run once per CNI version the agent speaks, from `since` "
        "(e.g. '0.4.0' for CHECK); the `cni_version` fixture and `world` follow it",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("every_cni_version")
    if marker is None:
        return
    since = invoke.version_tuple(marker.kwargs.get("since") or invoke.SUPPORTED_VERSIONS[0])
    versions = [v for v in invoke.SUPPORTED_VERSIONS if invoke.version_tuple(v) >= since]
    metafunc.parametrize("cni_version", versions, indirect=True)


@pytest.fixture(scope="session")
def plugin_versions(cni_host: list[Path]) -> dict[str, frozenset[str]]:
    """Plugin -> the CNI versions it says it speaks (asked once per session)."""
    return {plugin: spoken_versions(cni_host, plugin) for plugin in TIER_PLUGINS}


@pytest.fixture
def cni_version(request: pytest.FixtureRequest) -> str:
    """The version of this test's run (`every_cni_version`), or 1.0.0 for a test that has one run."""
    version: str | None = getattr(request, "param", None)
    if version is None:
        return CNI_VERSION
    spoken: dict[str, frozenset[str]] = request.getfixturevalue("plugin_versions")
    lacking = [plugin for plugin, versions in spoken.items() if version not in versions]
    if lacking:
        groups: dict[frozenset[str], list[str]] = {}
        for plugin in lacking:
            groups.setdefault(spoken[plugin], []).append(plugin)
        said = "; ".join(f"{', '.join(plugins)}: {', '.join(by_version(versions)) or 'not installed'}"
                         for versions, plugins in groups.items())
        reason = f"CNI {version} is not spoken by the installed plugins ({said})"
        if version in KNOWN_GAPS:
            pytest.skip(f"{reason}: {KNOWN_GAPS[version]}")
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI's plugins should speak it: install them, or add {version} with "
                        "the reason to KNOWN_GAPS in tests/cni/agent_support.py")
        pytest.skip(reason)
    return version


@pytest.fixture
async def world(cni_host: list[Path], cni_version: str) -> AsyncIterator[World]:
    w = World(cni_host, cni_version=cni_version)
    try:
        await w.start_agent()
        yield w
    finally:
        await w.cleanup()
