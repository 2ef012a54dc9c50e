"""The features of the KEP-3698 suite: named sets of tests an implementation claims as a whole.

As Gateway API's SupportedFeatures: an implementation declares the features it
supports (`--features`, or a profile that names a set of them), and the suite runs
the tests of those features only. Each feature says what it needs from the cluster,
so a reader of a report knows which component a skipped or failed test points at.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from podnetwork.ground import constants


class Level(StrEnum):
    CORE = "Core"
    """What every implementation of the KEP's Phase I API must do."""
    EXTENDED = "Extended"
    """Later phases and optional parts: scheduling, per-node availability, pod IPs..."""


@dataclass(frozen=True)
class Feature:
    name: str
    level: Level
    summary: str
    needs: tuple[str, ...]
    """What the cluster must run for the feature's tests to be set up at all."""
    opt_in: bool = False
    """Run only when named with `--features`, in no profile: an alternative to features a profile
    holds (a cluster that places pods through DRA need not also serve them as devices), so a
    profile's run on a cluster with one of the two does not report the other as missing."""


CRDS = "the PodNetwork and PodNetworkAttachment APIs served (CRDs or built in), with their validation"
CONTROLLER = "a PodNetwork controller (KEP \"PodNetwork Controller\")"
ADMISSION = "pod admission for networks (a mutating and validating webhook, or the API server itself)"
SCHEDULER = "a kube-scheduler that binds pods"
EXTENDER = "an extender or plugin in kube-scheduler that checks a pod's networks (KEP \"Active validations\")"
KUBELET = "kubelets that run pods"
NODE_NETWORKS = ("nodes that list the PodNetworks they offer in the annotation "
                 f"{constants.NODE_PODNETWORKS_ANNOTATION} (absent: all), and permission to patch two nodes' "
                 "annotations for the test")
CNI_AGENT = "a CNI agent (or runtime) on the nodes that attaches every network a pod names"
POLICY = (f"an implementation of {constants.POLICY_KIND} ({constants.POLICY_API_VERSION}, its CRD "
          "installed) for PodNetworks, and a PodNetwork the cluster attaches to pods (--policy-network)")
PRIMARY = ("a PodNetwork the cluster attaches to pods as their only network (--primary-network), whose "
           "pods the nodes reach for the readiness probe (this project: its node-access annotation)")
SERVICES = ("an implementation of Services on PodNetworks: EndpointSlices of a network's addresses for a "
            f"Service annotated {constants.SERVICE_PODNETWORK_ANNOTATION} (managed-by "
            f"{constants.ENDPOINTSLICE_MANAGED_BY}), Events on the Services it refuses")
SERVICE_NETWORK = ("for the ClusterIP test: a PodNetwork the cluster attaches to pods (--service-network), "
                   "on whose pods a Service's ClusterIP reaches its endpoints")
PROBE_IMAGE = "the probe image (--probe-image, a busybox with nc) pullable by the nodes"
DRA_DRIVER = ("a DRA driver (resource.k8s.io/v1) that publishes in each node's ResourceSlices one device per "
              "Ready PodNetwork the node offers, with the PodNetwork's name as a string attribute, shareable "
              "by many pods (--dra-driver, --dra-attribute), and a DeviceClass for its devices "
              "(--dra-device-class, default the driver's name); two schedulable nodes where it publishes")
DRA_NETWORK_DATA = ("a DRA driver that writes, once a pod's network is attached, KEP-4817 networkData on "
                    "its claim (status.devices[]), and a PodNetwork the cluster attaches to pods "
                    "(--dra-network), which the pod names in its networks too and a node is made to offer")
NPWG_BRIDGE = ("the NPWG bridge: NetworkAttachmentDefinitions served and a provider that sets ParamsReady "
               f"and writes the NPWG selection {constants.NPWG_NETWORKS_ANNOTATION}")

FEATURES: tuple[Feature, ...] = (
    Feature("PodNetworkAPI", Level.CORE,
            "PodNetwork and PodNetworkAttachment are served; spec is immutable except PodNetwork's enabled",
            (CRDS,)),
    Feature("PodNetworkConditions", Level.CORE,
            "Ready follows enabled and ParamsReady, with the KEP's reasons",
            (CRDS, CONTROLLER)),
    Feature("DefaultPodNetwork", Level.CORE,
            "the PodNetwork `default` exists, is Ready, and cannot be deleted",
            (CRDS, CONTROLLER)),
    Feature("InUseProtection", Level.CORE,
            "a PodNetwork or attachment named by a pod keeps a finalizer and is not deleted until the pod "
            "is gone",
            (CRDS, CONTROLLER)),
    Feature("PodNetworkAttachment", Level.CORE,
            "an attachment is Ready only while its PodNetwork is; PodNetworkNotReady otherwise",
            (CRDS, CONTROLLER)),
    Feature("StaticValidation", Level.CORE,
            "a pod whose networks break the KEP's static rules is refused at creation",
            (ADMISSION,)),
    Feature("AutoPopulation", Level.CORE,
            "a pod that names no network is given the `default` PodNetwork; a hostNetwork pod none",
            (ADMISSION,)),
    Feature("ActiveValidation", Level.EXTENDED,
            "a pod naming a missing or not Ready network stays Pending with a reason, and is scheduled once "
            "it is Ready",
            (SCHEDULER, EXTENDER, CONTROLLER)),
    Feature("PerNodeAvailability", Level.EXTENDED,
            "a pod is bound only to a node that offers every PodNetwork it names (Req 18)",
            (SCHEDULER, EXTENDER, NODE_NETWORKS)),
    Feature("NamespaceDefaultNetworks", Level.EXTENDED,
            "a namespace's default networks are given to its pods that name none (Phase IV req. 23)",
            (ADMISSION,)),
    Feature("PodIPsPerNetwork", Level.EXTENDED,
            "a running pod reports one IP per family per network it is attached to (KEP \"Status\")",
            (SCHEDULER, KUBELET, CNI_AGENT)),
    Feature("NPWGBridge", Level.EXTENDED,
            "PodNetworks whose parameters are NetworkAttachmentDefinitions: ParamsReady, and the NPWG "
            "selection on pods",
            (CRDS, CONTROLLER, NPWG_BRIDGE)),
    Feature("NetworkPolicy", Level.EXTENDED,
            "a MultiNetworkPolicy isolates the pods it selects on a PodNetwork and lets in only what it "
            "allows (Phase III Req 22)",
            (SCHEDULER, KUBELET, CNI_AGENT, POLICY, PROBE_IMAGE)),
    Feature("PrimaryPodNetwork", Level.EXTENDED,
            "a pod that lists one PodNetwork and not default gets exactly that network, marked default; "
            "a kubelet readiness probe reaches it over that network (KEP \"the list is explicit\", Req 19)",
            (SCHEDULER, KUBELET, CNI_AGENT, PRIMARY, PROBE_IMAGE)),
    Feature("Services", Level.EXTENDED,
            "a Service annotated with a PodNetwork gets EndpointSlices of exactly its pods' addresses on "
            "that network; with pods that run, a client on the network reaches the backends through the "
            "ClusterIP (Phase III Req 22)",
            (CRDS, CONTROLLER, SERVICES, SCHEDULER, KUBELET, CNI_AGENT, SERVICE_NETWORK, PROBE_IMAGE)),
    Feature("DRAPlacement", Level.EXTENDED,
            "PodNetworks served as DRA devices where nodes offer them (Req 18): kube-scheduler's own "
            "allocator binds a pod claiming a PodNetwork to a node that offers it, holds it Pending when "
            "none does, and the claim is deallocated when the pod goes (KEP \"DRA integration "
            "(alternative)\")",
            (CRDS, CONTROLLER, SCHEDULER, NODE_NETWORKS, DRA_DRIVER), opt_in=True),
    Feature("DRANetworkData", Level.EXTENDED,
            "a running pod's claim for a PodNetwork reports the interface the network became in the pod, in "
            "KEP-4817's networkData: its name and the pod's addresses on that network",
            (SCHEDULER, KUBELET, CNI_AGENT, NODE_NETWORKS, DRA_DRIVER, DRA_NETWORK_DATA), opt_in=True),
)

BY_NAME: dict[str, Feature] = {f.name: f for f in FEATURES}

#: Profiles: the feature sets `--profile` names. "extended" includes "core"; neither holds an opt-in
#: feature (`Feature.opt_in`), which runs only when `--features` names it.
PROFILES: dict[str, tuple[str, ...]] = {
    "core": tuple(f.name for f in FEATURES if f.level is Level.CORE and not f.opt_in),
    "extended": tuple(f.name for f in FEATURES if not f.opt_in),
}
OPT_IN: tuple[str, ...] = tuple(f.name for f in FEATURES if f.opt_in)


class UnknownFeature(ValueError):
    pass


def resolve(names: list[str]) -> tuple[str, ...]:
    """Feature names in suite order; a name that is no feature is an error listing the known ones."""
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise UnknownFeature(f"unknown feature(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    wanted = set(names)
    return tuple(f.name for f in FEATURES if f.name in wanted)
