"""The images deploy/ runs, packed without a container engine, for the kit's node.

There is no docker nor buildah here, so `podnetwork:dev` is made from deploy/agent/Dockerfile's
own steps, read from the Dockerfile, by the tools a Debian machine has:

- **base layer** (cached): the final stage's `FROM python:3.11-slim` is Debian bookworm with
  Python 3.11; here it is Debian bookworm's own `python3` (3.11) and `python3-pip`, made by
  `mmdebstrap --variant=essential` (Debian's, apt-get install mmdebstrap), with the packages of the
  final stage's `apt-get install` line (iproute2 util-linux nftables conntrack), and the
  dependencies `pip install .` would fetch, installed by the image's own pip from wheels the
  checkout's pip downloaded. It takes about a minute, and is kept under `CACHE` keyed by what it
  is made of (the Dockerfile's package list, pyproject.toml's dependencies, `BASE_RECIPE`), so a
  second run, or another checkout of the same dependencies, reuses it.
- **app layer** (each run, a few seconds): exactly the files the final stage COPYs, built into a
  wheel and installed by the image's pip (`--no-deps`: the base has them), and the compiled shim
  at `/opt/podnetwork/shim/multinetwork`, built on this host by `python3 -m
  bridge.agent.shim.shimbuild` as the Dockerfile's build stage runs it (a static binary).

The scheduler's image (`registry.k8s.io/kube-scheduler` at the tag deploy/scheduler's
kustomization sets) holds the kit's own kube-scheduler (the kit's one static binary, which acts as
the program its name says) at `/usr/local/bin/kube-scheduler`, where the manifest's `command`
finds it.

Both are docker-archive tarballs (`manifest.json`, the config, uncompressed layers) that
`ctr -n k8s.io images import` takes, as the kit's node-up.sh imports its images.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from bridge.agent.node import install
from tests.real.cluster_support import REPO
from tests.unit.deploy.test_image import copied_paths, stages

#: Where the base layer and the scheduler's layer are kept between runs (PODNETWORK_IMAGE_CACHE).
CACHE = Path(os.environ.get("PODNETWORK_IMAGE_CACHE", "/var/tmp/podnetwork-image-cache"))
#: The image deploy/'s manifests name for our components.
IMAGE = "podnetwork:dev"
#: The Debian release of the Dockerfile's base (python:3.11-slim is bookworm's).
SUITE = "bookworm"
#: Changes whenever the way the base is made changes, so an older cached base is not taken.
BASE_RECIPE = "mmdebstrap-essential-python3-pip-1"
#: Seconds for the base's build (mmdebstrap downloads some 40 MB of packages).
BASE_TIMEOUT = 900
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Left out of a layer: what the runtime mounts in a container, and what a build leaves behind.
EXCLUDED = ("./dev/*", "./proc/*", "./sys/*", "./run/*", "./tmp/*", "./var/cache/apt/*",
            "./var/lib/apt/lists/*", "./etc/resolv.conf", "./etc/hostname")


class ImageError(RuntimeError):
    """An image cannot be made here; the message says what is missing and how to get it."""


@dataclass(frozen=True)
class Layer:
    """An uncompressed layer tarball and its diff id (the sha256 of those bytes)."""

    path: Path
    diff_id: str


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def _run(argv: Sequence[str], what: str, *, timeout: float = 300, **kw: object) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]
    except FileNotFoundError as missing:
        raise ImageError(f"{what}: {missing.filename} is not installed") from None
    if done.returncode != 0:
        raise ImageError(f"{what} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return str(done.stdout)


def _tmpdir(work: Path) -> dict[str, str]:
    """The environment with TMPDIR in `work`: pip's and the compiler's scratch files go with it."""
    scratch = work / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "TMPDIR": str(scratch)}


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One build at a time on this machine (two sessions may run this tier)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _tar_layer(root: Path, out: Path) -> Layer:
    """`root` as one layer: numeric owners, as the build left them (root's)."""
    excludes = [f"--exclude={pattern}" for pattern in EXCLUDED]
    _run(["tar", "--numeric-owner", "--xattrs", "-C", str(root), *excludes, "-cf", str(out), "."],
         f"packing {root}")
    return Layer(out, _sha256(out))


def apt_packages() -> list[str]:
    """The packages of the final stage's `apt-get install` (its options left out)."""
    final = stages()[-1]
    for line in final.lines("RUN"):
        for command in line.split("&&"):
            words = shlex.split(command)
            if words[:2] == ["apt-get", "install"]:
                return [w for w in words[2:] if not w.startswith("-")]
    raise ImageError("deploy/agent/Dockerfile's final stage has no `apt-get install` line")


def _dependencies() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [str(d) for d in project["dependencies"]]


def _base_key() -> str:
    recipe = json.dumps([BASE_RECIPE, SUITE, apt_packages(), _dependencies()])
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def _base_folder() -> Path:
    return CACHE / f"base-{_base_key()}"


def base_layer() -> Layer:
    """Debian bookworm with Python 3.11, the Dockerfile's packages and pyproject's dependencies:
    from the cache, else built now (under the machine's lock)."""
    folder = _base_folder()
    with _locked():
        if not (folder / "diff_id").exists():
            _build_base(folder)
    return Layer(folder / "layer.tar", (folder / "diff_id").read_text().strip())


def _build_base(folder: Path) -> None:
    if shutil.which("mmdebstrap") is None:
        raise ImageError("packing the image needs mmdebstrap (apt-get install -y mmdebstrap)")
    work = CACHE / f".building-{folder.name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        wheels = work / "wheels"
        _run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels), *_dependencies()],
             "downloading pyproject.toml's dependencies as wheels", timeout=600, env=_tmpdir(work))
        rootfs = work / "rootfs"
        in_root = "/tmp/podnetwork-wheels"
        pip = (f'chroot "$1" python3 -m pip install -q --break-system-packages --no-cache-dir --no-index '
               f'--find-links {in_root} ' + " ".join(shlex.quote(d) for d in _dependencies()))
        _run(["mmdebstrap", "--variant=essential", "--mode=root",
              "--include=" + ",".join(["python3", "python3-pip", "ca-certificates", *apt_packages()]),
              *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "info", "locale")),
              f'--customize-hook=mkdir -p "$1{in_root}" && cp {wheels}/*.whl "$1{in_root}/"',
              f"--customize-hook={pip}",
              f'--customize-hook=rm -rf "$1{in_root}"',
              SUITE, str(rootfs)], f"mmdebstrap of Debian {SUITE}", timeout=BASE_TIMEOUT, env=_tmpdir(work))
        layer = _tar_layer(rootfs, work / "layer.tar")
        (work / "diff_id").write_text(layer.diff_id + "\n")
        shutil.rmtree(wheels)
        shutil.rmtree(folder, ignore_errors=True)
        work.rename(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def app_layer(work: Path) -> Layer:
    """What the final stage COPYs, installed by the image's pip as `pip install .` does, and the
    compiled shim: built in `work` (the caller's, removed by it)."""
    source = work / "src"
    source.mkdir(parents=True)
    for path in sorted(copied_paths()):
        origin = REPO / path
        if origin.is_dir():
            shutil.copytree(origin, source / path, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(origin, source / path)
    wheel_dir = work / "wheel"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheel_dir),
          str(source)],
         "building the project's wheel", timeout=300, env=_tmpdir(work))
    (wheel,) = wheel_dir.glob("*.whl")
    stage = work / "stage"
    shim = stage / str(install.DEFAULT_PREBUILT_SHIM).lstrip("/")
    shim.parent.mkdir(parents=True)
    _run([sys.executable, "-m", "bridge.agent.shim.shimbuild", str(shim)], "building the compiled shim",
         cwd=REPO, timeout=180, env=_tmpdir(work))
    rootfs = _base_folder() / "rootfs"
    inside = f"/tmp/podnetwork-app-{secrets.token_hex(4)}"
    (rootfs / inside.lstrip("/")).mkdir(parents=True)
    try:
        shutil.copy2(wheel, rootfs / inside.lstrip("/") / wheel.name)
        _run(["chroot", str(rootfs), "python3", "-m", "pip", "install", "-q", "--break-system-packages",
              "--no-deps", "--no-index", "--no-cache-dir", "--root", f"{inside}/stage", f"{inside}/{wheel.name}"],
             "installing the project with the image's pip", timeout=300,
             env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        shutil.copytree(rootfs / inside.lstrip("/") / "stage", stage, dirs_exist_ok=True)
    finally:
        shutil.rmtree(rootfs / inside.lstrip("/"), ignore_errors=True)
    return _tar_layer(stage, work / "app.tar")


def scheduler_tag() -> str:
    """`registry.k8s.io/kube-scheduler:TAG` as deploy/scheduler's kustomization sets it."""
    kustomization = yaml.safe_load((REPO / "deploy" / "scheduler" / "kustomization.yaml").read_text())
    (entry,) = [i for i in kustomization["images"] if i["name"] == "registry.k8s.io/kube-scheduler"]
    return f"{entry['name']}:{entry['newTag']}"


def scheduler_layer(binary: Path) -> Layer:
    """`binary` as /usr/local/bin/kube-scheduler (and a /tmp), cached by the binary's identity."""
    real = binary.resolve()
    stat = real.stat()
    key = hashlib.sha256(f"{real}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    folder = CACHE / f"kube-scheduler-{key}"
    with _locked():
        if not (folder / "diff_id").exists():
            work = CACHE / f".building-{folder.name}-{os.getpid()}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            try:
                with tarfile.open(work / "layer.tar", "w", format=tarfile.PAX_FORMAT) as tar:
                    for name, mode in (("usr", 0o755), ("usr/local", 0o755), ("usr/local/bin", 0o755),
                                       ("tmp", 0o1777)):
                        info = tarfile.TarInfo(name)
                        info.type, info.mode = tarfile.DIRTYPE, mode
                        tar.addfile(info)
                    tar.add(real, arcname="usr/local/bin/kube-scheduler", recursive=False,
                            filter=lambda i: _owned_by_root(i))
                (work / "diff_id").write_text(_sha256(work / "layer.tar") + "\n")
                shutil.rmtree(folder, ignore_errors=True)
                work.rename(folder)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return Layer(folder / "layer.tar", (folder / "diff_id").read_text().strip())


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = 0o755
    return info


def docker_archive(out: Path, tag: str, layers: Sequence[Layer], *, workdir: str = "/") -> Path:
    """A docker-archive (`docker save`'s format) of one image: `ctr images import` takes it."""
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": [PATH_ENV], "WorkingDir": workdir},
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
    }, sort_keys=True).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    names = [f"{layer.diff_id.split(':')[1]}/layer.tar" for layer in layers]
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": names}]).encode()
    with tarfile.open(out, "w") as tar:
        for name, data in ((config_name, config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for layer, name in zip(layers, names, strict=True):
            tar.add(layer.path, arcname=name)
    return out


def podnetwork_image(work: Path) -> Path:
    """`podnetwork:dev` as deploy/agent/Dockerfile builds it, as a docker-archive in `work`."""
    work.mkdir(parents=True, exist_ok=True)
    base = base_layer()
    app = app_layer(work / "app")
    final_workdir = stages()[-1].workdir()
    return docker_archive(work / "podnetwork.tar", IMAGE, [base, app], workdir=final_workdir)


def scheduler_image(work: Path, binary: Path) -> Path:
    """The kube-scheduler image deploy/scheduler runs, holding `binary`, as a docker-archive in `work`."""
    work.mkdir(parents=True, exist_ok=True)
    return docker_archive(work / "kube-scheduler.tar", scheduler_tag(), [scheduler_layer(binary)])


def import_into(containerd_socket: Path, archive: Path) -> None:
    """The image into a node's containerd, where the kubelet finds it (namespace k8s.io)."""
    _run(["ctr", "--address", str(containerd_socket), "-n", "k8s.io", "images", "import",
          "--snapshotter", "overlayfs", str(archive)], f"importing {archive.name}", timeout=300)
