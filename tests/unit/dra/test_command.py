"""`podnetwork export-dra`: the command end to end through the CLI entry point, offline.

The golden files are the export of examples/dra/ (docs/dra.md shows the same run). After
an intended change of the output, regenerate them with the commands in
tests/fixtures/dra/README.md and review the diff.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from podnetwork import cli
from tests.unit.dra.dra_support import STATUS, nad, pod, podnetwork

ROOT = Path(__file__).parents[3]
EXAMPLES = ROOT / "examples" / "dra"
GOLDEN = ROOT / "tests" / "fixtures" / "dra"


def run(*argv: str) -> int:
    return cli.main(["export-dra", *argv])


def test_help_is_installed_as_a_subcommand_and_names_the_flags() -> None:
    done = subprocess.run([sys.executable, "-m", "podnetwork", "export-dra", "--help"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    for flag in ("--filename", "--kubeconfig", "--driver", "--output", "--network-data", "--partial",
                 "dra.net", "exit status"):
        assert flag in done.stdout


def test_the_examples_export_to_the_golden_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data.yaml"
    assert run("-f", str(EXAMPLES), "--network-data", str(data)) == 0
    out, err = capsys.readouterr()
    assert out == (GOLDEN / "golden-dranet.yaml").read_text()
    assert data.read_text() == (GOLDEN / "golden-network-data.yaml").read_text()
    assert err == "export: 2 DeviceClass, 2 ResourceClaimTemplate, 2 workload(s), 2 networkData\n"


def test_the_cni_driver_exports_what_it_can_with_partial(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("-f", str(EXAMPLES), "--driver", "cni.dra.networking.x-k8s.io", "--partial") == 1
    out, err = capsys.readouterr()
    assert out == (GOLDEN / "golden-cni-partial.yaml").read_text()
    assert "! examples/dra/workloads.yaml:doc 2: Pod default/db: UnsupportedKey: " in err.replace(str(ROOT) + "/", "")


def _unexpressible_inputs(tmp_path: Path) -> Path:
    text = yaml.safe_dump_all([
        nad("ok", {"type": "host-device", "device": "ens5"}), podnetwork("ok", "ok"),
        nad("br", {"type": "bridge", "bridge": "br0"}), podnetwork("br", "br"),
        pod("fine", [{"podNetworkName": "ok"}]),
        pod("legacy", [{"podNetworkName": "ok"}, {"podNetworkName": "br", "interfaceName": "net1"}]),
    ])
    path = tmp_path / "in.yaml"
    path.write_text(text)
    return path


def test_a_pod_dra_cannot_express_is_reported_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = _unexpressible_inputs(tmp_path)
    output = tmp_path / "dra.yaml"
    output.write_text("previous export\n")
    data = tmp_path / "data.yaml"
    assert run("-f", str(inputs), "-o", str(output), "--network-data", str(data)) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert output.read_text() == "previous export\n"
    assert not data.exists()
    assert f"! {inputs}:doc 6: Pod default/legacy: UnsupportedPlugin: spec.networks[1] (PodNetwork br): " in err
    assert "! PodNetwork br: UnsupportedPlugin: NetworkAttachmentDefinition default/br uses the CNI plugin 'bridge'" in err
    assert "nothing written: the driver cannot express the above (--partial writes the rest)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dra.yaml", "in.yaml"]  # no temporary left


def test_partial_writes_the_rest_and_still_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "dra.yaml"
    assert run("-f", str(_unexpressible_inputs(tmp_path)), "-o", str(output), "--partial") == 1
    docs = list(yaml.safe_load_all(output.read_text()))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs][:1] == [("DeviceClass", "ok")]
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"] == ["fine"]
    assert "! " in capsys.readouterr().err


def test_unreadable_input_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "dra.yaml"
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(podnetwork("n")))
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    assert run("-f", str(good), "-f", str(bad), "-o", str(output)) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "nothing written; fix the input above" in err
    assert not output.exists()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([], "say what to export"),
        (["-f", "x.yaml", "-A"], "cannot be combined"),
        (["-f", "x.yaml", "--network-data", "-"], "needs a file name"),
        (["-f", "x.yaml", "-o", "same.yaml", "--network-data", "same.yaml"], "must be different files"),
    ],
)
def test_contradictory_arguments_are_refused(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(*argv) == 2
    assert words in capsys.readouterr().err


def test_an_unknown_driver_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        run("-f", str(EXAMPLES), "--driver", "gpu.example.com")
    assert exc.value.code == 2
    assert "invalid choice: 'gpu.example.com'" in capsys.readouterr().err


def test_no_cluster_is_exit_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("--kubeconfig", str(tmp_path / "missing"), "-n", "default") == 2
    err = capsys.readouterr().err
    assert "cannot load cluster credentials" in err and "nothing written" in err


# --- where the output goes (docs/dra.md "Output") ---------------------------------------------


def test_output_through_a_link_to_a_device_reaches_the_device_and_leaves_link_and_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As `-o /dev/null` does as root, without touching /dev: the link stands for the node.
    sink = tmp_path / "sink"
    sink.symlink_to("/dev/null")
    assert run("-f", str(EXAMPLES), "-o", str(sink)) == 0
    assert sink.is_symlink() and os.readlink(sink) == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sink"]  # no temporary left beside it


def test_network_data_into_a_fifo_is_read_from_the_fifo_which_stays_a_fifo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "data.fifo"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    assert run("-f", str(EXAMPLES), "--network-data", str(fifo)) == 0
    reader.join(10)
    assert received == [(GOLDEN / "golden-network-data.yaml").read_text()]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_device_that_refuses_the_write_is_an_error_naming_it_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = tmp_path / "full"
    full.symlink_to("/dev/full")  # every write fails with ENOSPC
    assert run("-f", str(EXAMPLES), "-o", str(full)) == 2
    err = capsys.readouterr().err
    assert f"-o {full}: cannot write it: No space left on device" in err
    assert "Traceback" not in err
    assert full.is_symlink() and stat.S_ISCHR(os.stat("/dev/full").st_mode)


@pytest.mark.parametrize(
    ("flag", "target", "words"),
    [
        ("-o", "", "-o: an empty path; give a file name"),
        ("--network-data", "", "--network-data: an empty path; give a file name"),
        ("-o", "{tmp}", "is a directory; give a file name inside it"),
        ("--network-data", "{tmp}/", "names a directory; give a file name"),
        ("-o", "{tmp}/missing/dra.yaml", "the directory {tmp}/missing does not exist; create it first"),
        ("--network-data", "{tmp}/missing/data.yaml", "the directory {tmp}/missing does not exist"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_reading_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, target: str, words: str
) -> None:
    before = sorted(p.name for p in tmp_path.iterdir())
    assert run("-f", str(tmp_path / "no-such-input.yaml"), flag, target.format(tmp=tmp_path)) == 2
    err = capsys.readouterr().err
    assert words.format(tmp=tmp_path) in err
    assert "no-such-input" not in err, "the output is checked before any input is read"
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_network_status_ip_that_is_no_address_is_left_out_with_a_note_and_the_export_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Any tenant can write its pod's network-status: one bad value must not stop `-A` for all.
    status = [{"name": "default/ok", "interface": "net1", "ips": ["300.1.1.1", "10.0.0.9/33", "10.1.0.5"]}]
    good = [{"name": "default/ok", "interface": "net1", "ips": ["10.1.0.6"]}]
    nets = [{"podNetworkName": "ok", "interfaceName": "net1"}]
    inputs = tmp_path / "in.yaml"
    inputs.write_text(yaml.safe_dump_all([
        nad("ok", {"type": "host-device", "device": "ens5"}), podnetwork("ok", "ok"),
        pod("bad", nets, annotations={STATUS: json.dumps(status)}),
        pod("fine", nets, annotations={STATUS: json.dumps(good)}),
    ]))
    data = tmp_path / "data.yaml"
    assert run("-f", str(inputs), "--network-data", str(data)) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"Pod default/bad: networkData of ok: \"300.1.1.1\" in {STATUS} is not an IP address: left out" in err
    assert f"Pod default/bad: networkData of ok: \"10.0.0.9/33\" in {STATUS} is not an IP address: left out" in err
    entries = yaml.safe_load(data.read_text())["items"]
    ips = {e["pod"]: e["networkData"].get("ips") for e in entries}
    assert ips == {"default/bad": ["10.1.0.5/32"], "default/fine": ["10.1.0.6/32"]}


def test_a_malformed_workload_is_reported_with_its_fields_and_the_rest_is_exported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A pod the API server would refuse (schedulingGates not a list) is read by the shared
    # workload view once, and refused naming the field, whatever else it holds.
    bad = pod("bad", [{"podNetworkName": "ok"}], schedulingGates=5)
    inputs = tmp_path / "in.yaml"
    inputs.write_text(yaml.safe_dump_all([
        nad("ok", {"type": "host-device", "device": "ens5"}), podnetwork("ok", "ok"),
        pod("fine", [{"podNetworkName": "ok"}]), bad,
    ]))
    output = tmp_path / "dra.yaml"
    assert run("-f", str(inputs), "-o", str(output), "--partial") == 1
    _, err = capsys.readouterr()
    assert (f"! {inputs}:doc 4: Pod default/bad: InvalidObject: does not fit its schema: "
            "spec.schedulingGates: Input should be a valid list\n") in err
    assert "Traceback" not in err
    assert err.endswith("export: 1 DeviceClass, 1 ResourceClaimTemplate, 1 workload(s), 0 networkData; "
                        "1 cannot be expressed\n")
    docs = list(yaml.safe_load_all(output.read_text()))
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"] == ["fine"]
