"""The NPWG bridge against a real API server: ParamsReady of NAD-backed PodNetworks through the
status subresource (beside the controller's Ready), the selection its webhook writes at pod
CREATE, and its scheduling gate removed by a merge patch of spec.schedulingGates once the
network is Ready (the API server only lets gates be removed, never added, after creation).

Pods here carry a scheduling gate of the test's own as well, so none is ever run: what the
bridge writes is the question, not what an agent makes of it.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.real.cluster_support import PODNETWORK, Api, Cluster, eventually, pod_manifest
from tests.real.objects_support import (
    BRIDGE_PROVIDER,
    HOLD,
    NPWG_SELECTION,
    PODNETWORKS,
    Made,
    attachments,
    condition,
    events_of,
    nad_body,
    nad_ref,
    nads,
    pods,
    unique,
)

pytestmark = pytest.mark.usefixtures("components")
GATE = "multinetwork.x-k8s.io/npwg-selection"
MARKER = "bridge.multinetwork.x-k8s.io/networks-written"
OPTIONS = "/apis/bridge.multinetwork.x-k8s.io/v1alpha1/namespaces/{ns}/networkselectionoptions"


def _conditions(api: Api, network: str) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    got = api.find(f"{PODNETWORKS}/{network}")
    pair = [(c["status"], c["reason"]) if (c := condition(got, kind)) else None for kind in ("ParamsReady", "Ready")]
    return pair[0], pair[1]


def _bridge_network(made: Made, ns: str, nad: str) -> str:
    network = unique("br")
    made.podnetwork(network, provider=BRIDGE_PROVIDER, refs=[nad_ref(ns, nad)])
    return network


def test_a_bridge_podnetwork_is_params_ready_and_ready_while_its_nad_exists_and_follows_it(
        api: Api, made: Made, ns: str) -> None:
    made.create(nads(ns), nad_body("dataplane"))
    network = _bridge_network(made, ns, "dataplane")
    eventually(lambda: _conditions(api, network) == (("True", "ParametersReady"), ("True", "Ready")),
               "ParamsReady and Ready True")
    params = condition(api.get(f"{PODNETWORKS}/{network}"), "ParamsReady")
    assert params is not None and params["observedGeneration"] == 1 and params["lastTransitionTime"]

    api.delete(f"{nads(ns)}/dataplane")
    eventually(lambda: _conditions(api, network) == (("False", "ParametersNotFound"), ("False", "ParamsNotReady")),
               "the NAD's deletion turns both False")
    made.create(nads(ns), nad_body("dataplane"))
    eventually(lambda: _conditions(api, network) == (("True", "ParametersReady"), ("True", "Ready")),
               "the NAD back turns both True")


def test_a_bridge_podnetwork_of_a_missing_or_unusable_nad_is_not_params_ready(
        api: Api, made: Made, ns: str, control_plane: Cluster) -> None:
    missing = _bridge_network(made, ns, "absent")
    made.create(nads(ns), {**nad_body("garbled"), "spec": {"config": "{not json"}})
    garbled = _bridge_network(made, ns, "garbled")
    eventually(lambda: _conditions(api, missing) == (("False", "ParametersNotFound"), ("False", "ParamsNotReady")),
               "a missing NAD: ParametersNotFound")
    eventually(lambda: _conditions(api, garbled) == (("False", "InvalidParameters"), ("False", "ParamsNotReady")),
               "a NAD whose config is not JSON: InvalidParameters")
    message = condition(api.get(f"{PODNETWORKS}/{missing}"), "ParamsReady")["message"]  # type: ignore[index]
    assert f"{ns}/absent" in message
    explained = subprocess.run([str(PODNETWORK), "explain", "pn", missing], env=control_plane.env(),
                               capture_output=True, text=True, timeout=60)
    assert explained.returncode == 1, explained.stdout + explained.stderr
    assert f"{ns}/absent" in explained.stdout and "ParametersNotFound" in explained.stdout


def _selection(pod: dict[str, Any]) -> list[dict[str, Any]] | None:
    text = pod["metadata"].get("annotations", {}).get(NPWG_SELECTION)
    return json.loads(text) if text else None


def test_a_pod_naming_a_ready_bridge_network_gets_the_translated_npwg_selection(
        api: Api, made: Made, ns: str) -> None:
    made.create(nads(ns), nad_body("dataplane"))
    network = _bridge_network(made, ns, "dataplane")
    eventually(lambda: _conditions(api, network)[1] == ("True", "Ready"), "the network is Ready")
    # the webhook answers from the bridge's memory, which may lag the condition by a moment: then it gates
    # the pod and the bridge's controller writes the selection instead; either way the pod gets it
    created = made.pod(ns, pod_manifest("web", networks=[
        {"podNetworkName": "default"}, {"podNetworkName": network, "interfaceName": "net1", "isDefaultGW4": True}],
        schedulingGates=[HOLD]))
    pod = eventually(lambda: _selection(p := api.get(f"{pods(ns)}/web")) and p, "the selection is written")
    assert _selection(pod) == [{"name": "dataplane", "namespace": ns, "interface": "net1",
                                "default-route": ["10.77.0.1"]}]
    assert pod["metadata"]["annotations"].get(MARKER)
    assert pod["spec"]["schedulingGates"] == [HOLD], "the bridge's own gate is gone, the test's stays"
    if _selection(created):
        assert not any(g["name"] == GATE for g in created["spec"].get("schedulingGates", []))


def test_a_pod_naming_a_bridge_network_that_is_not_ready_is_gated_until_its_nad_exists(
        api: Api, made: Made, ns: str) -> None:
    network = _bridge_network(made, ns, "later")
    eventually(lambda: _conditions(api, network)[1] == ("False", "ParamsNotReady"), "the network is not Ready")
    created = made.pod(ns, pod_manifest("waits", networks=[{"podNetworkName": network}], schedulingGates=[HOLD]))
    assert created["spec"]["schedulingGates"] == [HOLD, {"name": GATE}]
    assert not _selection(created)
    said = eventually(lambda: events_of(api, ns, "waits", "SchedulingGated"), "the bridge says why")
    assert f'podnetwork "{network}" is not Ready: ParamsNotReady' in said[0]["message"]
    assert said[0]["type"] == "Warning"

    made.create(nads(ns), nad_body("later"))
    pod = eventually(lambda: _selection(p := api.get(f"{pods(ns)}/waits")) and p, "the selection is written")
    assert _selection(pod) == [{"name": "later", "namespace": ns}]
    # one merge patch wrote the selection and dropped only the bridge's gate
    assert pod["spec"]["schedulingGates"] == [HOLD]


def test_an_attachment_with_selection_options_is_params_ready_once_they_exist_and_its_pod_gets_them(
        api: Api, made: Made, ns: str) -> None:
    made.create(nads(ns), nad_body("dataplane"))
    network = _bridge_network(made, ns, "dataplane")
    path = f"{attachments(ns)}/db-0"
    made.create(attachments(ns), {
        "apiVersion": "multinetwork.x-k8s.io/v1alpha1", "kind": "PodNetworkAttachment", "metadata": {"name": "db-0"},
        "spec": {"podNetworkName": network, "parametersRefs": [
            {"group": "bridge.multinetwork.x-k8s.io", "kind": "NetworkSelectionOptions", "name": "db-0"}]}})

    def states() -> tuple[tuple[str, str] | None, ...]:
        got = api.find(path)
        return tuple((c["status"], c["reason"]) if (c := condition(got, kind)) else None
                     for kind in ("ParamsReady", "Ready"))

    # the bridge and the controller write one status, each its own condition, through the status subresource
    eventually(lambda: states() == (("False", "ParametersNotFound"), ("False", "ParamsNotReady")),
               "options missing: the attachment is not Ready")
    made.create(OPTIONS.format(ns=ns), {"apiVersion": "bridge.multinetwork.x-k8s.io/v1alpha1",
                                        "kind": "NetworkSelectionOptions", "metadata": {"name": "db-0"},
                                        "spec": {"mac": "02:00:00:00:00:0a"}})
    eventually(lambda: states() == (("True", "ParametersReady"), ("True", "Ready")), "options there: Ready")

    made.pod(ns, pod_manifest("db", networks=[{"podNetworkAttachmentName": "db-0", "interfaceName": "net1"}],
                              schedulingGates=[HOLD]))
    pod = eventually(lambda: _selection(p := api.get(f"{pods(ns)}/db")) and p, "the selection is written")
    assert _selection(pod) == [{"name": "dataplane", "namespace": ns, "interface": "net1",
                                "mac": "02:00:00:00:00:0a"}]


def test_a_pod_created_bound_to_a_node_is_not_gated_since_the_api_server_would_refuse_it(
        api: Api, made: Made, ns: str) -> None:
    # a gate on a pod that names its node is refused by the API server: the webhook must leave it alone
    created = made.pod(ns, pod_manifest("bound", networks=[{"podNetworkName": unique("absent")}],
                                        node=unique("no-such-node")))
    assert not created["spec"].get("schedulingGates")
    assert not _selection(created)


def test_a_hand_written_selection_that_disagrees_is_kept_and_the_pod_told_why(
        api: Api, made: Made, ns: str) -> None:
    made.create(nads(ns), nad_body("dataplane"))
    made.create(nads(ns), nad_body("other"))
    network = _bridge_network(made, ns, "dataplane")
    eventually(lambda: _conditions(api, network)[1] == ("True", "Ready"), "the network is Ready")
    created = made.pod(ns, pod_manifest("mine", networks=[{"podNetworkName": network}],
                                        annotations={NPWG_SELECTION: "other"}, schedulingGates=[HOLD]))
    assert created["spec"]["schedulingGates"] == [HOLD], "a pod with a selection of its own is not gated"
    said = eventually(lambda: events_of(api, ns, "mine", "SelectionDisagrees"), "the bridge says they disagree")
    assert said[0]["type"] == "Warning" and "other" in said[0]["message"]
    pod = api.get(f"{pods(ns)}/mine")
    assert pod["metadata"]["annotations"][NPWG_SELECTION] == "other"
    assert MARKER not in pod["metadata"]["annotations"]
