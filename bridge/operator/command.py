"""`podnetwork bridge`: run the bridge controller's handlers alone, against a cluster.

Heavy imports (kopf, the API client) stay inside `run`, so
`podnetwork --help` stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Any

from bridge.dracontract import names as dra_names
from podnetwork.cli import Command, arguments, logs, operatorshell
from podnetwork.ground import constants
from podnetwork.kube import credentials

if TYPE_CHECKING:
    from bridge.operator.admissionapp import PodNetworkListing
    from bridge.operator.serviceslices import Services
    from podnetwork.cli.metrics import OperatorMetrics
    from podnetwork.kube.credentials import Credentials

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
                k8s.v1.cni.cncf.io/network-status, and in the same write
                multinetwork.x-k8s.io/attachments: per attachment its PodNetwork,
                interface, IPs (CIDRs) and MAC, for a downward-API volume
                (docs/attachment-data.md).
  admission     with --webhook, serves the mutating webhook for pod CREATE on
                https://HOST:PORT/mutate-pods: a pod naming a bridge network gets
                its selection at once when everything is Ready, else the
                scheduling gate multinetwork.x-k8s.io/npwg-selection, removed in
                the write that adds the selection, so Multus never attaches the
                pod before its selection exists (Kubernetes >= 1.30;
                registered with --manage-webhooks once it answers). Without
                --webhook-cert/--webhook-key a self-signed certificate for
                --webhook-host and the host of --webhook-url is made at start
                (development clusters); deploy/bridge/ gives --webhook-service
                and --webhook-secret: the certificate is kept, renewed and
                reloaded from that Secret, and the configuration registered at
                the Service (docs/deploy.md "Webhook certificates").
  use           with --enforce-use-permission (and --webhook), also serves a validating
                webhook on /validate-pods: a pod whose k8s.v1.cni.cncf.io/networks names
                the NetworkAttachmentDefinition of a bridge PodNetwork it does not name
                in multinetwork.x-k8s.io/networks is refused unless the requesting user
                or its ServiceAccount may `use` that PodNetwork (SubjectAccessReviews,
                as `podnetwork controller --enforce-use-permission` asks them;
                docs/controller.md "Permission to use a PodNetwork").

  DRA claims    with --dra-claims DRIVER (and --webhook), the webhook also adds to each
                new pod one ResourceClaim per PodNetwork of its networks (not default),
                from a ResourceClaimTemplate per PodNetwork the bridge makes in the pod's
                namespace, so kube-scheduler places the pod on a node whose `podnetwork
                dra-driver` offers them, without the extender (docs/dra.md).

The PodNetwork controller (Ready, InUse, the default PodNetwork) is a separate
process; without it nothing turns Ready and no selection is written.
Needs the CRDs in crds/ (NetworkAttachmentDefinition only if no NPWG
implementation installed it) and RBAC to read them, patch pods, post events and
patch the status of podnetworks and podnetworkattachments.

High availability: replicas started with --peering NAME --priority start-time elect
one active bridge through kopf peering (the ClusterKopfPeering NAME; deploy/peering/
has the CRDs and objects); the others pause, and serve the webhook.

exit status: 0 after a clean stop (SIGINT/SIGTERM: kopf and the webhook stop together),
1 when an active replica is outranked by a peer (to restart as a clean standby),
2 on bad arguments, a webhook port in use, an unusable certificate or no cluster
"""

COMMAND = "podnetwork bridge"
#: Who manages what this command registers (the managed-by label; deploy/'s ClusterRole name).
COMPONENT = "podnetwork-bridge"

logger = logging.getLogger(__name__)


def _configure(p: argparse.ArgumentParser) -> None:
    credentials.add_arguments(p)
    p.add_argument("-n", "--namespace", action="append", default=[], metavar="NS",
                   help="watch only this namespace for pods, attachments, NADs and options "
                   "(repeatable; glob patterns allowed); default: all namespaces")
    p.add_argument("--peering", metavar="NAME",
                   help="run with kopf peering under this name (a ClusterKopfPeering object), so only "
                   "one replica is active; default: standalone (deploy/peering/ has the CRDs and objects)")
    p.add_argument("--priority", type=arguments.parse_priority, metavar="INT|start-time",
                   help="peering priority (needs --peering): the live replica with the highest reconciles, "
                   "the others pause; equal priorities pause all of them. `start-time` ranks replicas by "
                   "their arrival in the peering object (the first leads, each later one waits below every "
                   "live one), so replicas of one Deployment differ and none acts before it knows it "
                   "leads (default 0)")
    p.add_argument("--liveness", metavar="URL", type=arguments.liveness_url,
                   help="serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz")
    p.add_argument("--no-params-ready", dest="params_ready", action="store_false",
                   help="do not write ParamsReady")
    p.add_argument("--no-selection", dest="write_selection", action="store_false",
                   help="do not write k8s.v1.cni.cncf.io/networks on pods")
    p.add_argument("--no-pod-ips", dest="write_pod_ips", action="store_false",
                   help="do not write multinetwork.x-k8s.io/pod-ips on pods")
    p.add_argument("--no-attachment-data", dest="write_attachments", action="store_false",
                   help="do not write multinetwork.x-k8s.io/attachments (the data of each attachment, "
                   "for a downward-API volume: docs/attachment-data.md) on pods")
    p.add_argument("--no-services", dest="services", action="store_false",
                   help="do not write EndpointSlices for Services annotated "
                   f"{constants.SERVICE_PODNETWORK_ANNOTATION} (docs/services.md)")
    p.add_argument("--webhook", action="store_true",
                   help="serve the mutating admission webhook for pods (selection or scheduling gate)")
    p.add_argument("--enforce-use-permission", action="store_true",
                   help="with --webhook, also serve (and register) a validating webhook refusing a pod "
                   "whose NPWG selection names the NetworkAttachmentDefinition of a bridge PodNetwork "
                   "that neither the requesting user nor the pod's ServiceAccount may `use` "
                   "(SubjectAccessReviews; needs `create` on subjectaccessreviews). Off by default; "
                   "turn it on with the controller's flag of the same name")
    p.add_argument("--dra-claims", metavar="DRIVER", dest="dra_claims",
                   help="with --webhook, add to each new pod one DRA ResourceClaim per PodNetwork of its "
                   f"{constants.NETWORKS_ANNOTATION} (not default), from a ResourceClaimTemplate the bridge "
                   "makes in the pod's namespace asking DRIVER's DeviceClass for the PodNetwork's device, "
                   "so kube-scheduler places the pod by its networks without the extender. DRIVER is "
                   "the name `podnetwork dra-driver` runs under (default dra.multinetwork.x-k8s.io); "
                   "off by default (docs/dra.md \"Claims made at admission\")")
    # Port 9444: the controller's webhooks take 9443 by default.
    operatorshell.add_webhook_arguments(p, default_port=9444)
    arguments.add_metrics_arguments(p)


def webhook_flags(args: argparse.Namespace) -> operatorshell.WebhookFlags:
    return operatorshell.WebhookFlags.from_args(args, serve=args.webhook)


def features(args: argparse.Namespace) -> dict[str, object]:
    """What this bridge does, for its start-up line."""
    return {"params-ready": args.params_ready, "selection": args.write_selection,
            "pod-ips": args.write_pod_ips, "attachment-data": args.write_attachments,
            "services": args.services, "webhook": args.webhook,
            "enforce-use-permission": args.enforce_use_permission, "dra-claims": args.dra_claims or "off",
            "namespaces": args.namespace or ["all"],
            "peering": args.peering or "standalone"}


def _problem(args: argparse.Namespace) -> str | None:
    if args.priority is not None and args.peering is None:
        return ("--priority only matters among peers: add --peering NAME (a ClusterKopfPeering object), "
                "or drop --priority")
    if args.enforce_use_permission and not args.webhook:
        return ("--enforce-use-permission is enforced by the bridge's validating webhook, which "
                "--webhook serves: add --webhook")
    if args.dra_claims is not None:
        if not args.webhook:
            return ("--dra-claims adds claims to pods in the bridge's mutating webhook, which --webhook "
                    "serves: add --webhook")
        problem = dra_names.driver_name_problem(args.dra_claims)
        if problem is not None:
            return problem.replace("--driver-name", "--dra-claims")
    problem = operatorshell.webhook_problem(webhook_flags(args), turn_on="add --webhook")
    if problem is None and args.webhook and not args.write_selection:
        return ("--webhook gates pods until the bridge writes their selection, which --no-selection "
                "turns off: drop one of them")
    return problem


def metrics(bridge: Any, listing: PodNetworkListing | None = None) -> Any:
    """The bridge's metrics (docs/metrics.md): the shared operator ones, the writes of its API
    client, the LISTs of PodNetworks of its validating webhook (`listing`), and what it holds
    in memory. Returns a `podnetwork.cli.metrics.OperatorMetrics`."""
    from podnetwork.cli import metrics as kube_metrics

    measured = kube_metrics.OperatorMetrics("bridge")
    if bridge.api is not None:
        bridge.api.on_write = measured.on_write
    listings = measured.counter(
        "podnetwork_listings", "LISTs of PodNetworks by the validating webhook of --enforce-use-permission, "
        "for a NAD its memory cannot vouch for, by outcome (listed, failed).", ["outcome"])
    if listing is not None:
        listing.on_read = lambda outcome: listings.labels(outcome).inc()
    measured.gauge("cached_objects", "Objects the bridge's translations read, held in memory, by kind.",
                   lambda: {(constants.PODNETWORK_KIND,): len(bridge.podnetworks),
                            (constants.ATTACHMENT_KIND,): len(bridge.attachments),
                            (constants.NAD_KIND,): len(bridge.nads),
                            (constants.OPTIONS_KIND,): len(bridge.options)}, ["kind"])
    measured.gauge("waiting_pods", "Pods whose selection waits for their networks to exist or "
                   "turn Ready.", lambda: len(bridge.waiting))
    measured.gauge("nad_users_entries", "NetworkAttachmentDefinitions named by a parametersRefs "
                   "(the bridge's reverse index).", lambda: len(bridge.nad_users))
    return measured


async def _serve(args: argparse.Namespace, registry: Any, bridge: Any, measured: Any = None,
                 listing: PodNetworkListing | None = None, cluster: Credentials | None = None) -> int:
    """kopf's operator and, with --webhook, the webhook, until SIGINT/SIGTERM; 2 when the
    webhook cannot be served (port in use, unusable certificate), or `cluster` does not answer
    as an API server, before anything started; 1 when an active replica was outranked by a
    peer (it restarts as a standby)."""
    from bridge.operator import admission, admissionapp
    from podnetwork.kep.admissionreads import UseCache, UseReviews
    from podnetwork.kube import peering

    flags = webhook_flags(args)
    demoted = asyncio.Event()
    identity = peering.identity()
    try:
        with operatorshell.Shell(COMMAND) as shell:
            if args.peering is not None:
                def demote() -> None:
                    logger.error("another replica of peering %r outranks this one, which was active: "
                                 "exiting, to restart as a standby with a clean memory", args.peering)
                    demoted.set()
                    shell.stop.set()

                # Objects deleted while paused never reach a resumed bridge's caches.
                operatorshell.register_demotion_guard(registry, bridge.api, identity, demote)
            enforce = args.enforce_use_permission
            may_use = UseReviews(bridge.api, UseCache(), who="the bridge").may_use if enforce else None
            # What the watch-fed memory cannot vouch for (a PodNetwork created a moment ago, or
            # any while peering pauses this replica) is listed from the API, with the same client.
            listing = listing or admissionapp.PodNetworkListing(bridge.api)
            webhook = admissionapp.app(bridge.objects, may_use=may_use,
                                       podnetworks=listing.podnetworks if enforce else None,
                                       dra_driver=args.dra_claims)
            if measured is not None:
                from podnetwork.cli import metrics as kube_metrics

                shell.metrics(kube_metrics.asgi_app(measured.registry), args.metrics_host, args.metrics_port)
                webhook = measured.webhook(webhook)
            if flags.serve:
                endpoint = shell.webhook(flags)
                server = shell.serve(webhook, endpoint.sockets, endpoint.serving,
                                     max_body_bytes=flags.max_body_bytes, ready_probe=True)
                if flags.manage:
                    shell.keep_webhooks(endpoint, server, bridge.api, component=COMPONENT,
                                        configurations=functools.partial(admission.webhook_configurations,
                                                                         enforce_use=enforce),
                                        retired=admission.retired_configurations(enforce_use=enforce))
            if cluster is not None:
                shell.check_server(cluster)
            shell.operator(
                registry=registry,
                standalone=args.peering is None,
                peering_name=args.peering,
                priority=args.priority or 0,
                identity=identity,
                clusterwide=not args.namespace,
                namespaces=args.namespace,
                liveness_endpoint=args.liveness,
            )
            await shell.run()
    except operatorshell.Refused as exc:
        return operatorshell.refuse(COMMAND, str(exc))
    finally:
        await bridge.api.close()
    return 1 if demoted.is_set() else 0


def _run(args: argparse.Namespace) -> int:
    import kopf

    from bridge.operator import controller

    problem = _problem(args)
    if problem is not None:
        return operatorshell.refuse(COMMAND, problem)
    problem = credentials.login_problem(args.kubeconfig, args.context)
    if problem is not None:
        return operatorshell.refuse(COMMAND, f"cannot reach a cluster: {problem}; pass --kubeconfig FILE "
                                    "(and --context) or run in a pod with a service account")
    from bridge.operator import admission, admissionapp
    from podnetwork.kube import client as kube

    logs.operator_logging(args.verbose)
    creds = credentials.resolve(args.kubeconfig, args.context)
    paths = [admission.MUTATE_PATH] + ([admission.VALIDATE_PATH] if args.enforce_use_permission else [])
    served = operatorshell.webhook_summary(webhook_flags(args), paths)
    logs.log_start(COMMAND, cluster=creds.describe, webhook=served, features=features(args))
    registry = kopf.OperatorRegistry()
    api = kube.AsyncApi(creds)
    bridge = controller.Bridge(config=controller.BridgeSettings(
        params_ready=args.params_ready,
        write_selection=args.write_selection,
        write_pod_ips=args.write_pod_ips,
        write_attachments=args.write_attachments,
        dra_driver=args.dra_claims,
    ), api=api)
    listing = admissionapp.PodNetworkListing(api)
    measured = metrics(bridge, listing)
    controller.register(registry, bridge, measured)
    if args.services:
        from bridge.operator import serviceslices

        slices = serviceslices.Services(api=api)
        serviceslices.register(registry, slices, measured)
        service_metrics(measured, slices)
    kopf.on.login(registry=registry, id="bridge_login")(credentials.kopf_login(creds))
    return asyncio.run(_serve(args, registry, bridge, measured, listing, creds))


def service_metrics(measured: OperatorMetrics, slices: Services) -> None:
    """The Services controller's gauge (docs/metrics.md), on the bridge's registry."""
    measured.gauge("service_memory", "What the Services controller holds: pods, Services, our "
                   "EndpointSlices.", lambda: {
                       ("pods",): sum(map(len, slices.pods.values())),
                       ("services",): len(slices.served),
                       ("endpointslices",): sum(map(len, slices.slices.values()))}, ["what"])


command = Command(
    help="run the NPWG bridge: ParamsReady, pod selections, pod IPs per PodNetwork",
    configure=_configure,
    run=_run,
    description=DESCRIPTION,
)

__all__ = ["command"]
