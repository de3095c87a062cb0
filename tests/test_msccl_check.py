"""The MSCCL XML checker: real msccl-tools files pass, broken ones fail naming the step.

The checker reads only the XML and runs it as the runtimes would (threadblocks,
dependencies, connection buffers of 2 Simple / 8 LL calls), so it can judge any
producer's files, ours included.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from paths import REFERENCE_DIR

from tacos.errors import TacosError
from tacos.formats import msccl

MSCCL_DIR = REFERENCE_DIR / "msccl"
REFERENCE_XMLS = sorted(MSCCL_DIR.glob("*.xml"))
needs_references = pytest.mark.skipif(not REFERENCE_XMLS, reason="no reference MSCCL XMLs")


def reference(name: str) -> bytes:
    path = MSCCL_DIR / name
    if not path.exists():
        pytest.skip(f"{path} is missing")
    return path.read_bytes()


def check_text(text: bytes | str, runtime: str | None = None) -> msccl.CheckReport:
    data = text.encode() if isinstance(text, str) else text
    return msccl.check(msccl.load(data, "broken.xml"), runtime=runtime)


def broken(name: str, old: str, new: str) -> msccl.CheckReport:
    """Check a reference file with the first occurrence of ``old`` replaced."""
    text = reference(name).decode()
    assert old in text, f"{old!r} is not in {name}"
    return check_text(text.replace(old, new, 1))


# ---------------------------------------------------------------- known good files
@needs_references
@pytest.mark.parametrize("path", REFERENCE_XMLS, ids=lambda p: p.name)
def test_every_reference_xml_from_msccl_tools_passes(path: Path):
    report = msccl.check(msccl.load(path))
    assert report.ok, report.summary()
    served = [line for line in report.checked if "postcondition holds" in line]
    assert served, report.checked
    assert any("no deadlock" in line for line in report.checked)


@needs_references
@pytest.mark.parametrize(
    ("name", "runtime", "modes"),
    [
        ("ag_ring_8ch2_Simple.xml", "legacy", ["in-place"]),
        ("a2a_allpairs_8_Simple.xml", "legacy", ["out-of-place"]),
        ("exec_ar_ring_oop_4_LL.xml", "executor", ["out-of-place"]),
        ("exec_ag_ring_4ch1_LL.xml", "executor", ["in-place"]),
    ],
)
def test_the_runtime_follows_from_the_attributes_and_decides_the_modes_checked(
    name, runtime, modes
):
    report = check_text(reference(name))
    assert report.runtime == runtime
    assert [line.split(":")[0] for line in report.checked if "postcondition" in line] == modes


@needs_references
def test_a_broadcast_is_checked_against_the_root_that_makes_it_right():
    report = check_text(reference("bc_chain_4_Simple.xml"))
    assert report.ok and report.root == 0
    pinned = msccl.check(msccl.load(reference("bc_chain_4_Simple.xml"), "bc.xml"), root=2)
    assert not pinned.ok
    assert "gpu 0 o[0] should hold in_2[0] but holds in_0[0]" in pinned.errors[0]


@needs_references
def test_collective_names_are_spelled_per_runtime():
    report = check_text(reference("exec_rs_ring_oop_4_Simple.xml"), runtime="legacy")
    assert not report.ok
    assert "coll='reducescatter' is unknown to the legacy runtime" in report.errors[0]
    assert "executor runtime's spelling" in report.errors[0]


# ---------------------------------------------------------------- hand-broken files
@needs_references
def test_a_dropped_dependency_is_a_race_that_names_both_steps():
    report = broken(
        "rs_ring_oop_4_Simple.xml",
        'type="re" srcbuf="i" srcoff="2" dstbuf="s" dstoff="2" cnt="1" depid="0" deps="0"',
        'type="re" srcbuf="i" srcoff="2" dstbuf="s" dstoff="2" cnt="1" depid="-1" deps="-1"',
    )
    assert not report.ok
    assert (
        "race on gpu 0 s[2]: gpu 0 tb 0 step 0 (r) writes it while gpu 0 tb 1 step 1 (re) "
        "writes it" in report.errors[0]
    )


@needs_references
def test_a_wrong_source_offset_breaks_the_postcondition_at_the_step_that_wrote_it():
    # gpu 0 starts the ring with its (still empty) o[1] instead of its own o[0]
    report = broken(
        "exec_ag_ring_4ch1_LL.xml",
        '<step s="0" type="s" srcbuf="o" srcoff="0"',
        '<step s="0" type="s" srcbuf="o" srcoff="1"',
    )
    assert not report.ok
    assert report.errors[0] == (
        "in-place: gpu 1 o[0] should hold in_0[0] but holds uninitialised data "
        "(last written by gpu 1 tb 0 step 1 (rcs))"
    )


@needs_references
def test_reading_a_slot_before_the_copy_that_fills_it_is_a_race():
    # the root sends o[2] where it meant o[1]: nothing orders that read after the copy of o[2]
    report = broken(
        "bc_chain_4_Simple.xml",
        '<step s="1" type="s" srcbuf="o" srcoff="1"',
        '<step s="1" type="s" srcbuf="o" srcoff="2"',
    )
    assert report.errors == [
        "out-of-place: race on gpu 0 o[2]: gpu 0 tb 1 step 1 (s) reads it while "
        "gpu 0 tb 0 step 2 (cpy) writes it, and no dependency, message or program order "
        "puts one first"
    ]


def first_step_last(text: str) -> str:
    """Move every threadblock's first step to its end (renumbering ``s``)."""
    lines, out, steps = text.splitlines(keepends=True), [], []
    for line in lines:
        if "<step " in line:
            steps.append(line)
            continue
        if steps:
            reordered = steps[1:] + steps[:1]
            out += [
                re.sub(r's="\d+"', f's="{i}"', step, count=1) for i, step in enumerate(reordered)
            ]
            steps = []
        out.append(line)
    return "".join(out)


@needs_references
def test_receiving_before_sending_around_a_ring_deadlocks_and_shows_the_cycle():
    report = check_text(first_step_last(reference("exec_ag_ring_4ch1_LL.xml").decode()))
    assert not report.ok
    (error,) = report.errors
    assert error.startswith("deadlock with 8-call connection buffers and one call per step: ")
    assert "gpu 0 tb 0 step 0 (rcs) waits for a message from gpu 3 on channel 0" in error
    assert error.count(" -> ") == 3  # the cycle through all four GPUs


@needs_references
def test_threadblocks_waiting_for_each_other_deadlock_and_show_the_cycle():
    # the root's copy now waits for the send that waits for it
    common = 'srcoff="0" dstbuf="o" dstoff="0" cnt="1"'
    text = reference("bc_chain_4_Simple.xml").decode()
    for old, new in [
        (
            f'<step s="0" type="cpy" srcbuf="i" {common} depid="-1" deps="-1" hasdep="1"/>',
            f'<step s="0" type="cpy" srcbuf="i" {common} depid="1" deps="0" hasdep="1"/>',
        ),
        (
            f'<step s="0" type="s" srcbuf="o" {common} depid="0" deps="0" hasdep="0"/>',
            f'<step s="0" type="s" srcbuf="o" {common} depid="0" deps="0" hasdep="1"/>',
        ),
    ]:
        assert old in text
        text = text.replace(old, new, 1)
    report = check_text(text)
    assert report.errors == [
        "deadlock with 2-call connection buffers and one call per step: "
        "gpu 0 tb 0 step 0 (cpy) waits for gpu 0 tb 1 to finish step 0 -> "
        "gpu 0 tb 1 step 0 (s) waits for gpu 0 tb 0 to finish step 0"
    ]


@needs_references
def test_a_count_that_differs_between_sender_and_receiver_is_named():
    report = broken(
        "ag_ring_8ch2_Simple.xml",
        '<step s="1" type="rcs" srcbuf="o" srcoff="6" dstbuf="o" dstoff="6" cnt="1"',
        '<step s="1" type="rcs" srcbuf="o" srcoff="6" dstbuf="o" dstoff="6" cnt="2"',
    )
    assert (
        "gpu 0 tb 0 step 1 (rcs) sends cnt=2 but the matching gpu 1 tb 0 step 1 (rcs) "
        "receives cnt=1" in report.errors
    )


@needs_references
def test_waiting_for_a_step_that_never_signals_is_refused():
    report = broken(
        "bc_chain_4_Simple.xml",
        '<step s="2" type="cpy" srcbuf="i" srcoff="2" dstbuf="o" dstoff="2" cnt="1" depid="-1" '
        'deps="-1" hasdep="1"/>',
        '<step s="2" type="cpy" srcbuf="i" srcoff="2" dstbuf="o" dstoff="2" cnt="1" depid="-1" '
        'deps="-1" hasdep="0"/>',
    )
    assert any(
        "gpu 0 tb 1 step 2 (s): waits for gpu 0 tb 0 step 2 (cpy), which never signals" in e
        for e in report.errors
    ), report.errors


@needs_references
def test_a_receive_without_a_matching_send_is_named():
    report = broken(
        "ag_ring_8ch2_Simple.xml",
        '<tb id="0" send="1" recv="7" chan="0">',
        '<tb id="0" send="2" recv="7" chan="0">',
    )
    assert "gpu 1 tb 0 step 0 (rcs) receives from gpu 0 on channel 0, but nothing is sent" in (
        report.errors
    )


# ---------------------------------------------------------------- finite buffers
def step(kind: str, offset: int, cnt: int = 1) -> str:
    return f'type="{kind}" srcbuf="o" srcoff="{offset}" dstbuf="o" dstoff="{offset}" cnt="{cnt}"'


def exchange(count: int, *, proto: str, cnt: int = 1, max_bytes: int = 0) -> msccl.CheckReport:
    """An all-gather of two GPUs, one threadblock each: ``count`` sends of ``cnt`` chunks
    to the peer, then ``count`` receives of as many."""
    per_rank = count * cnt
    gpus = []
    for gpu in (0, 1):
        own, peer = per_rank * gpu, per_rank * (1 - gpu)
        steps = [step("s", own + k * cnt, cnt) for k in range(count)]
        steps += [step("r", peer + k * cnt, cnt) for k in range(count)]
        body = "\n".join(
            f'      <step s="{i}" {s} depid="-1" deps="-1" hasdep="0"/>'
            for i, s in enumerate(steps)
        )
        gpus.append(
            f'  <gpu id="{gpu}" i_chunks="{per_rank}" o_chunks="{2 * per_rank}" s_chunks="0">\n'
            f'    <tb id="0" send="{1 - gpu}" recv="{1 - gpu}" chan="0">\n{body}\n    </tb>\n'
            "  </gpu>"
        )
    text = (
        f'<algo name="x" proto="{proto}" nchannels="1" nchunksperloop="{2 * per_rank}" '
        f'ngpus="2" coll="allgather" inplace="1" outofplace="0" minBytes="0" '
        f'maxBytes="{max_bytes}">\n' + "\n".join(gpus) + "\n</algo>\n"
    )
    return check_text(text)


def test_three_sends_ahead_of_the_receives_overflow_simple_but_not_ll_buffers():
    simple = exchange(3, proto="Simple")
    assert not simple.ok
    assert simple.errors[0].startswith("deadlock with 2-call connection buffers")
    assert "gpu 0 tb 0 step 2 (s) waits for room to send to gpu 1 on channel 0" in simple.errors[0]
    assert exchange(3, proto="LL").ok
    assert exchange(2, proto="Simple").ok


def test_a_step_of_three_chunks_deadlocks_only_once_messages_are_large():
    # one call per step while chunks are small; 3 calls when each chunk fills a call
    unlimited = exchange(1, proto="Simple", cnt=3)
    assert not unlimited.ok
    assert "deadlock for large messages (any message size)" in unlimited.errors[0]
    assert "steps split into calls of 1 chunk(s)" in unlimited.errors[0]
    small = exchange(1, proto="Simple", cnt=3, max_bytes=6 * 2**20)
    assert small.ok, small.summary()
    assert "no deadlock with 2-call connection buffers for messages up to 6291456 bytes" in (
        small.checked
    )


# ---------------------------------------------------------------- format and limits
@needs_references
@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("<algo", '<?xml version="1.0"?>\n<algo', "broken.xml:1: <?xml...?> declaration"),
        ('<tb id="0" send="1" recv="7"', '<tb id="0" send="1"\n recv="7"', "broken.xml:3: "),
        ('<tb id="0" send="1" recv="7"', '<tb id="0"\tsend="1" recv="7"', "tabs are not"),
        ('<tb id="0" send="1" recv="7"', '<tb id=\'0\' send="1" recv="7"', "double quotes"),
        ('<tb id="0" send="1" recv="7"', '<tb id="00" send="1" recv="7"', "plain decimal"),
    ],
)
def test_what_the_hand_written_tokenizers_reject_is_reported_with_its_line(old, new, message):
    text = reference("ag_ring_8ch2_Simple.xml").decode()
    report = check_text(text.replace(old, new, 1))
    assert not report.ok
    assert any(message in error for error in report.errors), report.errors


@pytest.mark.parametrize(
    "prologue",
    [
        '<!DOCTYPE algo [<!ENTITY big "x">]>\n',
        '<!DOCTYPE algo SYSTEM "http://example.invalid/algo.dtd">\n',
    ],
)
def test_doctypes_and_entities_are_refused_naming_the_file_and_line(prologue):
    text = prologue + '<algo name="x">&big;</algo>\n'
    with pytest.raises(TacosError, match=r"^evil\.xml:1: <!DOCTYPE declarations are refused"):
        msccl.load(text.encode(), "evil.xml")


def test_undefined_entities_are_a_parse_error_with_a_line():
    with pytest.raises(TacosError, match=r"^evil\.xml:2: not well-formed XML"):
        msccl.load(b'<algo name="x">\n&ext;</algo>\n', "evil.xml")


def test_a_missing_attribute_is_named_with_its_element_and_line():
    with pytest.raises(TacosError, match=r"x\.xml:1: <algo> lacks the attribute 'coll'"):
        msccl.load(
            b'<algo name="a" proto="LL" nchannels="1" nchunksperloop="2" ngpus="2"/>', "x.xml"
        )


def test_more_steps_than_the_executor_runs_are_reported_per_threadblock():
    report = exchange(33, proto="LL", max_bytes=0)
    assert not report.ok
    assert (
        "gpu 0 tb 0: 66 steps; the executor runtime allows 64 per threadblock" in report.errors[0]
    )
