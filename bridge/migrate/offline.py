"""`podnetwork migrate -f`: plan from manifest files, without a cluster.

The NetworkAttachmentDefinitions must be among the inputs: a selection naming a
NAD that no input defines is reported as unmigratable, exactly as it would be
against a cluster that lacks it.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from bridge import migrate
from podnetwork import manifests

EXIT_OK = 0
EXIT_INCOMPLETE = 1
EXIT_USAGE = 2

OBJECTS_FILE = "00-podnetwork-migration.yaml"


def summary(p: migrate.Plan) -> str:
    created = Counter(o.obj["kind"] for o in p.objects())
    kinds = ("PodNetwork", "PodNetworkAttachment", migrate.OPTIONS_KIND)
    parts = [f"{created.get(kind, 0)} {kind}" for kind in kinds]
    line = f"plan: create {', '.join(parts)}; change {len(p.workloads)} workload(s)"
    if p.objects(migrate.Action.REUSE):
        line += f"; reuse {len(p.objects(migrate.Action.REUSE))} existing object(s)"
    if p.unmigratable:
        line += f"; {len(p.unmigratable)} cannot be migrated"
    if p.skipped:
        line += f"; {len(p.skipped)} skipped"
    return line


def write_manifests(
    directory: Path, p: migrate.Plan, documents: list[manifests.Document]
) -> list[Path]:
    """The objects to create, then every input file with its workloads rewritten."""
    directory.mkdir(parents=True, exist_ok=True)
    written = [directory / OBJECTS_FILE]
    written[0].write_text(migrate.dump_yaml(o.obj for o in p.objects()), encoding="utf-8")
    changes = {c.workload.source: c for c in p.workloads if c.workload.source}
    by_file: dict[str, list[dict[str, Any]]] = {}
    for doc in documents:
        change = changes.get(doc.source)
        by_file.setdefault(doc.path, []).append(migrate.rewrite(doc.obj, change) if change else doc.obj)
    used: Counter[str] = Counter()
    for path, objs in by_file.items():
        base = Path(path).name if path != manifests.STDIN_LABEL else "stdin.yaml"
        if Path(base).suffix.lower() == ".json":
            base = Path(base).with_suffix(".yaml").name
        used[base] += 1
        name = base if used[base] == 1 else f"{Path(base).stem}-{used[base]}{Path(base).suffix}"
        target = directory / name
        target.write_text(migrate.dump_yaml(objs), encoding="utf-8")
        written.append(target)
    return written


def report(p: migrate.Plan, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
    """The diff of `p` (unless --quiet), its problems, and with -o the plan file, to stdout
    when -o is `-` (the diff then goes to stderr, so stdout stays one YAML stream)."""
    diff_to = err if args.output == "-" else out
    if not args.quiet:
        diff_to.write(migrate.diff(p))
    err.write(migrate.problems(p))
    if args.output:
        if args.output == "-":
            out.write(migrate.to_yaml(p))
        else:
            Path(args.output).write_text(migrate.to_yaml(p), encoding="utf-8")


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
    report(p, args, out, err)
    if args.write_manifests:
        written = write_manifests(Path(args.write_manifests), p, loaded.documents)
        print(f"wrote {len(written)} file(s) to {args.write_manifests}", file=err)
    print(summary(p), file=err)
    return EXIT_INCOMPLETE if p.unmigratable else EXIT_OK


__all__ = ["report", "run", "summary", "write_manifests"]
