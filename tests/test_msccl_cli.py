"""``tacos verify --format msccl``: exit 0 if the XML checks out, 1 if not, 2 if unreadable."""

from __future__ import annotations

import json

import pytest
from paths import REFERENCE_DIR

from tacos.cli import export_main, main

RING = REFERENCE_DIR / "msccl" / "exec_ag_ring_4ch1_LL.xml"
pytestmark = pytest.mark.skipif(not RING.exists(), reason="no reference MSCCL XMLs")


def verify(capsys, *argv):
    code = main(["verify", "--format", "msccl", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_good_file_prints_what_was_checked_and_exits_0(capsys):
    code, out, _ = verify(capsys, RING)
    assert code == 0
    assert out.startswith(f"{RING}: OK: allgather on 4 GPUs for the executor runtime; in-place")


def test_a_broken_file_prints_the_step_and_exits_1(capsys, tmp_path):
    broken = tmp_path / "broken.xml"
    broken.write_text(RING.read_text().replace('dstoff="3" cnt="1"', 'dstoff="3" cnt="2"', 1))
    code, out, _ = verify(capsys, broken, "--json")
    assert code == 1
    data = json.loads(out)
    assert data["verified"] is False and data["runtime"] == "executor"
    assert any("gpu 0 tb 0 step 1 (rcs)" in error for error in data["errors"])


def test_the_runtime_can_be_chosen(capsys):
    code, out, _ = verify(capsys, RING, "--msccl-runtime", "legacy")
    assert code == 0 and "for the legacy runtime" in out


def test_an_unsafe_file_is_a_one_line_error_with_exit_2(capsys, tmp_path):
    evil = tmp_path / "evil.xml"
    evil.write_text('<!DOCTYPE algo [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n<algo>&x;</algo>\n')
    code, out, err = verify(capsys, evil)
    assert code == 2 and not out
    assert err == (
        f"tacos: error: {evil}:1: <!DOCTYPE declarations are refused (entities could "
        "expand or reach the network); MSCCL XML needs none\n"
    )


def test_schedule_options_do_not_apply(capsys):
    code, _, err = verify(capsys, RING, "--topology", "ring:4")
    assert code == 2 and "--topology and --collective apply to imported schedules" in err


def test_tenants_are_one_program_each_and_each_checks_out(capsys, tmp_path):
    """Two tenants are two communicators: an XML holds one collective over one of them, so
    each tenant's program is its own file, its ranks numbered from 0 (the merged traffic had
    failed its own check as one 8-rank All-Reduce)."""
    out = tmp_path / "programs"
    argv = ["--format", "msccl", "--topology", "dgx:2x4", "--collective", "all-reduce",
            "--groups", "0-3;4-7"]  # fmt: skip
    assert export_main([*argv, "-o", str(out)]) == 0, capsys.readouterr().err
    files = sorted(out.iterdir())
    assert [f.name[-12:] for f in files] == ["_tenant0.xml", "_tenant1.xml"]
    for file in files:
        code, text, _ = verify(capsys, file)
        assert code == 0 and "OK: allreduce on 4 GPUs" in text, text
    assert export_main([*argv, "-o", str(tmp_path / "one.xml")]) == 2
    assert "give a directory for -o" in capsys.readouterr().err
