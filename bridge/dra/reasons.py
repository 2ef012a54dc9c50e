"""Why a PodNetwork or a workload cannot be expressed as DRA objects.

The translation's reasons (`bridge.translate.Reason`: a missing PodNetwork, invalid
parameters) are kept as they are; these are the export's own. docs/dra.md has the
table, and a test holds the two together.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Why a PodNetwork or a workload cannot be expressed (translation reasons are kept too)."""

    INVALID_NETWORKS = "InvalidNetworks"
    INVALID_OBJECT = "InvalidObject"
    NOT_BRIDGE_PROVIDER = "NotBridgeProvider"
    DISABLED = "PodNetworkDisabled"
    CONFIG_ON_NODE = "ConfigOnNode"
    UNSUPPORTED_PLUGIN = "UnsupportedPlugin"
    CHAINED_PLUGINS = "ChainedPlugins"
    NO_DEVICE = "NoDevice"
    UNSUPPORTED_IPAM = "UnsupportedIPAM"
    UNSUPPORTED_KEY = "UnsupportedKey"
    DEFAULT_ROUTE = "DefaultRoute"
    ATTACHMENT_CHANGES_DEVICE = "AttachmentChangesDevice"
    PARAMETERS_TOO_LARGE = "ParametersTooLarge"


class Cannot(Exception):
    """What the driver's objects cannot express: the reason, and the message (`str()`)."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


__all__ = ["Cannot", "Reason"]
