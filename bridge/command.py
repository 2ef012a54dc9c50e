"""`podnetwork bridge`: run the bridge controller's handlers alone, against a cluster.

Heavy imports (kopf, the API client) stay inside `run`, so
`podnetwork --help` stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from podnetwork import webhookserver
from podnetwork.cli import Command
from podnetwork.kube import credentials

DESCRIPTION = """\
Run the NPWG bridge of KEP-3698 PodNetworks against the cluster of your kubeconfig
(or the in-cluster service account; docs/architecture.md "Reaching the API"):

  ParamsReady   on PodNetworks whose provider is multinetwork.x-k8s.io/npwg-bridge,
                and on their PodNetworkAttachments: True when the referenced
                NetworkAttachmentDefinition (and NetworkSelectionOptions) exist
                and are valid; False with ParametersNotFound, InvalidParameters or
                UnsupportedParametersKind otherwise. Follows NAD changes.
  selection     writes k8s.v1.cni.cncf.io/networks on pods that carry
                multinetwork.x-k8s.io/networks once everything they name is Ready,
                so Multus (or `podnetwork cni-agent`) attaches them. A hand-written
                selection that disagrees is left alone and reported in an Event.
  pod IPs       writes multinetwork.x-k8s.io/pod-ips from
                k8s.v1.cni.cncf.io/network-status.
  admission     with --webhook, serves the mutating webhook for pod CREATE on
                https://HOST:PORT/mutate-pods: a pod naming a bridge network gets
                its selection at once when everything is Ready, else the
                scheduling gate multinetwork.x-k8s.io/npwg-selection, removed in
                the write that adds the selection, so Multus never attaches the
                pod before its selection exists (Kubernetes >= 1.30;
                deploy/bridge/ registers it). Without --webhook-cert/--webhook-key
                a self-signed certificate for --webhook-host is made with openssl;
                --manage-webhooks registers the MutatingWebhookConfiguration with
                its CA bundle (development clusters).

The PodNetwork controller (Ready, InUse, the default PodNetwork) is a separate
process; without it nothing turns Ready and no selection is written.
Needs the CRDs in crds/ (NetworkAttachmentDefinition only if no NPWG
implementation installed it) and RBAC to read them, patch pods, post events and
patch the status of podnetworks and podnetworkattachments.

exit status: 0 after a clean stop (SIGINT/SIGTERM), 2 on bad arguments or no cluster
"""


def _configure(p: argparse.ArgumentParser) -> None:
    credentials.add_arguments(p)
    p.add_argument("-n", "--namespace", action="append", default=[], metavar="NS",
                   help="watch only this namespace for pods, attachments, NADs and options "
                   "(repeatable; glob patterns allowed); default: all namespaces")
    p.add_argument("--peering", metavar="NAME",
                   help="run with kopf peering under this name, so only one replica is active "
                   "(needs kopf's peering CRD); default: standalone")
    p.add_argument("--liveness", metavar="URL",
                   help="serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz")
    p.add_argument("--no-params-ready", dest="params_ready", action="store_false",
                   help="do not write ParamsReady")
    p.add_argument("--no-selection", dest="write_selection", action="store_false",
                   help="do not write k8s.v1.cni.cncf.io/networks on pods")
    p.add_argument("--no-pod-ips", dest="write_pod_ips", action="store_false",
                   help="do not write multinetwork.x-k8s.io/pod-ips on pods")
    p.add_argument("--webhook", action="store_true",
                   help="serve the mutating admission webhook for pods (selection or scheduling gate)")
    p.add_argument("--webhook-host", default="0.0.0.0", help="address to serve the webhook on")
    p.add_argument("--webhook-port", type=int, default=9444,
                   help="port to serve the webhook on (default 9444; the controller's is 9443)")
    p.add_argument("--webhook-cert", type=Path, help="TLS certificate (PEM) for the webhook")
    p.add_argument("--webhook-key", type=Path, help="TLS key (PEM) for the webhook")
    p.add_argument("--webhook-url", metavar="URL",
                   help="URL the API server uses to reach the webhook, for --manage-webhooks "
                   "(default https://HOST:PORT)")
    p.add_argument("--manage-webhooks", action="store_true",
                   help="create/update the MutatingWebhookConfiguration at startup, with the serving "
                   "certificate as its CA bundle (development; deploy/bridge/ registers it statically)")


def _webhook_problem(args: argparse.Namespace) -> str | None:
    if not args.webhook:
        if args.webhook_cert or args.webhook_key or args.manage_webhooks or args.webhook_url:
            return "--webhook-cert/--webhook-key/--webhook-url/--manage-webhooks need --webhook"
        return None
    if not args.write_selection:
        return ("--webhook gates pods until the bridge writes their selection, which --no-selection "
                "turns off: drop one of them")
    if bool(args.webhook_cert) != bool(args.webhook_key):
        return "--webhook-cert and --webhook-key go together"
    for path in (args.webhook_cert, args.webhook_key):
        if path is not None and not path.is_file():
            return f"{path} is not a readable file"
    if not 0 < args.webhook_port < 65536:
        return f"--webhook-port {args.webhook_port} is not a TCP port"
    if webhookserver.unreachable_registration(args.manage_webhooks, args.webhook_url, args.webhook_host):
        return (f"--manage-webhooks would register https://{args.webhook_host}:{args.webhook_port}, which "
                "the API server cannot call (and the webhook fails closed: every pod it covers would be "
                "refused); pass --webhook-url https://NAME:PORT with a name the API server reaches, or "
                "--webhook-host with such an address")
    return None


async def _serve(args: argparse.Namespace, registry: Any, bridge: Any) -> int:
    """kopf's operator and, with --webhook, uvicorn serving the webhook, until SIGINT/SIGTERM."""
    import kopf

    from bridge import admission

    stop = asyncio.Event()
    webhookserver.stop_on_signals(stop)
    tasks: list[asyncio.Task[Any]] = []
    server: Any = None
    with tempfile.TemporaryDirectory(prefix="podnetwork-bridge-webhook-") as tmp:
        if args.webhook:
            cert = webhookserver.certificate(args.webhook_cert, args.webhook_key, Path(tmp),
                                             args.webhook_host, args.webhook_url)
            if args.manage_webhooks:
                bridge.config.webhook_client_config = webhookserver.client_config(
                    args.webhook_url, args.webhook_host, args.webhook_port, cert)
            # Bound here, not by uvicorn, which exits the process when the port is taken.
            family = socket.AF_INET6 if ":" in args.webhook_host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((args.webhook_host, args.webhook_port))
            except OSError as exc:
                sock.close()
                print(f"error: cannot serve the webhook on {args.webhook_host}:{args.webhook_port}: "
                      f"{exc.strerror or exc}; pick another --webhook-host/--webhook-port", file=sys.stderr)
                return 2
            server = webhookserver.server(admission.app(bridge.objects), cert)
            tasks.append(asyncio.create_task(server.serve(sockets=[sock])))
        tasks.append(asyncio.create_task(kopf.operator(
            registry=registry,
            standalone=args.peering is None,
            peering_name=args.peering,
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            liveness_endpoint=args.liveness,
            stop_flag=stop,
        )))
        try:
            await webhookserver.run_until_stopped(tasks, stop, server)
        finally:
            await bridge.api.close()
    return 0


def _run(args: argparse.Namespace) -> int:
    import kopf

    from bridge import controller

    problem = _webhook_problem(args)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    problem = credentials.login_problem(args.kubeconfig, args.context)
    if problem is not None:
        print(f"error: cannot reach a cluster: {problem}; pass --kubeconfig FILE (and --context) "
              "or run in a pod with a service account", file=sys.stderr)
        return 2

    from podnetwork.kube import client as kube

    creds = credentials.resolve(args.kubeconfig, args.context)
    registry = kopf.OperatorRegistry()
    bridge = controller.Bridge(config=controller.BridgeSettings(
        params_ready=args.params_ready,
        write_selection=args.write_selection,
        write_pod_ips=args.write_pod_ips,
    ), api=kube.AsyncApi(creds))
    controller.register(registry, bridge)
    kopf.on.login(registry=registry, id="bridge_login")(credentials.kopf_login(creds))
    return asyncio.run(_serve(args, registry, bridge))


command = Command(
    help="run the NPWG bridge: ParamsReady, pod selections, pod IPs per PodNetwork",
    configure=_configure,
    run=_run,
    description=DESCRIPTION,
)

__all__ = ["command"]
