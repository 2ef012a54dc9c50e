"""`podnetwork bridge`: run the bridge controller's handlers alone, against a cluster.

Heavy imports (kopf, the kubernetes client) stay inside `run`, so
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

from podnetwork import credentials, webhookserver
from podnetwork.cli import Command

DESCRIPTION = """\
Run the NPWG bridge of KEP-3698 PodNetworks against the cluster of your kubeconfig
(or the in-cluster service account):

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
                its CA bundle (development clusters). Bodies over
                --webhook-max-body-bytes get 413 unread, a body that is not an
                AdmissionReview 400 (docs/bridge.md "Limits and malformed requests").

The PodNetwork controller (Ready, InUse, the default PodNetwork) is a separate
process; without it nothing turns Ready and no selection is written.
Needs the CRDs in crds/ (NetworkAttachmentDefinition only if no NPWG
implementation installed it) and RBAC to read them, patch pods, post events and
patch the status of podnetworks and podnetworkattachments.

exit status: 0 after a clean stop (SIGINT/SIGTERM), 2 on bad arguments or no cluster
"""


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", metavar="FILE",
                   help="kubeconfig file (default: in-cluster service account, then $KUBECONFIG "
                   "or ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: the current context)")
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
    p.add_argument("--webhook-max-body-bytes", type=webhookserver.byte_count,
                   default=webhookserver.MAX_BODY_BYTES, metavar="BYTES",
                   help="refuse larger webhook request bodies with HTTP 413, before reading them "
                   "(default 3145728: 3 MiB, the API server's own cap on a request body)")
    p.add_argument("--manage-webhooks", action="store_true",
                   help="create/update the MutatingWebhookConfiguration at startup, with the serving "
                   "certificate as its CA bundle (development; deploy/bridge/ registers it statically)")


def _login_from(kubeconfig: str | None, context: str | None) -> Any:
    """A kopf login handler for an explicit kubeconfig/context (kopf's default takes neither)."""
    import kopf
    from kubernetes import client, config

    def login(**_: Any) -> kopf.ConnectionInfo:
        cfg = client.Configuration()
        try:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        except (config.ConfigException, OSError) as exc:
            raise kopf.LoginError(f"cannot use kubeconfig {kubeconfig or '(default)'}: {exc}") from None
        header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix("authorization")
        parts = header.split(" ", 1) if header else []
        scheme, token = (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else parts
        return kopf.ConnectionInfo(
            server=cfg.host,
            ca_path=cfg.ssl_ca_cert,
            insecure=not cfg.verify_ssl,
            username=cfg.username or None,
            password=cfg.password or None,
            scheme=scheme,
            token=token,
            certificate_path=cfg.cert_file,
            private_key_path=cfg.key_file,
        )

    return login


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
            server = webhookserver.server(admission.app(bridge.objects), cert,
                                          max_body_bytes=args.webhook_max_body_bytes)
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
        await webhookserver.run_until_stopped(tasks, stop, server)
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

    registry = kopf.OperatorRegistry()
    bridge = controller.Bridge(config=controller.BridgeSettings(
        params_ready=args.params_ready,
        write_selection=args.write_selection,
        write_pod_ips=args.write_pod_ips,
    ))
    controller.register(registry, bridge)
    if args.kubeconfig or args.context:
        kopf.on.login(registry=registry, id="bridge_login")(_login_from(args.kubeconfig, args.context))
    else:
        kopf.on.login(registry=registry, id="bridge_login")(kopf.login_via_client)
    return asyncio.run(_serve(args, registry, bridge))


command = Command(
    help="run the NPWG bridge: ParamsReady, pod selections, pod IPs per PodNetwork",
    configure=_configure,
    run=_run,
    description=DESCRIPTION,
)

__all__ = ["command"]
