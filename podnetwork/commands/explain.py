"""`podnetwork explain`: a pod's, PodNetwork's or attachment's chain of references and first broken link."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from podnetwork import cli
from podnetwork.kube import credentials

DESCRIPTION = """\
Explain why a pod is Pending or a network is not Ready:

  podnetwork explain pod NAMESPACE/NAME
  podnetwork explain podnetwork NAME        (or: pn NAME)
  podnetwork explain pna NAMESPACE/NAME

prints the chain of references (pod -> attachment -> PodNetwork -> parameters
objects, pod -> node), each object with its state, then the first broken link
(missing, invalid, not Ready, being deleted) with its reason.

Objects come from the cluster (--kubeconfig/--context, $KUBECONFIG, the in-cluster
service account, ~/.kube/config: docs/architecture.md "Reaching the API"), or
from manifest files with -f (repeatable; `-` is stdin).
Without status in the files, readiness is computed with the controller's rules.

exit status: 0 no broken link, 1 a broken link, 2 not found or unreadable input
"""


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", action="append", default=[], metavar="FILE",
                        help="read objects from manifests (file, directory or -) instead of a cluster")
    parser.add_argument("-R", "--recursive", action="store_true", help="read directories recursively")
    credentials.add_arguments(parser)


def load_objects(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Objects from -f, else the cluster. Raises RuntimeError or ManifestError with a readable message."""
    from podnetwork.kep import graph_source

    if args.filename:
        return graph_source.from_files(args.filename, recursive=args.recursive)
    return graph_source.from_cluster(args.kubeconfig, context=args.context)


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", help="pod, podnetwork (pn) or pna")
    parser.add_argument("name", help="NAMESPACE/NAME for pods and attachments, NAME for PodNetworks")
    add_source_arguments(parser)


def _run(args: argparse.Namespace) -> int:
    from podnetwork.kep import explain, graph

    try:
        subject = explain.subject_key(args.kind, args.name)
        objects = load_objects(args)
    except (ValueError, RuntimeError) as exc:  # ManifestError is a ValueError
        print(f"podnetwork explain: {exc}", file=sys.stderr)
        return 2
    try:
        result = explain.explain(graph.build(objects), subject)
    except KeyError:
        where = "the input files" if args.filename else "the cluster"
        print(f"podnetwork explain: {graph.label(subject)} not found in {where}", file=sys.stderr)
        return 2
    sys.stdout.write(result.render())
    return 1 if result.first_broken else 0


command = cli.Command(
    help="why is this pod Pending / this network not Ready: the chain and its first broken link",
    configure=_configure,
    run=_run,
    description=DESCRIPTION,
)

__all__ = ["add_source_arguments", "command", "load_objects"]
