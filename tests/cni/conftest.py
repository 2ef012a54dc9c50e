"""Fixtures of the CNI tier: a World (temp dirs, netns, bridges, objects) with its agent running."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cni.agent_support import World


@pytest.fixture
async def world(cni_host: list[Path]) -> AsyncIterator[World]:
    w = World(cni_host)
    try:
        await w.start_agent()
        yield w
    finally:
        await w.cleanup()
