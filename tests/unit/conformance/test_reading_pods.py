"""How the suite reads what an implementation wrote on a pod: per-network pod IPs (KEP "Status") and
the NPWG selection (NPWG 4.1), in each form an implementation may write them."""

from __future__ import annotations

import json

from conformance.kep.tests import extended
from podnetwork.ground import constants


def test_pod_ips_come_from_status_pod_ips_naming_a_network_first() -> None:
    pod = {"status": {"podIPs": [{"ip": "10.0.0.5", "podNetwork": "default"}]},
           "metadata": {"annotations": {constants.POD_IPS_ANNOTATION: json.dumps(
               [{"ip": "10.9.0.5", "podNetwork": "blue"}])}}}
    assert extended._pod_ips(pod) == [{"ip": "10.0.0.5", "podNetwork": "default"}]


def test_pod_ips_without_networks_in_status_come_from_the_annotation() -> None:
    pod = {"status": {"podIPs": [{"ip": "10.0.0.5"}]},
           "metadata": {"annotations": {constants.POD_IPS_ANNOTATION: json.dumps(
               [{"ip": "10.9.0.5", "podNetwork": "blue", "interfaceName": "net1"}])}}}
    assert extended._pod_ips(pod) == [{"ip": "10.9.0.5", "podNetwork": "blue", "interfaceName": "net1"}]
    assert extended._pod_ips({"status": {"podIPs": [{"ip": "10.0.0.5"}]}}) == []


def test_an_npwg_selection_is_read_in_json_and_in_comma_form() -> None:
    assert extended._selected('[{"name": "dataplane", "namespace": "ns1", "interface": "net1"}, {"name": "b"}]',
                              "app") == ["ns1/dataplane", "app/b"]
    assert extended._selected("ns1/dataplane@net1, other", "app") == ["ns1/dataplane", "app/other"]
