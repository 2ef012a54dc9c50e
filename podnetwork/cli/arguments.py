"""Argument types and flag groups the commands share: the same words for the same mistake.

Each type raises `argparse.ArgumentTypeError` saying what was expected, so argparse prints
`podnetwork COMMAND: error: argument --FLAG: invalid ...` and exits 2. Imports stay light:
`podnetwork --help` builds every command's parser.
"""

from __future__ import annotations

import argparse
import time
import urllib.parse

from podnetwork.ground import names


def tcp_port(text: str) -> int:
    """A TCP port to listen on, 1 to 65535 (an argparse type: the flags of every command)."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: expected a number from 1 to 65535")
    return port


def positive_seconds(text: str) -> float:
    """A number of seconds, more than 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(
            f"invalid interval {text!r}: expected a number of seconds, more than 0")
    return value


def non_negative_seconds(text: str) -> float:
    """A number of seconds, 0 or more (0: the flag's "off", as its help says)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(
            f"invalid interval {text!r}: expected a number of seconds, 0 or more")
    return value


def _whole_number(what: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: expected a whole number, 1 or more")
    return value


def positive_count(text: str) -> int:
    """A whole number, 1 or more: connections, seconds of a server-side timeout."""
    return _whole_number("number", text)


def byte_count(text: str) -> int:
    """A whole number of bytes, 1 or more: the limits on what a client may send."""
    return _whole_number("byte count", text)


def service_reference(text: str) -> tuple[str, str]:
    """`--webhook-service`: NAMESPACE/NAME, both DNS-1123 labels."""
    namespace, sep, name = text.partition("/")
    if not sep or not names.is_dns1123_label(namespace) or not names.is_dns1123_label(name):
        raise argparse.ArgumentTypeError(
            f"invalid Service {text!r}: expected NAMESPACE/NAME, each lower-case letters, digits and '-'")
    return namespace, name


def liveness_url(text: str) -> str:
    """`--liveness`: where kopf serves its liveness probe, http://HOST:PORT/PATH. kopf takes only
    http, and the probe must be found where the pod's livenessProbe looks: host and port given."""
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None or not 0 < port < 65536 \
            or not parts.path.startswith("/") or parts.username is not None or parts.query or parts.fragment:
        raise argparse.ArgumentTypeError(
            f"invalid URL {text!r}: expected http://HOST:PORT/PATH, e.g. http://0.0.0.0:8080/healthz")
    return text


START_TIME = "start-time"


class StartTime(int):
    """A `--priority start-time`: the value to start from, ranked by arrival when joining
    (`podnetwork.kube.peering.join`), unlike an integer given, which is kept as it is."""


def parse_priority(text: str) -> int:
    """`--priority`: an integer, or `start-time` (minus the current time in microseconds).

    kopf pauses every replica that sees a live peer of higher priority, and all
    of them when two share the highest one (kopf docs "Peering", "Priorities"),
    so the replicas of one Deployment, which share their arguments, need a value
    that differs per process. An earlier arrival gives a higher priority: a new
    replica waits behind the running one instead of taking over from it. Arrival,
    not the process's start: two replicas starting together are ranked by the
    order of their first keep-alives in the peering object, which the API server
    decides (`podnetwork.kube.peering.join`), so that none acts before it knows it leads.
    """
    if text == START_TIME:
        return StartTime(-(time.time_ns() // 1_000))
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid priority {text!r}: expected an integer or {START_TIME!r}") from None


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    """--metrics-host/--metrics-port: where Prometheus scrapes the command (plain HTTP, GET
    /metrics; docs/metrics.md). Off unless --metrics-port is given."""
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="address to serve the Prometheus metrics on (default 127.0.0.1; "
                        "0.0.0.0 for a scrape from another pod)")
    parser.add_argument("--metrics-port", type=tcp_port, default=None, metavar="PORT",
                        help="serve the Prometheus metrics over plain HTTP at GET /metrics on this "
                        "port (default: not served)")


__all__ = ["START_TIME", "StartTime", "add_metrics_arguments", "byte_count", "liveness_url",
           "non_negative_seconds", "parse_priority", "positive_count", "positive_seconds",
           "service_reference", "tcp_port"]
