"""`podnetwork migrate -f`: plan from manifest files, without a cluster.

The NetworkAttachmentDefinitions must be among the inputs: a selection naming a
NAD that no input defines is reported as unmigratable, exactly as it would be
against a cluster that lacks it.
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from bridge import migrate
from podnetwork.cli import manifests, outputs
from podnetwork.ground import constants

EXIT_OK = 0
EXIT_INCOMPLETE = 1
EXIT_USAGE = 2

OBJECTS_FILE = "00-podnetwork-migration.yaml"


def summary(p: migrate.Plan) -> str:
    created = Counter(o.obj["kind"] for o in p.objects())
    kinds = (constants.PODNETWORK_KIND, constants.ATTACHMENT_KIND, constants.OPTIONS_KIND)
    parts = [f"{created.get(kind, 0)} {kind}" for kind in kinds]
    line = f"plan: create {', '.join(parts)}; change {len(p.workloads)} workload(s)"
    if p.objects(migrate.Action.REUSE):
        line += f"; reuse {len(p.objects(migrate.Action.REUSE))} existing object(s)"
    if p.unmigratable:
        line += f"; {len(p.unmigratable)} cannot be migrated"
    if p.skipped:
        line += f"; {len(p.skipped)} skipped"
    return line


def _free_name(base: str, taken: set[str]) -> str:
    """`base`, or `stem-N.suffix` with the smallest N >= 2 that no other file of the directory took."""
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{Path(base).stem}-{n}{Path(base).suffix}"
    taken.add(name)
    return name


@dataclass(frozen=True)
class Written:
    """A file `write_manifests` wrote, and the input it came from (None: the generated objects)."""

    path: Path
    source: str | None = None
    renamed_because: str = ""
    """Why the input's file name was not free (the objects file's, or another input's); empty if it was."""


def write_manifests(
    directory: Path, p: migrate.Plan, documents: list[manifests.Document]
) -> list[Written]:
    """The objects to create, then every input file with its workloads rewritten.

    Every file gets a name of its own: an input named like the objects file (a re-run over
    a previous output) or like another input is written as `NAME-2.yaml`, never over it.
    Raises `outputs.OutputError`.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise outputs.OutputError(
            f"--write-manifests {directory}: cannot create it: {exc.strerror}") from None
    taken = {OBJECTS_FILE}
    written = [Written(directory / OBJECTS_FILE)]
    changes = {c.workload.source: c for c in p.workloads if c.workload.source}
    by_file: dict[str, list[dict[str, Any]]] = {}
    for doc in documents:
        change = changes.get(doc.source)
        by_file.setdefault(doc.path, []).append(migrate.rewrite(doc.obj, change) if change else doc.obj)
    texts = [migrate.dump_yaml(o.obj for o in p.objects())]
    for path, objs in by_file.items():
        base = Path(path).name if path != manifests.STDIN_LABEL else "stdin.yaml"
        if Path(base).suffix.lower() == ".json":
            base = Path(base).with_suffix(".yaml").name
        name = _free_name(base, taken)
        why = "" if name == base else (
            "the objects to create" if base == OBJECTS_FILE else "another input file of that name")
        written.append(Written(directory / name, path, why))
        texts.append(migrate.dump_yaml(objs))
    for file, text in zip(written, texts, strict=True):
        outputs.write(file.path, text, "--write-manifests")
    return written


def report(p: migrate.Plan, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
    """The diff of `p` (unless --quiet), its problems, and with -o the plan file, to stdout
    when -o is `-` (the diff then goes to stderr, so stdout stays one YAML stream).
    Raises `outputs.OutputError` when the plan file cannot be written."""
    diff_to = err if args.output == "-" else out
    if not args.quiet:
        diff_to.write(migrate.diff(p))
    err.write(migrate.problems(p))
    if args.output is not None:
        if args.output == "-":
            out.write(migrate.to_yaml(p))
        else:
            outputs.write(args.output, migrate.to_yaml(p), "-o")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    loaded = manifests.scan(args.filename, recursive=args.recursive, limits=manifests.limits_from(args))
    if loaded.errors:
        for error in loaded.errors:
            print(f"podnetwork migrate: {error}", file=err)
        print("podnetwork migrate: nothing planned; fix the input above", file=err)
        return EXIT_USAGE
    namespace = args.namespace or "default"
    inventory = migrate.Inventory()
    for doc in loaded.documents:
        inventory.add(doc.obj, default_namespace=namespace, source=doc.source)
    p = migrate.plan(inventory)
    try:
        report(p, args, out, err)
        if args.write_manifests is not None:
            written = write_manifests(Path(args.write_manifests), p, loaded.documents)
    except outputs.OutputError as exc:
        print(f"podnetwork migrate: {exc}", file=err)
        return EXIT_USAGE
    if args.write_manifests is not None:
        for file in written:
            if file.renamed_because:
                print(f"i {file.source}: written as {file.path}: its name is taken by {file.renamed_because}",
                      file=err)
        print(f"wrote {len(written)} file(s) to {args.write_manifests}", file=err)
    print(summary(p), file=err)
    return EXIT_INCOMPLETE if p.unmigratable else EXIT_OK


__all__ = ["Written", "report", "run", "summary", "write_manifests"]
