"""`podnetwork validate`: the KEP's static checks on manifests, offline.

Checks what the API server and the admission webhook would refuse, without a
cluster: PodNetworks and PodNetworkAttachments against the API (the rules the
CRD schema enforces), and Pods' networks annotation against the KEP's "Static
validations". Pod templates inside Deployments, Jobs etc. are not checked.

Exit status: 0 when every object is valid, 1 when any object or document is
invalid, 2 when an input cannot be read or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from podnetwork import cli
from podnetwork.cli import manifests
from podnetwork.ground import constants, excerpts
from podnetwork.ground.fielderrors import FieldError, invalid
from podnetwork.kep import validation

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2

Validator = Callable[[Mapping[str, Any]], list[FieldError]]

#: (API group, kind) -> the static checks for that kind.
VALIDATORS: dict[tuple[str, str], Validator] = {
    (constants.GROUP, constants.PODNETWORK_KIND): validation.validate_podnetwork,
    (constants.GROUP, constants.ATTACHMENT_KIND): validation.validate_attachment,
    ("", "Pod"): validation.validate_pod,
}

DESCRIPTION = """\
Check manifests offline with the same rules the cluster applies:

  PodNetwork, PodNetworkAttachment   the API schema (names, provider length,
                                     parametersRefs, conditions, unknown fields)
  Pod                                the multinetwork.x-k8s.io/networks annotation
                                     (KEP-3698 "Static validations": one entry per
                                     network, unique interface names, at most one
                                     default gateway per family, no hostNetwork)

Every problem is printed on its own line as
  SOURCE KIND NAMESPACE/NAME: FIELD: PROBLEM
where SOURCE is FILE:doc N. Objects of other kinds (Deployments, Services, ...)
are skipped (listed with -v); an unknown kind in the multinetwork.x-k8s.io group
is an error, since it is almost always a typo.

A directory contributes its *.yaml, *.yml and *.json files; its subdirectories
only with -R (a directory reached twice through symbolic links is read once).
`-f -` reads standard input.

Hostile input is refused with a message naming the file and line, never half
read: only regular files (no FIFOs, devices, sockets), at most --max-file-size
each (default {_LIMITS}); YAML aliases may add at most {_ALIASES} nodes to a file
(no alias bombs) and documents nest at most {_DEPTH} levels deep.

exit status: 0 valid, 1 invalid, 2 unreadable input or bad arguments
""".format(
    _LIMITS=manifests.size_text(manifests.DEFAULT_LIMITS.max_file_bytes).split(" (")[0],
    _ALIASES=manifests.DEFAULT_LIMITS.max_alias_nodes,
    _DEPTH=manifests.DEFAULT_LIMITS.max_depth,
)


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE_OR_DIR",
        help="manifest file, directory, or - for stdin (repeatable)",
    )
    parser.add_argument(
        "-R", "--recursive", action="store_true", help="also read the subdirectories of directories"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        dest="validate_verbose",
        action="count",
        default=0,
        help="also list skipped objects and valid ones",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no summary line on stderr, only the problems"
    )
    manifests.add_limit_arguments(parser)


def object_errors(doc: manifests.Document) -> list[FieldError] | None:
    """The problems of one object, or None when its kind is not checked here."""
    key = (doc.group, doc.kind)
    check = VALIDATORS.get(key)
    if check is not None:
        return check(doc.obj)
    if doc.group == constants.GROUP:
        known = ", ".join(kind for group, kind in VALIDATORS if group == constants.GROUP)
        return [
            invalid("kind", doc.kind, f"not a kind of {constants.GROUP}; known kinds are {known}")
        ]
    return None


def check(
    inputs: list[str],
    *,
    recursive: bool = False,
    verbose: int = 0,
    quiet: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stdin: TextIO | None = None,
    limits: manifests.Limits = manifests.DEFAULT_LIMITS,
) -> int:
    """Validate every object of `inputs`; print problems; return the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    loaded = manifests.scan(inputs, recursive=recursive, stdin=stdin, limits=limits)
    problems = 0
    for error in loaded.errors:
        # Unreadable input is the caller's mistake, not a finding about an object.
        print(str(error), file=err if isinstance(error, manifests.ManifestIOError) else out)
        problems += 1
    checked = skipped = invalid_objects = 0
    for doc in loaded.documents:
        errors = object_errors(doc)
        # Kind and name are the user's strings: a megabyte-long name is cut, not printed.
        label = f"{doc.source} {excerpts.cut(doc.kind)} {excerpts.cut(doc.ref) or '<no name>'}"
        if errors is None:
            skipped += 1
            if verbose:
                print(
                    f"{label}: skipped: kind {excerpts.cut(doc.kind)} ({excerpts.cut(doc.api_version)}) "
                    "is not checked",
                    file=out,
                )
            continue
        checked += 1
        if errors:
            invalid_objects += 1
        elif verbose:
            print(f"{label}: valid", file=out)
        for e in errors:
            print(f"{label}: {e}", file=out)
            problems += 1
    if not quiet:
        print(
            f"podnetwork validate: {problems} problem{'s' if problems != 1 else ''}; "
            f"{checked} object{'s' if checked != 1 else ''} checked, {invalid_objects} invalid, "
            f"{skipped} skipped",
            file=err,
        )
    if any(isinstance(e, manifests.ManifestIOError) for e in loaded.errors):
        return EXIT_USAGE
    return EXIT_INVALID if problems else EXIT_OK


def _run(args: argparse.Namespace) -> int:
    return check(
        args.filename,
        recursive=args.recursive,
        verbose=max(args.validate_verbose, getattr(args, "verbose", 0)),
        quiet=args.quiet,
        limits=manifests.limits_from(args),
    )


command = cli.Command(
    help="check PodNetwork, PodNetworkAttachment and Pod manifests offline",
    description=DESCRIPTION,
    configure=_configure,
    run=_run,
)
