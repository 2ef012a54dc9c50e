"""Which CNI versions the CNI tier covers, and why the others are not covered.

The version-dependent tests run once per version the agent speaks; each version the
installed plugins lack is skipped there with the reason. This test keeps the list of
those gaps honest: in CI (whose plugins `make test` installs) the versions the plugins
lack must be exactly the documented gaps, no more (a version silently dropped) and no
fewer (a gap closed, so the documentation would undersell the coverage).
"""

from __future__ import annotations

import os

import pytest

from bridge.agent.delegates import invoke
from tests.cni.agent_support import KNOWN_GAPS, by_version

pytestmark = pytest.mark.cni


def test_the_versions_the_installed_plugins_lack_are_exactly_the_documented_gaps(
    plugin_versions: dict[str, frozenset[str]],
) -> None:
    assert set(KNOWN_GAPS) <= set(invoke.SUPPORTED_VERSIONS), "a gap is a version the agent speaks"
    assert all(reason.strip() for reason in KNOWN_GAPS.values()), "each gap says why"
    lacking = [v for v in invoke.SUPPORTED_VERSIONS if not all(v in spoken for spoken in plugin_versions.values())]
    covered = [v for v in invoke.SUPPORTED_VERSIONS if v not in lacking]
    if os.environ.get("CI"):
        assert lacking == by_version(KNOWN_GAPS), (
            f"the installed plugins lack {lacking or 'no version'} of the agent's {list(invoke.SUPPORTED_VERSIONS)}, "
            f"the documented gaps are {by_version(KNOWN_GAPS)}: update KNOWN_GAPS in tests/cni/agent_support.py "
            "and docs/agent.md")
        assert covered, "the CNI tier covers no version at all"
    elif lacking != by_version(KNOWN_GAPS):
        pytest.skip(f"the plugins here cover {covered or 'no version'} and lack {lacking or 'none'}; "
                    f"CI's lack {by_version(KNOWN_GAPS)}")
