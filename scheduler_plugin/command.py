"""`podnetwork scheduler-extender`: serve the extender to kube-scheduler, fed by watches."""

from __future__ import annotations

import argparse
import asyncio
import sys

from podnetwork.cli import Command
from podnetwork.cli.arguments import byte_count, positive_count, tcp_port
from podnetwork.ground import constants
from podnetwork.kube import credentials

COMMAND = "podnetwork scheduler-extender"

DESCRIPTION = f"""\
Serve the KEP-3698 scheduler extender (kube-scheduler extender v1 protocol) over HTTP.

kube-scheduler calls POST /filter for each pod: a pod that references a PodNetwork
or PodNetworkAttachment that is missing or not Ready, or one PodNetwork twice, is
kept Pending on every node with the reason in its FailedScheduling event; a node
whose annotation {constants.NODE_PODNETWORKS_ANNOTATION} does not list one of the
pod's networks is filtered out. Also served: POST /prioritize (neutral scores),
GET /healthz, GET /readyz (ready once the watch-fed cache is synced), GET /metrics;
with --probe-port, /healthz and /readyz alone on a second address too, for the kubelet
(deploy/scheduler/ keeps --host on loopback, where only kube-scheduler calls it).

Register it with the KubeSchedulerConfiguration in deploy/scheduler/ of the project
(docs/scheduler-extender.md). The cluster it watches: --kubeconfig/--context,
$KUBECONFIG, the in-cluster service account, ~/.kube/config, in this order
(docs/architecture.md "Reaching the API"). Example, against ~/.kube/config:

  podnetwork scheduler-extender --port 8888

exit status: 0 after a clean stop (SIGINT/SIGTERM), 1 without a cluster configuration,
2 on bad arguments or a port in use
"""


def configure(parser: argparse.ArgumentParser) -> None:
    from scheduler_plugin.settings import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS

    credentials.add_arguments(parser, what="the cluster to watch")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=tcp_port, default=8888, metavar="PORT",
                        help="TCP port to listen on (default: %(default)s)")
    parser.add_argument(
        "--probe-host", default="0.0.0.0",
        help="address of --probe-port (default: %(default)s: the pod's address, which the kubelet probes)",
    )
    parser.add_argument(
        "--probe-port", type=tcp_port, default=None, metavar="PORT",
        help="also serve GET /healthz and GET /readyz, and nothing else, on this port of --probe-host "
        "(default: not served), for a kubelet's probes while --host is loopback",
    )
    parser.add_argument(
        "--feature-gates", default="", metavar="GATES",
        help=f"comma-separated Name=true|false, e.g. {constants.FEATURE_GATE}=false to pass every pod "
        f"on every node (default: {constants.FEATURE_GATE}=true)",
    )
    parser.add_argument(
        "--max-body-bytes", type=byte_count, default=DEFAULT_MAX_BODY_BYTES, metavar="BYTES",
        help="refuse larger request bodies with HTTP 413 (default: %(default)s, 16 MiB)",
    )
    parser.add_argument(
        "--max-connections", type=positive_count, default=DEFAULT_MAX_CONNECTIONS, metavar="N",
        help="serve at most N connections at once, idle ones included; a request on another "
        "gets HTTP 503 (default: %(default)s)",
    )
    parser.add_argument(
        "--watch-timeout", type=positive_count, default=300, metavar="SECONDS",
        help="how long one watch request stays open before it is resumed (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    from podnetwork.cli import operatorshell
    from podnetwork.kube import client as kube
    from scheduler_plugin import app, cache, feeder, settings

    try:
        gates = settings.parse_feature_gates(args.feature_gates)
    except ValueError as exc:
        print(f"{COMMAND}: --feature-gates: {exc}", file=sys.stderr)
        return 2
    try:
        creds = credentials.resolve(args.kubeconfig, args.context)
        credentials.check(creds)
    except credentials.CredentialsError as exc:
        print(
            f"{COMMAND}: cannot load a cluster configuration: {exc}\n"
            "Run it in a pod with a service account, or pass --kubeconfig FILE.",
            file=sys.stderr,
        )
        return 1
    api = kube.AsyncApi(creds)
    state = cache.Cache()
    application = app.create_app(
        state,
        settings.Settings(multi_network=gates[constants.FEATURE_GATE], max_body_bytes=args.max_body_bytes),
    )
    try:
        with operatorshell.Shell(COMMAND) as shell:
            # Bound before the watches start: a port in use is a refusal, not a crash later.
            sockets = shell.listen(args.host, args.port, "pick another --host or --port")
            # uvicorn refuses a request once the open connections, its own included, reach
            # limit_concurrency: N served connections need N + 1.
            # No access log: kube-scheduler calls once per pod, and a line per call costs
            # throughput and floods the log (docs/benchmarks.md); GET /metrics counts them.
            shell.serve(application, sockets, log_level="info", access_log=False,
                        limit_concurrency=args.max_connections + 1)
            if args.probe_port is not None:
                probes = shell.listen(args.probe_host, args.probe_port,
                                      "pick another --probe-host or --probe-port")
                shell.serve(app.create_probe_app(state), probes, log_level="info", access_log=False)
            watcher = feeder.Feeder(state, api, watch_timeout=args.watch_timeout,
                                    read_timeout=args.watch_timeout + 30)
            watcher.start()
            try:
                asyncio.run(shell.run())
            finally:
                watcher.stop()
    except operatorshell.Refused as exc:
        return operatorshell.refuse(COMMAND, str(exc))
    return 0


command = Command(
    help="serve the scheduler extender (kube-scheduler extender v1) from a watch-fed cache",
    description=DESCRIPTION,
    configure=configure,
    run=run,
)
