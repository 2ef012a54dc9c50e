"""`podnetwork demo`: the whole system on this machine, with no cluster."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from podnetwork.cli import Command

DESCRIPTION = """\
Runs every component's real code on this machine and narrates what happens:

  1. PodNetworks, a PodNetworkAttachment and NetworkAttachmentDefinitions in an
     in-process API store; the controller and the bridge settle their conditions;
  2. pod admission (auto-population, static validation) and the scheduler
     extender's filter answers over real HTTP on 127.0.0.1, including a pod that
     waits for a network that does not exist yet;
  3. the translation of each pod's PodNetworks into k8s.v1.cni.cncf.io/networks;
  4. pods attached on two nodes: network namespaces, the CNI shim, the agent on
     its unix socket, and the real CNI plugins (bridge, macvlan, host-local);
     network-status, pod IPs per PodNetwork, ping on every secondary network;
  5. deleting pods and a PodNetwork: CNI DEL, finalizers released;
  6. removal of everything it made (namespaces, links, IPAM files, sockets).

Steps 4-6 need root, iproute2 and the CNI plugins (Debian package
containernetworking-plugins); without them the demo says so and runs 1-3.

Every observation is checked either way; --check also prints each check and
lists the failures at the end.

exit status: 0 when every check passed, 1 when one failed, 2 on bad
arguments, 130 when interrupted (everything made so far is still removed)."""


DEFAULT_CNI_BIN_DIRS = "/opt/cni/bin:/usr/lib/cni"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--check",
        action="store_true",
        help="assert every observation (conditions, filter answers, IPs, ping, "
        "finalizers, cleanup) and exit non-zero listing what was wrong",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the namespaces, links and files in place for exploring, "
        "and print the commands that remove them",
    )
    parser.add_argument(
        "--cni-bin-dir",
        default=None,
        metavar="DIRS",
        help="colon-separated directories holding the CNI plugins; each must exist (default: "
        f"{DEFAULT_CNI_BIN_DIRS}, the CNI part skipped where the plugins are missing)",
    )
    parser.add_argument(
        "--control-plane-only",
        action="store_true",
        help="run steps 1-3 only, even where the CNI part could run",
    )
    level = parser.add_mutually_exclusive_group()
    level.add_argument(
        "-q", "--quiet", action="store_true", help="print section titles, failures and the summary only"
    )
    level.add_argument(
        "-v",
        "--verbose",
        dest="detail",
        action="count",
        default=0,
        help="also print the objects, requests and CNI results as JSON",
    )


def run(args: argparse.Namespace) -> int:
    from demo import demo, report

    if not args.detail:
        # The bridge's warnings are also Events on the objects, which the story prints; logged
        # as well they would break into it (a pod without "default": its Multus warning).
        logging.getLogger("bridge.operator").setLevel(logging.ERROR)

    if args.quiet:
        verbosity = report.Verbosity.QUIET
    elif args.detail:
        verbosity = report.Verbosity.DETAIL
    else:
        verbosity = report.Verbosity.NORMAL
    cni_bin_dirs = [Path(d) for d in (args.cni_bin_dir or DEFAULT_CNI_BIN_DIRS).split(":") if d]
    # Given explicitly, a directory that is not there is a typo: say it rather than skip step 4.
    absent = [d for d in cni_bin_dirs if not d.is_dir()] if args.cni_bin_dir is not None else []
    if absent or (args.cni_bin_dir is not None and not cni_bin_dirs):
        what = f"{absent[0]} is not a directory" if absent else "no directory given"
        print(f"podnetwork demo: --cni-bin-dir: {what}; give the directories that hold the CNI plugins, "
              "or leave the flag out to skip the CNI part where they are missing", file=sys.stderr)
        return 2
    options = demo.Options(
        check=args.check,
        keep=args.keep,
        cni_bin_dirs=cni_bin_dirs,
        control_plane_only=args.control_plane_only,
    )
    return demo.main(options, report.Report(verbosity=verbosity))


command = Command(
    help="run the whole system on this machine: control plane, extender, CNI agent, real plugins",
    description=DESCRIPTION,
    configure=configure,
    run=run,
)
