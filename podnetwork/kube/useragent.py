"""The User-Agent our API clients send: which of our commands made a request.

The API server names the field manager of an update that sets no `fieldManager` after the
User-Agent, up to its first "/" (managedFields), and audit logs carry the whole of it. httpx's
default, "python-httpx2/<version>", would say no more than "some Python program" in both. The
command line names the process once (`podnetwork.cli.program`); every client reads it here.
"""

from __future__ import annotations

from functools import cache

_process = "podnetwork"


def name_process(command: str) -> None:
    """Called once at start with the subcommand: requests then say "podnetwork-<command>/<version>"."""
    global _process
    _process = f"podnetwork-{command}" if command else "podnetwork"
    user_agent.cache_clear()


@cache
def user_agent() -> str:
    # importlib.metadata only when a client first sends: `podnetwork --help` never pays for it.
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("podnetwork")
    except PackageNotFoundError:
        release = "unknown"
    return f"{_process}/{release}"
