"""`podnetwork npwg-conformance`: run an NPWG delegating plugin through the scenarios, as a runtime would.

`command` has the shape of `podnetwork.cli.Command` (help, configure, run,
description), built here without importing `podnetwork.cli`: the harness judges
any implementation and imports nothing of this project's (`.importlinter`,
contract "npwg-conformance-standalone").
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import signal
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conformance.npwg import bench as bench_mod
from conformance.npwg import report, scenarios


@dataclass(frozen=True)
class Command:
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str = ""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--plugin",
        type=Path,
        metavar="PATH",
        help="the delegating plugin's executable, run as the container runtime runs it",
    )
    p.add_argument(
        "--conf",
        type=Path,
        metavar="FILE",
        help='the plugin\'s own network configuration (JSON, one plugin with "type"), with ${NAME} '
        "placeholders (--list shows them); default: this project's shim, with --daemon starting its agent",
    )
    p.add_argument(
        "--daemon",
        metavar="COMMAND",
        help="a process the plugin needs running (a thick plugin's daemon), started once before the "
        "scenarios and stopped (SIGTERM) after; placeholders as in --conf",
    )
    p.add_argument(
        "--daemon-ready",
        metavar="PATH",
        help="wait until this path exists before the first scenario (e.g. the daemon's socket)",
    )
    p.add_argument(
        "--scenario",
        action="append",
        default=[],
        metavar="ID",
        help="run only this scenario (repeatable); --list shows them",
    )
    p.add_argument("--list", action="store_true", help="list the scenarios and the placeholders, and exit")
    p.add_argument("--report", metavar="FILE", help="also write the results as JSON to FILE")
    p.add_argument(
        "--cni-version",
        default="1.0.0",
        choices=["0.3.1", "0.4.0", "1.0.0", "1.1.0"],
        help="the CNI version of the runtime and of every delegate configuration (default: %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="time one execution of the plugin may take (default: %(default)s)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the bench's directory (recordings, daemon log) and print where it is",
    )


def _listing() -> str:
    rows = [f"  {s.id:<22} [{', '.join(s.sections)}] {s.title}" for s in scenarios.SCENARIOS]
    holes = [f"  ${{{k}}}: {v}" for k, v in bench_mod.PLACEHOLDERS.items()]
    return (
        "scenarios:\n"
        + "\n".join(rows)
        + "\n\nplaceholders in --conf, --daemon, --daemon-ready:\n"
        + "\n".join(holes)
    )


def _report_problem(target: str) -> str | None:
    """What stops --report from being written, before any scenario runs. The rules of
    podnetwork.cli.outputs.problem, restated: the harness imports nothing of this project."""
    if not target.strip():
        return "--report: an empty path; give a file name"
    if target.endswith("/") or Path(target).name in ("", ".", ".."):
        return f"--report {target}: names a directory; give a file name"
    try:
        st = os.stat(target)
    except FileNotFoundError:
        parent = Path(os.path.realpath(target)).parent
        if not parent.is_dir():
            return (f"--report {target}: the directory {parent} does not exist; create it first, "
                    "or write elsewhere")
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"--report {target}: cannot create a file in {parent}"
        return None
    except OSError as exc:
        return f"--report {target}: cannot be written: {exc.strerror}"
    if stat.S_ISDIR(st.st_mode):
        return f"--report {target}: is a directory; give a file name inside it"
    return None if os.access(target, os.W_OK) else f"--report {target}: not writable"


def _problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the command line or the host, before anything is made."""
    out: list[str] = []
    plugin: Path | None = args.plugin
    if plugin is None:
        out.append("--plugin PATH is required: the delegating plugin's executable")
    elif not plugin.exists():
        out.append(f"--plugin {plugin}: no such file")
    elif not plugin.is_file() or not plugin.stat().st_mode & 0o111:
        out.append(f"--plugin {plugin}: not an executable file (chmod +x it, or give the binary's path)")
    if args.conf is not None and not args.conf.exists():
        out.append(f"--conf {args.conf}: no such file")
    elif args.conf is not None and not args.conf.is_file():
        out.append(f"--conf {args.conf}: not a regular file")
    if args.daemon_ready and not args.daemon:
        out.append("--daemon-ready needs --daemon")
    if args.report is not None and (problem := _report_problem(args.report)):
        out.append(problem)
    if args.timeout <= 0:
        out.append(f"--timeout must be positive, got {args.timeout:g}")
    if os.geteuid() != 0:
        out.append("the harness creates network namespaces for the pods: run it as root")
    if shutil.which("ip") is None:
        out.append("the harness needs iproute2's `ip` to create network namespaces")
    return out


def _plugin_setup(
    args: argparse.Namespace, problems: list[str]
) -> tuple[str | None, str, str | None, str | None]:
    """The conf template (None when unreadable), where it came from, the daemon and its ready path."""
    if args.conf is None:
        daemon = args.daemon or bench_mod.PODNETWORK_DAEMON
        ready = args.daemon_ready if args.daemon else bench_mod.PODNETWORK_READY
        return bench_mod.PODNETWORK_CONF, "the built-in podnetwork shim configuration", daemon, ready
    if not args.conf.is_file():
        return None, "", None, None
    template, problem = read_conf(args.conf)
    if problem is not None:
        problems.append(f"--conf {args.conf}: {problem}")
        return None, "", None, None
    return template, f"--conf {args.conf}", args.daemon, args.daemon_ready


#: The largest --conf read: a CNI configuration is a few KiB; the runtime pipes it to the plugin,
#: and this project's agent refuses more than 1 MiB of it by default (--max-request-bytes).
MAX_CONF_BYTES = 1024 * 1024


def read_conf(path: Path, limit: int = MAX_CONF_BYTES) -> tuple[str | None, str | None]:
    """(the text of --conf, None), or (None, what is wrong with it and the fix): a regular file
    of at most `limit` bytes, UTF-8. Worded as the manifest commands word their files."""
    fix = "give the plugin's CNI configuration file"
    most = f"the {limit // 1024 // 1024} MiB ({limit} bytes) a network configuration may have; {fix}"
    try:
        # O_NONBLOCK: a path that became a FIFO since it was checked must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        problem = (exc.strerror or str(exc)).lower()
        if exc.errno in (errno.EACCES, errno.EPERM):
            return None, f"{problem}; give a file this user (uid {os.geteuid()}) may read"
        return None, problem
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, f"not a regular file; {fix}"
        if info.st_size > limit:
            return None, f"is {info.st_size} bytes, more than {most}"
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            return None, (exc.strerror or str(exc)).lower()
    if len(data) > limit:  # it grew since fstat
        return None, f"is more than {most}"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte {exc.start}); save it as UTF-8"


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def run(args: argparse.Namespace) -> int:
    if args.list:
        print(_listing())
        return 0
    try:
        chosen = scenarios.select(args.scenario)
    except ValueError as exc:
        print(f"error: --scenario: {exc}", file=sys.stderr)
        return 2
    problems = _problems(args)
    template, source, daemon, ready = _plugin_setup(args, problems)
    if template is not None:
        try:
            bench_mod.validate(template, source, daemon, ready, args.cni_version)
        except bench_mod.BenchError as exc:
            problems.append(str(exc))
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    assert args.plugin is not None and template is not None
    bench = bench_mod.Bench(
        plugin=args.plugin.resolve(),
        conf_template=template,
        conf_source=source,
        daemon=daemon,
        daemon_ready=ready,
        cni_version=args.cni_version,
        timeout=args.timeout,
    )
    outcomes: list[scenarios.Outcome] = []
    # SIGTERM unwinds like Ctrl-C, through the `finally` that removes what the bench made.
    signal.signal(signal.SIGTERM, _terminated)
    try:
        try:
            bench.start()
        except bench_mod.BenchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(
            f"npwg-conformance: {args.plugin} ({source}), CNI {args.cni_version}, {len(chosen)} scenario(s)",
            flush=True,
        )
        for scenario in chosen:
            outcome = scenarios.run_scenario(scenario, bench)
            outcomes.append(outcome)
            print(report.line(outcome), flush=True)
        if any(o.verdict == "failed" for o in outcomes) and bench.daemon:
            tail = bench.daemon_log().strip().splitlines()[-15:]
            if tail:
                print("daemon log (last lines):\n  " + "\n  ".join(tail))
    finally:
        # Also on an interrupt: no namespace, daemon or directory outlives the run.
        bench.close(keep_files=args.keep)
        if args.keep:
            print(f"kept {bench.root} (recordings: records.jsonl, daemon log: daemon.log)")
    print(report.summary(outcomes))
    if args.report is not None:
        doc = report.document(
            outcomes,
            plugin=str(args.plugin),
            conf=str(args.conf or "built-in podnetwork"),
            cni_version=args.cni_version,
            netns_prefix=bench.netns_prefix,
        )
        try:
            # Through to what is there (a device or FIFO stays one), as podnetwork.cli.outputs writes.
            with open(args.report, "w", encoding="utf-8") as f:
                f.write(json.dumps(doc, indent=2) + "\n")
        except OSError as exc:
            print(f"error: --report {args.report}: cannot write it: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return 1 if any(o.verdict == "failed" for o in outcomes) else 0


command = Command(
    help="run an NPWG delegating plugin (this project's shim, Multus, ...) through the spec's scenarios",
    configure=configure,
    run=run,
    description=(
        "Execute a CNI delegating plugin the way a container runtime does, against recording delegate\n"
        "plugins and a small Kubernetes API on 127.0.0.1, in network namespaces it creates (run as root).\n"
        "Each scenario checks a rule of the NPWG multi-net spec v1.3 and cites its section; the exit\n"
        "status is 1 when any scenario fails, 2 for bad input.\n\n"
        "--conf is the plugin's own network configuration with ${NAME} placeholders (--list shows them).\n"
        "Without --conf the plugin is taken to be this project's shim, and `podnetwork cni-agent` is\n"
        "started against the harness's API. Docs: docs/npwg-harness.md.\n\n"
        "examples:\n"
        "  podnetwork npwg-conformance --plugin /opt/cni/bin/multinetwork\n"
        "  podnetwork npwg-conformance --plugin /opt/cni/bin/multus --conf multus.json --report r.json"
    ),
)

__all__ = ["command"]
