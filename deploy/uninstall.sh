#!/bin/sh
# Removes podnetwork from the cluster kubectl points at: everything docs/deploy.md "## Install"
# made, and what the components made themselves (the `default` PodNetwork, the webhook
# configurations and their Secrets, the agent's conflist and shim on every node). This is
# docs/deploy.md "## Uninstall" (`make uninstall` runs it). Run it again at any point: every
# step accepts what an earlier run, or a partial install, left or already removed.
#
# The order matters:
#   1. the agents remove their conflist and shim, then their DaemonSet goes: the nodes run
#      their own network again; the DRA driver (deploy/dra-driver/, when installed) goes too;
#   2. the operators (extender, bridge, controller) stop, and their pods are waited for: the
#      controller re-creates `default` when it is deleted and keeps the in-use finalizer on
#      every PodNetwork a pod uses (every pod uses `default`), so nothing would ever end while
#      it runs; their webhook configurations go with them (pods are refused while one exists
#      that nothing answers);
#   3. with the controller gone, nobody releases the in-use finalizers: they are removed here;
#   4. the policy protecting `default` goes, and once the API server no longer applies it (its
#      policy cache lags behind the delete) the PodNetworks and attachments are deleted;
#   5. the CRDs and the peering objects, then the namespace.
#
# usage: deploy/uninstall.sh [--keep-npwg-crds]
#   --keep-npwg-crds  keep the NetworkAttachmentDefinition and MultiNetworkPolicy CRDs (and so
#                     every NAD and policy): for a cluster where Multus or the multi-networkpolicy
#                     project installed them first.
# environment: KUBECTL (default kubectl), UNINSTALL_TIMEOUT (seconds per wait, default 120).
set -eu

cd "$(dirname "$0")/.."
KUBECTL="${KUBECTL:-kubectl}"
TIMEOUT="${UNINSTALL_TIMEOUT:-120}"
NS=multinetwork-system
GROUP=multinetwork.x-k8s.io
KEEP_NPWG=
for arg in "$@"; do
    case "$arg" in
        --keep-npwg-crds) KEEP_NPWG=1 ;;
        -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "uninstall: unknown argument $arg (see --help)" >&2; exit 2 ;;
    esac
done

say() { printf 'uninstall: %s\n' "$*"; }
fail() { printf 'uninstall: FAILED: %s\n' "$*" >&2; exit 1; }
k() { "$KUBECTL" "$@"; }
# A kind exists while its CRD does; deleting objects of a kind that does not is an error even
# with --ignore-not-found, so each such step asks first.
crd_exists() { [ -n "$(k get crd "$1" --ignore-not-found -o name)" ]; }

# until_empty WHAT COMMAND...: poll COMMAND (its output lists what is left) until it prints
# nothing, for at most $TIMEOUT seconds; then fail, naming what is left.
until_empty() {
    what=$1
    shift
    waited=0
    while left=$("$@" 2>&1) && [ -n "$left" ]; do
        if [ "$waited" -ge "$TIMEOUT" ]; then
            fail "$what: still there after ${TIMEOUT}s: $(echo "$left" | tr '\n' ' ')"
        fi
        sleep 2
        waited=$((waited + 2))
    done
    [ -z "$left" ] || fail "$what: $left"
}

pods_of() { k -n "$NS" get pods -l "app.kubernetes.io/name=$1" -o name --ignore-not-found 2>/dev/null || true; }

# 1. The agents: each removes its conflist, then its shim, from its node, while it still runs.
if [ -n "$(k get namespace "$NS" --ignore-not-found -o name)" ]; then
    for pod in $(k -n "$NS" get pods -l app.kubernetes.io/name=multinetwork-cni-agent \
                 --field-selector=status.phase=Running -o name); do
        node=$(k -n "$NS" get "$pod" -o jsonpath='{.spec.nodeName}')
        if k -n "$NS" exec "$pod" -c agent -- podnetwork cni-agent --uninstall \
                --cni-bin-dir=/opt/cni/bin --cni-conf-dir=/etc/cni/net.d; then
            say "node $node: the agent's conflist and shim removed"
        else
            say "node $node: could not remove the agent's files; on the node, as root:" \
                "rm -f /etc/cni/net.d/00-multinetwork.conflist /opt/cni/bin/multinetwork /opt/cni/bin/.multinetwork.py"
        fi
    done
fi
say "deleting the CNI agent DaemonSet"
k delete -k deploy/agent/ --ignore-not-found --wait=false
until_empty "the CNI agent's pods" pods_of multinetwork-cni-agent
# The DRA driver (deploy/dra-driver/, optional), where the API serves its kinds. Its ResourceSlices
# would go 30 s after it stopped (the kubelet wipes them): deleted now instead.
if k get --raw /apis/resource.k8s.io/v1 >/dev/null 2>&1; then
    say "deleting the DRA driver (deploy/dra-driver/) and its ResourceSlices"
    k delete -k deploy/dra-driver/ --ignore-not-found --wait=false
    until_empty "the DRA driver's pods" pods_of multinetwork-dra-driver
    k delete resourceslices.resource.k8s.io --field-selector spec.driver=dra.multinetwork.x-k8s.io \
        --ignore-not-found
    # The templates the bridge made for the claims of --dra-claims, in every namespace (claims made
    # from them belong to their pods, which the garbage collector deletes them with).
    say "deleting the ResourceClaimTemplates the bridge made (--dra-claims)"
    k delete resourceclaimtemplates.resource.k8s.io -A -l app.kubernetes.io/managed-by=podnetwork-bridge \
        --ignore-not-found
fi

# 2. The operators. Deleting a component's ClusterRole makes the garbage collector delete the
# webhook configurations it owns, and a replica still running registers none again.
for component in scheduler bridge controller; do
    say "deleting deploy/$component/"
    k delete -k "deploy/$component/" --ignore-not-found --wait=false
done
until_empty "the extender's pods" pods_of podnetwork-scheduler
until_empty "the bridge's pods" pods_of podnetwork-bridge
until_empty "the controller's pods" pods_of podnetwork-controller
k delete mutatingwebhookconfiguration,validatingwebhookconfiguration \
    -l app.kubernetes.io/part-of=podnetwork --ignore-not-found
until_empty "the webhook configurations" \
    k get mutatingwebhookconfiguration,validatingwebhookconfiguration -l app.kubernetes.io/part-of=podnetwork -o name

# 3. and 4. The PodNetworks and attachments: no controller releases their in-use finalizers now.
if crd_exists "podnetworks.$GROUP"; then
    for obj in $(k get "podnetworks.$GROUP" -o name); do
        k patch "$obj" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null
    done
fi
if crd_exists "podnetworkattachments.$GROUP"; then
    k get "podnetworkattachments.$GROUP" -A --no-headers \
        -o custom-columns=NS:.metadata.namespace,NAME:.metadata.name | while read -r ns name; do
        k -n "$ns" patch "podnetworkattachments.$GROUP" "$name" --type=merge \
            -p '{"metadata":{"finalizers":null}}' >/dev/null
    done
    k delete "podnetworkattachments.$GROUP" --all -A --ignore-not-found
fi
say "deleting the policy that protects the default PodNetwork"
k delete -f crds/default-podnetwork-protection.yaml --ignore-not-found
if crd_exists "podnetworks.$GROUP"; then
    # The API server applies a deleted binding for a while longer: ask (dry run) until it lets
    # the delete of `default` through.
    refused() {
        if [ -n "$(k get "podnetworks.$GROUP" default --ignore-not-found -o name)" ]; then
            k delete "podnetworks.$GROUP" default --dry-run=server >/dev/null 2>&1 || echo refused
        fi
    }
    until_empty "the delete of the default PodNetwork (the protecting policy still applies)" refused
    k delete "podnetworks.$GROUP" --all --ignore-not-found
fi

# 5. The CRDs (crds/ holds admission policies too), the peering objects, the namespace.
if crd_exists clusterkopfpeerings.kopf.dev; then
    k delete clusterkopfpeerings.kopf.dev podnetwork-controller podnetwork-bridge --ignore-not-found
fi
for file in crds/*.yaml deploy/peering/peering-crds.yaml; do
    case "$file" in
        crds/network-attachment-definitions.yaml|crds/multi-networkpolicy.yaml)
            if [ -n "$KEEP_NPWG" ]; then say "keeping $file (--keep-npwg-crds)"; continue; fi ;;
    esac
    k delete -f "$file" --ignore-not-found --wait=false
done
say "deleting the namespace $NS"
k delete -k deploy/namespace/ --ignore-not-found --wait=false
left_behind() {
    k get crd -o name | grep -E "\.($GROUP|kopf\.dev)$" || true
    if [ -z "$KEEP_NPWG" ]; then k get crd -o name | grep -E '\.k8s\.cni\.cncf\.io$' || true; fi
    k get namespace "$NS" --ignore-not-found -o name
    k get validatingadmissionpolicy,validatingadmissionpolicybinding -o name | grep "\.$GROUP$" || true
}
until_empty "podnetwork's CRDs, policies and namespace" left_behind
say "done: podnetwork is uninstalled"
