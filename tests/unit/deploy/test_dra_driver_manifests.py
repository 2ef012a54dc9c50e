"""deploy/dra-driver/, checked without a cluster against the driver it runs: the DeviceClass is
what `podnetwork dra-driver --print-device-class` prints; the DaemonSet's command, as the driver's
parser reads it, puts both sockets and the state dir in folders mounted from the host at the same
path (the kubelet dials the paths the driver hands it); NODE_NAME comes from the pod's node.
The RBAC is proven on a real API server: tests/real/test_dra_driver.py runs the driver as its
ServiceAccount. It is optional: docs/deploy.md's Install does not apply it, "DRA (optional)" does."""

from __future__ import annotations

import io
import os
import re

import yaml

from bridge.dra.driver import command
from bridge.dracontract import names
from tests.unit.deploy.test_manifests import parses
from tests.unit.deploy_support import DEPLOY, ROOT, containers, render

HERE = DEPLOY / "dra-driver"


def test_the_device_class_is_what_the_driver_prints() -> None:
    out = io.StringIO()
    assert command.run(parses(["podnetwork", "dra-driver", "--print-device-class"]), out=out) == 0
    (printed,) = [d for d in yaml.safe_load_all(out.getvalue()) if d]
    (manifest,) = [d for d in yaml.safe_load_all((HERE / "deviceclass.yaml").read_text()) if d]
    assert manifest == printed
    (rendered,) = [o for o in render(HERE) if o["kind"] == "DeviceClass"]
    assert rendered == printed


def test_the_sockets_and_the_state_are_in_host_folders_mounted_at_the_same_path() -> None:
    (driver,) = containers(HERE)
    args = parses(driver.argv)
    assert args.driver_name == names.DEFAULT_DRIVER and not args.kubeconfig
    volumes = {v["name"]: v for v in driver.pod["volumes"]}
    mounted = {}
    for mount in driver.spec["volumeMounts"]:
        host = volumes[mount["name"]]["hostPath"]["path"]
        assert host == mount["mountPath"], mount
        mounted[mount["mountPath"]] = mount
    plugins = args.kubelet_plugins_dir
    registry = args.kubelet_registry_dir
    plugin_folder = os.path.dirname(names.plugin_socket(plugins, args.driver_name))
    assert plugin_folder in mounted
    assert os.path.dirname(names.registration_socket(registry, args.driver_name)) in mounted
    _, _, state = command._folders(args)
    assert str(state) == plugin_folder  # the records outlive the pod, beside the socket
    assert not command._problem(args.__class__(**{**vars(args), "node_name": "node-1"}))


def test_the_node_name_comes_from_the_pods_node() -> None:
    (driver,) = containers(HERE)
    env = {e["name"]: e for e in driver.spec["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "--node-name" not in " ".join(driver.argv)


def test_the_container_has_no_capability_and_no_privilege() -> None:
    (driver,) = containers(HERE)
    context = driver.spec["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["privileged"] is False and context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert not driver.pod.get("hostNetwork") and not driver.pod.get("hostPID")


def test_it_is_optional_documented_in_its_own_section_and_not_in_the_install() -> None:
    deploy_md = (ROOT / "docs" / "deploy.md").read_text()
    install = deploy_md.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    assert "deploy/dra-driver" not in install
    section = deploy_md.split("\n## DRA (optional)\n", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"^kubectl apply -k deploy/dra-driver/$", section, re.M)
    assert "deploy/dra-driver/" in (ROOT / "docs" / "dra.md").read_text()
