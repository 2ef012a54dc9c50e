"""The demo's small parts: the report behind --check, the ICMP probe's packets, the run's names."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from demo import probe
from demo.host import Footprint, missing_prerequisites
from demo.report import Report, Verbosity


def test_a_failed_check_is_listed_with_its_section_and_observation() -> None:
    out = io.StringIO()
    report = Report(verbosity=Verbosity.NORMAL, show_checks=True, out=out)
    report.section("1. Networks")
    assert report.check(True, "blue is Ready")
    assert not report.check(False, "red is Ready", {"status": "False"})
    report.summary()
    text = out.getvalue()
    assert "ok   blue is Ready" in text
    assert 'FAIL red is Ready (observed: {"status": "False"})' in text
    assert report.failures == ['[1. Networks] red is Ready (observed: {"status": "False"})']
    assert "1 check(s) FAILED, 1 passed" in text


def test_quiet_prints_titles_and_failures_only() -> None:
    out = io.StringIO()
    report = Report(verbosity=Verbosity.QUIET, show_checks=True, out=out)
    report.section("2. Pods")
    report.say("narrative")
    report.check(True, "fine")
    report.check(False, "broken")
    report.always("kept")
    text = out.getvalue()
    assert "== 2. Pods ==" in text and "FAIL broken" in text and "kept" in text
    assert "narrative" not in text and "fine" not in text


def test_passing_checks_are_silent_without_check_mode() -> None:
    out = io.StringIO()
    report = Report(out=out)
    report.check(True, "quiet success")
    report.summary()
    assert "quiet success" not in out.getvalue()
    assert "all 1 checks passed" in out.getvalue()


def test_icmp_checksum_matches_rfc_1071_example() -> None:
    # RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum (with end-around carry) to ddf2.
    data = bytes.fromhex("0001f203f4f5f6f7")
    assert probe.checksum(data) == (~0xDDF2 & 0xFFFF)
    # A packet carrying its own checksum sums to zero.
    packet = probe.echo_request(0x1234, 7, b"payload", v6=False)
    assert probe.checksum(packet) == 0


def test_echo_request_has_type_id_and_sequence() -> None:
    v4 = probe.echo_request(0xBEEF, 3, b"x", v6=False)
    v6 = probe.echo_request(0xBEEF, 3, b"x", v6=True)
    assert struct.unpack("!BBHHH", v4[:8])[0::3] == (8, 0xBEEF)
    assert struct.unpack("!BBHHH", v6[:8])[0] == 128
    assert struct.unpack("!BBHHH", v6[:8])[4] == 3


def test_probe_refuses_a_bad_address_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert probe.main(["not-an-ip"]) == 2
    assert "probe:" in capsys.readouterr().err


def test_footprint_names_fit_the_kernel_limits() -> None:
    fp = Footprint("4194304")  # the largest Linux pid
    assert fp.link("d") == "pnd4194304d" and len(fp.link("mp")) <= 15
    assert fp.netns("web-a") == "pn-demo-4194304-web-a"
    with pytest.raises(ValueError, match="15 bytes"):
        fp.link("toolongsuffix")


def test_leftovers_of_an_unused_tag_are_empty() -> None:
    assert Footprint("no-such-run-tag").leftovers() == []


def test_missing_plugins_are_named_with_the_package_to_install(tmp_path: Path) -> None:
    missing = missing_prerequisites([tmp_path])
    assert any("bridge, host-local, macvlan" in m and "containernetworking-plugins" in m for m in missing)
