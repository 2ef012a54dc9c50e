"""The names the DRA driver puts on the wire: its driver name, its devices' attributes, its sockets.

A PodNetwork becomes one device of this driver per node that offers it (`bridge.dra.driver.slices`).
Kubernetes spells the limits (resource.k8s.io/v1 API reference, "ResourceSlice v1"): a device name
is a DNS label, an attribute's string value at most 64 characters, a slice at most 128 devices.
"""

from __future__ import annotations

import hashlib
import os

from podnetwork.ground import constants, names

#: The driver's default name: a DNS subdomain in the project's API group (Kubernetes asks for a name
#: in a domain its vendor owns). Short on purpose: the kubelet finds the plugin by the socket
#: `<plugins_registry>/<driver>.sock`, and a unix socket's path is at most `MAX_SOCKET_PATH` bytes.
DEFAULT_DRIVER = f"dra.{constants.GROUP}"
#: A DRA driver name is a DNS subdomain of at most 63 characters (ResourceSlice v1 `spec.driver`).
MAX_DRIVER_NAME = 63

#: Device attributes (in the driver's domain: `device.attributes["<driver>"].podNetwork` in CEL).
ATTRIBUTE_PODNETWORK = "podNetwork"
ATTRIBUTE_PROVIDER = "provider"
#: An attribute's string value is at most 64 characters (DeviceAttribute v1 `string`).
MAX_ATTRIBUTE_STRING = 64
#: A ResourceSlice lists at most 128 devices (ResourceSliceSpec v1 `devices`).
MAX_DEVICES_PER_SLICE = 128

#: The kubelet's gRPC names (../shared/specs/kubelet-plugins/README.md).
PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin",)
#: The longest unix socket path gRPC's core listens on: `sun_path` is 108 bytes, and grpcio 1.85
#: refuses 106 ("Path name should not have more than 107 characters"; measured, 105 binds).
MAX_SOCKET_PATH = 105


def device_name(podnetwork: str) -> str:
    """The device of a PodNetwork: its own name when that is a DNS label (most are), else `pn-` and
    16 hex digits of its SHA-256 (a PodNetwork's name is a DNS subdomain: dots, up to 253 characters).
    The `podNetwork` attribute carries the name itself; selectors match on it, not on this."""
    if len(podnetwork) <= names.DNS1123_LABEL_MAX and names.is_dns1123_label(podnetwork):
        return podnetwork
    return "pn-" + hashlib.sha256(podnetwork.encode()).hexdigest()[:16]


def slice_name(node: str, driver: str, index: int) -> str:
    """The `index`th ResourceSlice of `node`'s pool: `<node>-<driver>-<index>` when that is a DNS
    subdomain of at most 253 characters, else a digest of it (names are the driver's own business:
    it finds its slices by `spec.nodeName` and `spec.driver`)."""
    name = f"{node}-{driver}-{index}"
    if len(name) <= names.DNS1123_SUBDOMAIN_MAX and names.is_dns1123_subdomain(name) and all(
            len(label) <= names.DNS1123_LABEL_MAX for label in name.split(".")):
        return name
    return f"pn-{hashlib.sha256(f'{node}/{driver}'.encode()).hexdigest()[:24]}-{index}"


def driver_name_problem(driver: str) -> str | None:
    if not driver or len(driver) > MAX_DRIVER_NAME or not names.is_dns1123_subdomain(driver):
        return (f"--driver-name {driver!r} is not a DNS subdomain of at most {MAX_DRIVER_NAME} characters "
                f"(lower-case letters, digits, '-' and '.'), e.g. {DEFAULT_DRIVER}")
    return None


def node_name_problem(node: str) -> str | None:
    if not node:
        return "no node name: pass --node-name (a DaemonSet sets it from spec.nodeName through NODE_NAME)"
    if len(node) > names.DNS1123_SUBDOMAIN_MAX or not names.is_dns1123_subdomain(node):
        return f"--node-name {node!r} is not a DNS subdomain, so it names no Node"
    return None


def registration_socket(registry_dir: str, driver: str) -> str:
    """Where the kubelet's plugin watcher finds the driver: `<plugin name>.sock`, the form its README
    recommends (`-reg` left out: the kit's kubelet root is deep, and the path must stay short)."""
    return os.path.join(registry_dir, f"{driver}.sock")


def plugin_socket(plugins_dir: str, driver: str) -> str:
    """The DRAPlugin service's socket, in the driver's own folder of the kubelet's plugins dir."""
    return os.path.join(plugins_dir, driver, "dra.sock")


def socket_problem(path: str, flag: str) -> str | None:
    length = len(os.fsencode(path))
    if length > MAX_SOCKET_PATH:
        return (f"the socket {path} is {length} bytes long; a unix socket's path is at most "
                f"{MAX_SOCKET_PATH}: shorten {flag} (or --driver-name, which names the socket)")
    return None


__all__ = ["ATTRIBUTE_PODNETWORK", "ATTRIBUTE_PROVIDER", "DEFAULT_DRIVER", "MAX_ATTRIBUTE_STRING",
           "MAX_DEVICES_PER_SLICE", "MAX_DRIVER_NAME", "MAX_SOCKET_PATH", "PLUGIN_TYPE", "SUPPORTED_VERSIONS",
           "device_name", "driver_name_problem", "node_name_problem", "plugin_socket", "registration_socket",
           "slice_name", "socket_problem"]
