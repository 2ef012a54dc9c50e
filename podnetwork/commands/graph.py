"""`podnetwork graph`: the object graph (pods, attachments, networks, parameters, nodes) as DOT or SVG."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from podnetwork import cli
from podnetwork.commands.explain import add_source_arguments, load_objects

DESCRIPTION = """\
Write the object graph of KEP-3698 multi-networking: pods, PodNetworkAttachments,
PodNetworks, their parametersRefs objects and nodes, with an edge per reference.
Missing objects are dashed red; networks that are not Ready are orange.

  podnetwork graph -f examples/ > graph.dot
  podnetwork graph -o graph.svg              (SVG needs Graphviz's `dot`)

The format follows -o's extension (.svg or .dot), or --format; default DOT on
stdout. Objects come from the cluster, or from manifest files with -f.

exit status: 0 written, 2 unreadable input or SVG asked without Graphviz
"""


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    parser.add_argument("--format", choices=["dot", "svg"], help="default: from -o's extension, else dot")
    add_source_arguments(parser)


def _run(args: argparse.Namespace) -> int:
    from podnetwork import graph

    fmt = args.format or ("svg" if args.output and args.output.suffix.lower() == ".svg" else "dot")
    if fmt == "svg" and not graph.dot_available():
        print("podnetwork graph: SVG needs Graphviz's `dot` (apt-get install graphviz); "
              "use --format dot and render it elsewhere", file=sys.stderr)
        return 2
    try:
        objects = load_objects(args)
    except (ValueError, RuntimeError) as exc:
        print(f"podnetwork graph: {exc}", file=sys.stderr)
        return 2
    text = graph.to_dot(graph.build(objects))
    data = graph.to_svg(text) if fmt == "svg" else text.encode()
    if args.output:
        args.output.write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


command = cli.Command(
    help="write the object graph (pods, attachments, networks, parameters, nodes) as DOT or SVG",
    configure=_configure,
    run=_run,
    description=DESCRIPTION,
)
