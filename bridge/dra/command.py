"""`podnetwork export-dra`: PodNetworks and their workloads as DRA objects (files or a cluster in, YAML out).

The mapping is `bridge.dra.export` (pure); this module reads the inputs through
`podnetwork.cli.manifests` (files) or `podnetwork.kube.client` (a cluster), prints
what cannot be expressed, and writes the output only when everything could be
(or with --partial), so bad input changes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from podnetwork import cli
from podnetwork.cli import manifests, outputs
from podnetwork.kube import credentials

EXIT_OK = 0
EXIT_UNEXPRESSIBLE = 1
EXIT_USAGE = 2

#: The drivers whose parameters the export knows (bridge.dra.export.DRIVERS; repeated so that
#: `podnetwork --help` imports no bridge module).
DRANET_DRIVER = "dra.net"
CNI_DRIVER = "cni.dra.networking.x-k8s.io"

DESCRIPTION = f"""\
Render what a Dynamic Resource Allocation (resource.k8s.io/v1) setup needs for
the PodNetworks and the workloads that use them:

  - a DeviceClass per PodNetwork (same name), selecting the driver's devices
    on that network;
  - a ResourceClaimTemplate per attachment shape (PodNetwork + parameters), with
    the interface name and parameters in the driver's opaque configuration;
  - each Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job and CronJob
    whose pod template names networks (multinetwork.x-k8s.io/networks), with
    spec.resourceClaims naming those templates and without that annotation;
  - with --network-data, KEP-4817 networkData (interfaceName, ips as CIDRs,
    hardwareAddress) per claim of each Pod that has a network-status.

--driver picks whose parameters are written (default {DRANET_DRIVER}, DRANET):
  {DRANET_DRIVER}   DRANET moves a host interface into the pod (host-device NADs)
                    or makes an ipvlan child of one (ipvlan NADs); addresses are
                    fixed (static IPAM, per-pod ips) or DHCP
  {CNI_DRIVER}
                    the CNI DRA driver runs the NAD's CNI configuration as is

What the driver cannot express is listed on stderr, one line per PodNetwork or
workload, `! SOURCE: KIND NS/NAME: REASON: MESSAGE` (`i` notes, `~` skipped), as
podnetwork migrate reports. Then nothing is written, unless --partial.

Offline:  podnetwork export-dra -f manifests/ [-o dra.yaml] [--network-data data.yaml]
Live:     podnetwork export-dra [--kubeconfig K] [--context C] (-n NS | -A) [-o dra.yaml]

Input files are read as podnetwork validate reads them (regular files only, at
most --max-file-size, no YAML alias bombs). See docs/dra.md.

exit status: 0 everything exported (or nothing to do), 1 something cannot be
expressed (nothing written, or with --partial the rest), 2 unreadable input, bad
arguments or no cluster
"""


def _configure(parser: argparse.ArgumentParser) -> None:
    src = parser.add_argument_group("offline input")
    src.add_argument("-f", "--filename", action="append", metavar="FILE_OR_DIR",
                     help="manifest file, directory, or - for stdin (repeatable)")
    src.add_argument("-R", "--recursive", action="store_true",
                     help="also read the subdirectories of directories")
    live = parser.add_argument_group("live cluster")
    credentials.add_arguments(live, kubeconfig_metavar="PATH", context_metavar="NAME")
    scope = live.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", metavar="NS",
                       help="only this namespace (offline: the namespace of objects that name none; "
                       "default 'default')")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace (live)")
    out = parser.add_argument_group("output")
    out.add_argument("--driver", choices=(DRANET_DRIVER, CNI_DRIVER), default=DRANET_DRIVER,
                     help=f"the DRA driver whose parameters are written (default {DRANET_DRIVER})")
    out.add_argument("-o", "--output", metavar="FILE", default="-",
                     help="write the DRA objects here (default - , standard output)")
    out.add_argument("--network-data", metavar="FILE",
                     help="write the KEP-4817 networkData of each exported Pod's claims here")
    out.add_argument("--partial", action="store_true",
                     help="write what can be expressed even when something cannot (exit status still 1)")
    manifests.add_limit_arguments(parser)


def _usage_problem(args: argparse.Namespace) -> str | None:
    if args.filename and (args.kubeconfig or args.context or args.all_namespaces):
        return "-f reads manifests offline; it cannot be combined with --kubeconfig, --context or -A"
    if not args.filename and not (args.namespace or args.all_namespaces):
        return ("say what to export: -f FILE_OR_DIR for manifests, or -n NAMESPACE / -A for the cluster "
                "of --kubeconfig/--context")
    if args.network_data == "-":
        return "--network-data needs a file name (standard output carries the DRA objects)"
    # Before any input is read: an export is never computed for an output that cannot be written.
    if problem := outputs.problem(args.output, "-o", allow_stdout=True):
        return problem
    if args.network_data is not None:
        if problem := outputs.problem(args.network_data, "--network-data"):
            return problem
        if args.output != "-" and _same_file(args.output, args.network_data):
            return "--network-data and --output must be different files"
    return None


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist yet: the same path, or not the same file
        return Path(a).resolve() == Path(b).resolve()


def _write(text: str, target: str, flag: str, out: TextIO) -> None:
    """`text` to standard output (`-`) or through to the file (`podnetwork.cli.outputs.write`).
    Raises `outputs.OutputError`."""
    if target == "-":
        out.write(text)
        return
    outputs.write(target, text, flag)


def dump_yaml(documents: list[dict[str, Any]]) -> str:
    """A YAML stream, keys in the models' order, multi-line strings as blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump_all(documents, Dumper=Dumper, sort_keys=False, allow_unicode=True) if documents else ""


def _offline(args: argparse.Namespace, err: TextIO) -> list[tuple[dict[str, Any], str]] | None:
    loaded = manifests.scan(args.filename, recursive=args.recursive, limits=manifests.limits_from(args))
    if loaded.errors:
        for error in loaded.errors:
            print(f"podnetwork export-dra: {error}", file=err)
        return None
    return [(doc.obj, doc.source) for doc in loaded.documents]


def _live(args: argparse.Namespace, err: TextIO) -> list[tuple[dict[str, Any], str]] | None:
    from bridge.dra import live

    try:
        objs = live.read(args.kubeconfig, args.context, None if args.all_namespaces else [args.namespace])
    except RuntimeError as exc:
        print(f"podnetwork export-dra: {exc}", file=err)
        return None
    return [(obj, "") for obj in objs]


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    if problem := _usage_problem(args):
        print(f"podnetwork export-dra: {problem}", file=err)
        return EXIT_USAGE
    from bridge.dra import export as dra_export

    inputs = _offline(args, err) if args.filename else _live(args, err)
    if inputs is None:
        print("podnetwork export-dra: nothing written; fix the input above", file=err)
        return EXIT_USAGE
    inventory = dra_export.Inventory()
    namespace = args.namespace or "default"
    for obj, source in inputs:
        inventory.add(obj, default_namespace=namespace, source=source)
    result = dra_export.export(inventory, dra_export.Settings(driver=args.driver))
    err.write(dra_export.problems(result))
    print(dra_export.summary(result), file=err)
    if result.unexpressible and not args.partial:
        print("podnetwork export-dra: nothing written: the driver cannot express the above "
              "(--partial writes the rest)", file=err)
        return EXIT_UNEXPRESSIBLE
    try:
        _write(dump_yaml(result.documents()), args.output, "-o", out)
        if args.network_data is not None:
            _write(dump_yaml([dra_export.network_data_document(result.network_data)]), args.network_data,
                   "--network-data", out)
    except outputs.OutputError as exc:
        print(f"podnetwork export-dra: {exc}", file=err)
        return EXIT_USAGE
    return EXIT_UNEXPRESSIBLE if result.unexpressible else EXIT_OK


command = cli.Command(
    help="render PodNetworks and their workloads as DRA DeviceClasses, ResourceClaimTemplates and claims",
    description=DESCRIPTION,
    configure=_configure,
    run=lambda args: run(args),
)

__all__ = ["command", "run"]
