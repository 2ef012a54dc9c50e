"""The DeviceClass of the driver, and a ResourceClaimTemplate that asks it for PodNetworks (pure).

One DeviceClass per driver, named after it, selecting every device of the driver; a claim picks
the network by the device's `podNetwork` attribute. The driver does not write the class: a
DeviceClass is cluster-scoped and an administrator's (its selectors and config decide what any
claim of the class may get), and a daemon on every node should not hold the right to change it.
`podnetwork dra-driver --print-device-class` prints it for `kubectl apply -f -`.
"""

from __future__ import annotations

from collections.abc import Sequence

from bridge.dra import objects as dra
from bridge.dra.devices import cel_string
from bridge.dracontract import names


def device_class(driver: str) -> dra.DeviceClass:
    return dra.DeviceClass(
        metadata=dra.Meta(name=driver),
        spec=dra.DeviceClassSpec(selectors=[dra.DeviceSelector(
            cel=dra.CELDeviceSelector(expression=f"device.driver == {cel_string(driver)}"))]))


def podnetwork_selector(driver: str, podnetwork: str) -> str:
    """CEL that picks the device of `podnetwork` among the driver's."""
    return f"device.attributes[{cel_string(driver)}].{names.ATTRIBUTE_PODNETWORK} == {cel_string(podnetwork)}"


def claim_template(name: str, namespace: str, podnetworks: Sequence[str],
                   driver: str) -> dra.ResourceClaimTemplate:
    """A template whose claims ask for one device per PodNetwork, in order; request `i` is named
    `net<i>` (a request name is a DNS label; a PodNetwork's name need not be one)."""
    requests = [dra.DeviceRequest(name=f"net{i}", exactly=dra.ExactDeviceRequest(
        device_class_name=driver, selectors=[dra.DeviceSelector(cel=dra.CELDeviceSelector(
            expression=podnetwork_selector(driver, pn)))])) for i, pn in enumerate(podnetworks)]
    return dra.ResourceClaimTemplate(
        metadata=dra.Meta(name=name, namespace=namespace),
        spec=dra.ResourceClaimTemplateSpec(spec=dra.ResourceClaimSpec(devices=dra.DeviceClaim(requests=requests))))


__all__ = ["claim_template", "device_class", "podnetwork_selector"]
