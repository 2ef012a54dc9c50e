"""`podnetwork graph`: the object graph (pods, attachments, networks, parameters, nodes, who may
use a network) as DOT or SVG."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from podnetwork import cli
from podnetwork.cli import outputs
from podnetwork.commands.explain import add_source_arguments, load_objects

DESCRIPTION = """\
Write the object graph of KEP-3698 multi-networking: pods, PodNetworkAttachments,
PodNetworks, their parametersRefs objects and nodes, with an edge per reference,
and who may use a PodNetwork: a Role or ClusterRole granting verb `use` on
`podnetworks` points at it (blue, dashed), a binding at its role, and names its
subjects and the namespace where they may use it. Missing objects are dashed
red; networks that are not Ready are orange.

  podnetwork graph -f examples/ > graph.dot
  podnetwork graph -o graph.svg              (SVG needs Graphviz's `dot`: make setup installs it)

The format follows -o's extension (.svg or .dot), or --format; default DOT on
stdout. Objects come from the cluster, or from manifest files with -f. -o is
written through to what is there (a device, a FIFO, a link stays what it is).

exit status: 0 written, 2 unreadable input, an output that cannot be written, or
SVG asked without Graphviz
"""


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", help="write here instead of stdout")
    parser.add_argument("--format", choices=["dot", "svg"], help="default: from -o's extension, else dot")
    add_source_arguments(parser)


def _run(args: argparse.Namespace) -> int:
    from podnetwork.kep import graph

    if args.output is not None and (problem := outputs.problem(args.output, "-o")):
        print(f"podnetwork graph: {problem}", file=sys.stderr)
        return 2
    is_svg = args.output is not None and Path(args.output).suffix.lower() == ".svg"
    fmt = args.format or ("svg" if is_svg else "dot")
    if fmt == "svg" and not graph.dot_available():
        print("podnetwork graph: SVG needs Graphviz's `dot` (apt-get install graphviz, or `make setup` "
              "as root); use --format dot and render it elsewhere", file=sys.stderr)
        return 2
    try:
        objects = load_objects(args)
        text = graph.to_dot(graph.build(objects))
        data = graph.to_svg(text) if fmt == "svg" else text.encode()
        if args.output is not None:
            outputs.write(args.output, data, "-o")
            return 0
    except (ValueError, RuntimeError) as exc:  # ManifestError and OutputError are ValueErrors
        print(f"podnetwork graph: {exc}", file=sys.stderr)
        return 2
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


command = cli.Command(
    help="write the object graph (pods, attachments, networks, parameters, nodes) as DOT or SVG",
    configure=_configure,
    run=_run,
    description=DESCRIPTION,
)
