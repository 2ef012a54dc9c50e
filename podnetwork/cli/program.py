"""`podnetwork`: the user's command, and the registry of its subcommands.

Subcommands are discovered from the `podnetwork.commands` entry-point group, so
each layer (KEP, extender, bridge, demo) registers its own in pyproject.toml and
this module imports none of them. A command module must keep heavy imports
(kopf, fastapi, lightkube) inside its `run`, so `podnetwork --help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points

from podnetwork.cli import logs
from podnetwork.kube import useragent

ENTRY_POINT_GROUP = "podnetwork.commands"


@dataclass(frozen=True)
class Command:
    """One subcommand: its one-line help, its arguments, and what it does."""

    help: str
    """One line for `podnetwork --help`."""
    configure: Callable[[argparse.ArgumentParser], None]
    """Adds the subcommand's arguments to its parser."""
    run: Callable[[argparse.Namespace], int]
    """Runs the subcommand; returns the process exit code."""
    description: str = ""
    """Longer text for `podnetwork SUBCOMMAND --help`; defaults to `help`."""


def _commands(argv: Sequence[str] = ()) -> dict[str, Command]:
    """The subcommands: only the one `argv` names, when it names one, else all of them.

    Loading one command module loads what it imports; a process that runs one command
    (the CNI agent on every node, above all) must not pay for the others' imports.
    """
    available = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
    named = next((arg for arg in argv if not arg.startswith("-")), None)
    chosen = [ep for ep in available if ep.name == named] or available
    return {ep.name: ep.load() for ep in chosen}


def build_parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podnetwork",
        description="KEP-3698 Multi-Network prototype: PodNetwork API, controller, "
        "scheduler extender, and a bridge to NPWG net-attach-def.",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, cmd in commands.items():
        p = sub.add_parser(
            name,
            help=cmd.help,
            description=cmd.description or cmd.help,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        cmd.configure(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    commands = _commands(sys.argv[1:] if argv is None else argv)
    parser = build_parser(commands)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    logs.setup(args.verbose)
    useragent.name_process(args.command)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130

