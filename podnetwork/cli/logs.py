"""How the commands log: the format and level `-v` sets, and the operators' start-up line."""

from __future__ import annotations

import logging
from collections.abc import Mapping

logger = logging.getLogger(__name__)

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: Loggers of the operators' own code. At the default verbosity they log at INFO (start-up,
#: every write, every warning) while the libraries (kopf logs every handler it runs at INFO,
#: aiohttp and httpx every request) stay at the root's WARNING; `-v` shows everything.
OWN_LOGGERS = ("podnetwork", "bridge")


def setup(verbose: int) -> None:
    """The root logger for `podnetwork [-v|-vv] COMMAND`: WARNING, INFO or DEBUG, to stderr."""
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    logging.basicConfig(level=level, format=FORMAT)


def operator_logging(verbose: int) -> None:
    """Our loggers at INFO unless `-v`/`-vv` already set the root lower (`setup`)."""
    if verbose == 0:
        for name in OWN_LOGGERS:
            logging.getLogger(name).setLevel(logging.INFO)


def version() -> str:
    """The installed version of this project, as its start-up line says."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("podnetwork")
    except PackageNotFoundError:
        return "unknown"


def log_start(command: str, *, cluster: str, webhook: str, features: Mapping[str, object]) -> None:
    """One INFO line when an operator starts: version, cluster, webhooks, features."""
    listed = ", ".join(f"{name}={_shown(value)}" for name, value in features.items())
    logger.info("%s %s starting: cluster %s; webhooks %s; features %s", command, version(), cluster, webhook,
                listed)


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return "+".join(str(v) for v in value) or "none"
    return str(value)


__all__ = ["FORMAT", "OWN_LOGGERS", "log_start", "operator_logging", "setup", "version"]
