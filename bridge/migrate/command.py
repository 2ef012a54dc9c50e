"""`podnetwork migrate`: move workloads from NPWG selection annotations to PodNetworks.

Offline (`-f FILES_OR_DIRS`) it plans from manifests and can write the
rewritten manifests; live (`--kubeconfig`, `--context`, `-n NS | -A`) it reads
the cluster, and with `--apply` applies the plan with server-side apply;
`--rollback PLAN` undoes an applied plan. The planning is `bridge.migrate`,
the cluster I/O `bridge.migrate.apply`; this module only wires them to argv.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from podnetwork import cli
from podnetwork.cli import manifests, outputs
from podnetwork.kube import credentials

EXIT_OK = 0
EXIT_INCOMPLETE = 1
EXIT_USAGE = 2

DESCRIPTION = """\
Move workloads that select networks with the NPWG annotation
k8s.v1.cni.cncf.io/networks (and NetworkAttachmentDefinitions) to PodNetwork
objects, without changing what their pods get.

For every Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job and CronJob
whose pod template carries the NPWG annotation, the plan has:
  - one PodNetwork per NetworkAttachmentDefinition (provider
    multinetwork.x-k8s.io/npwg-bridge), named NAD-NAMESPACE.NAD-NAME;
  - a NetworkSelectionOptions and a PodNetworkAttachment for each selection
    element with per-pod keys (ips, mac, cni-args, portMappings, bandwidth,
    default-route, infiniband-guid, ipam-claim-reference);
  - the multinetwork.x-k8s.io/networks annotation that replaces the NPWG one:
    the `default` PodNetwork first, then the elements in order, with their
    interface names;
  - what cannot be migrated, each with its reason.

Offline:  podnetwork migrate -f manifests/ [-o plan.yaml] [--write-manifests DIR]
Live:     podnetwork migrate [--kubeconfig K] [--context C] (-n NS | -A) [-o plan.yaml] [--apply]
Undo:     podnetwork migrate [--kubeconfig K] --rollback plan.yaml

Input files (-f, and the plan of --rollback) are refused, naming the file and
line, when they are not regular files, exceed --max-file-size (default {_SIZE}),
use YAML aliases that add more than {_ALIASES} nodes, or nest deeper than {_DEPTH}
levels. Nothing is planned or applied then.

The human diff goes to standard output (-q to omit it); the plan file is
multi-document YAML: a MigrationPlan document, then the objects to create.
A second run after --apply plans nothing. See docs/migration.md.

exit status: 0 everything migrated (or nothing to do), 1 something could not be
migrated or applied (the rest was), 2 unreadable input, bad arguments or no
cluster
""".format(
    _SIZE=manifests.size_text(manifests.DEFAULT_LIMITS.max_file_bytes).split(" (")[0],
    _ALIASES=manifests.DEFAULT_LIMITS.max_alias_nodes,
    _DEPTH=manifests.DEFAULT_LIMITS.max_depth,
)


def _configure(parser: argparse.ArgumentParser) -> None:
    src = parser.add_argument_group("offline input")
    src.add_argument(
        "-f",
        "--filename",
        action="append",
        metavar="FILE_OR_DIR",
        help="manifest file, directory, or - for stdin (repeatable); plans without a cluster",
    )
    src.add_argument(
        "-R", "--recursive", action="store_true", help="also read the subdirectories of directories"
    )
    live = parser.add_argument_group("live cluster")
    credentials.add_arguments(live, kubeconfig_metavar="PATH", context_metavar="NAME")
    scope = live.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        metavar="NS",
        help="only this namespace (offline: the namespace of objects that name none; default 'default')",
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace (live)")
    live.add_argument(
        "--apply",
        action="store_true",
        help="apply the plan: server-side apply (field manager podnetwork-migrate) of networks, "
        "then options and attachments, then the workloads",
    )
    live.add_argument(
        "--rollback",
        metavar="PLAN",
        help="restore the NPWG annotations recorded in PLAN and delete the objects it created "
        "that nothing uses any more",
    )
    out = parser.add_argument_group("output")
    out.add_argument("-o", "--output", metavar="PLAN", help="write the plan file here (- for stdout)")
    out.add_argument(
        "--write-manifests",
        metavar="DIR",
        help="offline: write the objects to create and the rewritten workloads to DIR, "
        "ready for kubectl apply",
    )
    out.add_argument("-q", "--quiet", action="store_true", help="do not print the human diff")
    # Bounds -f inputs and the --rollback plan file: the same reader reads both.
    manifests.add_limit_arguments(parser)


def _fail(message: str, err: TextIO) -> int:
    print(f"podnetwork migrate: {message}", file=err)
    return EXIT_USAGE


def _usage_problem(args: argparse.Namespace) -> str | None:
    live_flags = args.kubeconfig or args.context or args.all_namespaces or args.apply
    if args.filename and (live_flags or args.rollback):
        return (
            "-f reads manifests offline; it cannot be combined with --kubeconfig, --context, "
            "-A, --apply or --rollback (apply offline output with kubectl, or drop -f to read the cluster)"
        )
    if args.rollback and (args.apply or args.output is not None or args.write_manifests is not None):
        return "--rollback PLAN takes no --apply, -o or --write-manifests"
    if not args.filename and not args.rollback and not (args.namespace or args.all_namespaces):
        return (
            "say what to migrate: -f FILE_OR_DIR for manifests, or -n NAMESPACE / -A for the "
            "cluster of --kubeconfig/--context"
        )
    if args.write_manifests is not None and not args.filename:
        return "--write-manifests works offline only (with -f)"
    # Before any input is read or the cluster asked: a plan is never made for nowhere.
    if args.output is not None and (problem := outputs.problem(args.output, "-o", allow_stdout=True)):
        return problem
    if args.write_manifests is not None:
        return outputs.directory_problem(args.write_manifests, "--write-manifests")
    return None


def _run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    problem = _usage_problem(args)
    if problem:
        return _fail(problem, err)
    if args.filename:
        from bridge.migrate import offline as migrate_offline

        return migrate_offline.run(args, out, err)
    from bridge.migrate import apply as migrate_apply

    return migrate_apply.run(args, out, err)


command = cli.Command(
    help="migrate workloads from NPWG network annotations to PodNetwork objects",
    description=DESCRIPTION,
    configure=_configure,
    run=lambda args: _run(args),
)

__all__ = ["command"]
