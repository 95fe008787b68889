"""The tolerant reader: SPEC §4.5 (R-READ-1..5), R-TRACE-17 (line limit), R-ROOT-10 (residue)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import (
    Diagnostic,
    OmniMessage,
    TextPayload,
    TraceDecodeError,
    UnknownPayload,
    decode,
    encode,
    encode_line,
    iter_trace,
    read_trace,
)
from eventstore import _reader as reader_mod
from eventstore import builders as b
from eventstore._reader import file_index, scan_trace

TS = "2026-07-18T03:10:22.531Z"


def meta(session_id: str = "session-2026-07-18-11-10-22-3f8a1c2d") -> OmniMessage:
    return b.session_meta(
        session_id=session_id,
        provider="scripted",
        model_id="demo",
        model_context_window="unknown",
        system_prompt="You are careful.",
        agent_state="/h/default_project/agents/default_agent/agent_state",
        workspace="/w",
        timestamp=TS,
    )


def text(body: str) -> OmniMessage:
    return b.user_text(body, timestamp=TS)


def line(msg: OmniMessage) -> bytes:
    return bytes(encode_line(msg))


def write(path: Path, *chunks: bytes | OmniMessage) -> Path:
    path.write_bytes(b"".join(c if isinstance(c, bytes) else line(c) for c in chunks))
    return path


def split(items: Iterable[tuple[int, OmniMessage] | Diagnostic]) -> tuple[list[int], list[str]]:
    """(line numbers of records, "line:kind" of diagnostics)."""
    recs: list[int] = []
    diags: list[str] = []
    for item in items:
        if isinstance(item, Diagnostic):
            diags.append(f"{item.line}:{item.kind}")
        else:
            recs.append(item[0])
    return recs, diags


# --------------------------------------------------------------------------- R-READ-1


def test_r_read_1_blank_and_whitespace_lines_are_skipped_silently_and_counted(
    tmp_path: Path,
) -> None:
    p = write(tmp_path / "t.jsonl", text("a"), b"\n", b"  \t \n", b"\r\n", text("b"))
    items = list(scan_trace(p))
    assert items == [(1, text("a")), (5, text("b"))]


def test_r_read_1_crlf_lines_are_trimmed(tmp_path: Path) -> None:
    p = write(tmp_path / "t.jsonl", encode(text("a")) + b"\r\n" + encode(text("b")) + b"\r\n")
    tr = read_trace(p)
    assert [m.payload for m in tr.records] == [text("a").payload, text("b").payload]
    assert tr.diagnostics == []


def test_r_read_1_trimming_takes_vertical_tab_and_form_feed(tmp_path: Path) -> None:
    # bytes.strip() trims \v and \f, which JSON whitespace does not include.
    p = write(tmp_path / "t.jsonl", b"\x0b" + encode(text("a")) + b"\x0c\n")
    assert read_trace(p).records == [text("a")]


def test_bom_at_file_start_is_skipped_but_not_elsewhere(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    p = write(tmp_path / "t.jsonl", bom, text("a"), bom, text("b"), text("c"))
    items = list(scan_trace(p))
    assert split(items) == ([1, 3], ["2:malformed"])


def test_empty_file_and_file_of_newlines_have_no_records(tmp_path: Path) -> None:
    empty = write(tmp_path / "e.jsonl", b"")
    newlines = write(tmp_path / "n.jsonl", b"\n" * 1000)
    for p in (empty, newlines):
        tr = read_trace(p)
        assert tr.records == []
        assert tr.diagnostics == []
        assert tr.paths == [p]


# --------------------------------------------------------------------------- R-READ-2


def test_r_read_2_last_line_without_newline_is_torn_even_when_it_decodes(
    tmp_path: Path, reported: Callable[[], str]
) -> None:
    p = write(tmp_path / "t.jsonl", text("a"), encode(text("b")))
    tr = read_trace(p)
    assert tr.records == [text("a")]
    assert [(d.line, d.kind) for d in tr.diagnostics] == [(2, "torn_tail")]
    assert "no terminating newline" in tr.diagnostics[0].detail
    assert reported() == ""  # torn tails are not printed


def test_r_read_2_undecodable_last_line_is_torn_even_with_newline_and_trailing_blanks(
    tmp_path: Path, reported: Callable[[], str]
) -> None:
    p = write(tmp_path / "t.jsonl", text("a"), b'{"timestamp":"t","ty\n', b"\n  \n")
    tr = read_trace(p)
    assert tr.records == [text("a")]
    assert [(d.line, d.kind) for d in tr.diagnostics] == [(2, "torn_tail")]
    assert tr.diagnostics[0].detail.startswith("last line does not decode: not JSON")
    assert reported() == ""


def test_r_read_2_blank_tail_without_newline_is_not_torn(tmp_path: Path) -> None:
    p = write(tmp_path / "t.jsonl", text("a"), b"   ")
    tr = read_trace(p)
    assert tr.records == [text("a")]
    assert tr.diagnostics == []


def test_r_read_2_bad_line_then_torn_tail_makes_the_bad_line_malformed(tmp_path: Path) -> None:
    p = write(tmp_path / "t.jsonl", text("a"), b"garbage\n", encode(text("b")))
    assert split(scan_trace(p)) == ([1], ["2:malformed", "3:torn_tail"])


def test_reader_never_modifies_the_file(tmp_path: Path) -> None:
    data = line(text("a")) + b"junk\n" + encode(text("b"))
    p = write(tmp_path / "t.jsonl", data)
    read_trace(p, report=False)
    list(scan_trace(p))
    assert p.read_bytes() == data


# --------------------------------------------------------------------------- R-READ-3 / R-READ-4


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b"\xff\xfe not utf-8", "not JSON"),
        (
            b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"user","text":"\xff"}}',
            "UTF-8",
        ),
        (b"not json at all", "not JSON"),
        (b'{"timestamp":"t","type":"event_msg","payload":{"type":"x","v":NaN}}', "not JSON"),
        (b'{"timestamp":"t","type":"event_msg","payload":{"type":"x","v":Infinity}}', "not JSON"),
        (b'{"timestamp":"t","type":"event_msg","payload":{"type":"x","v":-Infinity}}', "not JSON"),
        (b"[1,2,3]", "not an envelope"),
        (b'"a string"', "not an envelope"),
        (b'{"timestamp":"t","type":"event_msg"}', "not an envelope"),
        (b'{"timestamp":"t","type":"event_msg","payload":[1]}', "not a JSON object"),
        (b'{"timestamp":1,"type":"event_msg","payload":{}}', "not an envelope"),
        (b'{"timestamp":"t","type":"event_msg","payload":{},"origin":"x"}', "not an envelope"),
    ],
    ids=[
        "invalid-utf8-outside-strings",
        "invalid-utf8-in-string",
        "not-json",
        "nan",
        "infinity",
        "minus-infinity",
        "array",
        "string",
        "no-payload",
        "payload-not-object",
        "timestamp-not-string",
        "origin-not-list",
    ],
)
def test_r_read_3_4_undecodable_middle_line_is_malformed_with_reason(
    tmp_path: Path, bad: bytes, reason: str
) -> None:
    p = write(tmp_path / "t.jsonl", text("a"), bad + b"\n", text("b"))
    tr = read_trace(p, report=False)
    assert tr.records == [text("a"), text("b")]
    assert [(d.line, d.kind) for d in tr.diagnostics] == [(2, "malformed")]
    assert reason in tr.diagnostics[0].detail
    assert tr.diagnostics[0].path == p


def test_deeply_nested_json_is_malformed_not_a_recursion_crash(tmp_path: Path) -> None:
    depth = 100_000
    nested = b'{"timestamp":"t","type":"event_msg","payload":{"type":"x","v":'
    nested += b"[" * depth + b"]" * depth + b"}}"
    p = write(tmp_path / "t.jsonl", nested + b"\n", text("b"))
    tr = read_trace(p, report=False)
    assert tr.records == [text("b")]
    assert [(d.line, d.kind) for d in tr.diagnostics] == [(1, "malformed")]
    assert "nesting too deep" in tr.diagnostics[0].detail


def test_r_read_3_stderr_report_one_line_per_read(
    tmp_path: Path, reported: Callable[[], str]
) -> None:
    p = write(tmp_path / "t.jsonl", text("a"), b"x\n", text("b"), b"y\n", text("c"))
    read_trace(p)
    assert reported() == f"[trace] skipped 2 malformed line(s) [2, 4] in {p}\n"


def test_r_read_3_report_lists_at_most_20_line_numbers(
    tmp_path: Path, reported: Callable[[], str]
) -> None:
    p = write(tmp_path / "t.jsonl", *([b"bad\n"] * 25), text("ok"))
    tr = read_trace(p)
    assert len(tr.records) == 1
    shown = ", ".join(str(n) for n in range(1, 21))
    assert reported() == f"[trace] skipped 25 malformed line(s) [{shown}, …] in {p}\n"


def test_r_read_3_exactly_20_lines_have_no_ellipsis(
    tmp_path: Path, reported: Callable[[], str]
) -> None:
    p = write(tmp_path / "t.jsonl", *([b"bad\n"] * 20), text("ok"))
    read_trace(p)
    assert reported().endswith(f"20] in {p}\n")


def test_r_read_3_report_false_is_silent(tmp_path: Path, reported: Callable[[], str]) -> None:
    p = write(tmp_path / "t.jsonl", b"bad\n", text("ok"))
    assert len(read_trace(p, report=False).diagnostics) == 1
    assert list(iter_trace(p, report=False)) == [text("ok")]
    assert reported() == ""


def test_iter_trace_reports_too(tmp_path: Path, reported: Callable[[], str]) -> None:
    p = write(tmp_path / "t.jsonl", b"bad\n", text("ok"))
    assert list(iter_trace(p)) == [text("ok")]
    assert reported() == f"[trace] skipped 1 malformed line(s) [1] in {p}\n"


def test_r_read_4_unknown_envelope_type_is_kept(tmp_path: Path) -> None:
    raw = b'{"timestamp":"t","type":"future_msg","payload":{"kind":"x","n":1}}'
    p = write(tmp_path / "t.jsonl", raw + b"\n")
    (rec,) = read_trace(p).records
    assert rec.type == "future_msg"
    assert isinstance(rec.payload, UnknownPayload)
    assert encode(rec) == raw


def test_r_msg_7_unknown_payload_type_is_kept_and_reencodes_identically(tmp_path: Path) -> None:
    raw = (
        b'{"timestamp":"t","type":"event_msg","payload":{"type":"future_event",'
        b'"z":[1,{"b":null}],"a":"\xc3\xa9"},"origin":["s1"]}'
    )
    p = write(tmp_path / "t.jsonl", raw + b"\n")
    (rec,) = read_trace(p).records
    assert isinstance(rec.payload, UnknownPayload)
    assert rec.payload.type == "future_event"
    assert encode(rec) == raw


def test_huge_integers_are_kept_exactly(tmp_path: Path) -> None:
    big = 10**40
    raw = f'{{"timestamp":"t","type":"event_msg","payload":{{"type":"x","n":{big}}}}}'.encode()
    p = write(tmp_path / "t.jsonl", raw + b"\n")
    (rec,) = read_trace(p).records
    assert isinstance(rec.payload, UnknownPayload)
    assert rec.payload.raw["n"] == big
    assert encode(rec) == raw


def test_duplicate_keys_last_one_wins(tmp_path: Path) -> None:
    """Documented choice: a repeated key keeps its last value (known and unknown payloads)."""
    known = b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"user","text":"first","text":"last"}}'
    unknown = b'{"timestamp":"t","type":"event_msg","payload":{"type":"x","v":1,"v":2}}'
    p = write(tmp_path / "t.jsonl", known + b"\n", unknown + b"\n")
    first, second = read_trace(p).records
    assert isinstance(first.payload, TextPayload)
    assert first.payload.text == "last"
    assert isinstance(second.payload, UnknownPayload)
    assert second.payload.raw == {"type": "x", "v": 2}


def test_50_mb_line_decodes(tmp_path: Path) -> None:
    big = "x" * (50 * 2**20)
    p = write(tmp_path / "t.jsonl", text("a"), b.tool_call_output("c1", big, timestamp=TS))
    tr = read_trace(p)
    assert tr.diagnostics == []
    assert len(tr.records) == 2
    assert tr.records[1].payload.output == big  # type: ignore[union-attr]


# --------------------------------------------------------------------------- R-TRACE-17


def test_r_trace_17_line_over_the_limit_is_malformed_and_the_next_line_reads(
    tmp_path: Path,
) -> None:
    long = b.tool_call_output("c1", "y" * 5000, timestamp=TS)
    p = write(tmp_path / "t.jsonl", text("a"), long, text("b"))
    items = list(scan_trace(p, max_line_bytes=1000))
    assert split(items) == ([1, 3], ["2:malformed"])
    diag = next(i for i in items if isinstance(i, Diagnostic))
    assert diag.detail == "line longer than 1000 bytes"
    # The same line within the limit decodes.
    assert split(scan_trace(p, max_line_bytes=len(line(long)))) == ([1, 2, 3], [])


def test_r_trace_17_over_long_last_line_is_torn(tmp_path: Path) -> None:
    p = write(tmp_path / "t.jsonl", text("a"), b"z" * 5000)
    assert split(scan_trace(p, max_line_bytes=1000)) == ([1], ["2:torn_tail"])
    p = write(tmp_path / "u.jsonl", text("a"), b"z" * 5000 + b"\n")
    assert split(scan_trace(p, max_line_bytes=1000)) == ([1], ["2:torn_tail"])


def test_r_trace_17_over_long_line_is_never_held_in_memory(tmp_path: Path) -> None:
    limit = 2**20
    p = tmp_path / "t.jsonl"
    with p.open("wb") as f:
        f.write(line(text("a")))
        for _ in range(24):  # one 24 MiB line
            f.write(b"q" * 2**20)
        f.write(b"\n")
        f.write(line(text("b")))
    tracemalloc.start()
    try:
        items = list(scan_trace(p, max_line_bytes=limit))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert split(items) == ([1, 3], ["2:malformed"])
    assert peak < 6 * limit


def test_max_line_bytes_must_be_sane(tmp_path: Path) -> None:
    p = write(tmp_path / "t.jsonl", text("a"))
    with pytest.raises(ValueError, match="max_line_bytes"):
        scan_trace(p, max_line_bytes=2)


# --------------------------------------------------------------------------- files


def test_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        scan_trace(tmp_path / "nope.jsonl")  # at the call, not at the first next()
    with pytest.raises(FileNotFoundError):
        read_trace(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError):
        list(iter_trace([tmp_path / "nope_001.jsonl"]))


def test_file_index_parses_r_root_4_names() -> None:
    assert file_index("s_001.jsonl") == 1
    assert file_index(Path("/x/session-a_b_1000.jsonl")) == 1000
    assert file_index("s_01.jsonl") is None
    assert file_index("s_001.jsonl.lock") is None
    assert file_index("s.lock") is None


def test_r_read_5_files_are_read_in_index_order(tmp_path: Path) -> None:
    sid = "session-x"
    files = {
        i: write(tmp_path / f"{sid}_{i:03d}.jsonl", meta(sid), text(f"file {i}"))
        for i in (1, 2, 10, 999, 1000)
    }
    given = [files[1000], files[2], files[999], files[1], files[10]]
    tr = read_trace(given)
    assert tr.paths == [files[i] for i in (1, 2, 10, 999, 1000)]
    assert [m.payload.text for m in tr.records if m.type == "model_msg"] == [  # type: ignore[union-attr]
        "file 1",
        "file 2",
        "file 10",
        "file 999",
        "file 1000",
    ]
    assert list(iter_trace(given)) == tr.records


def test_r_read_3_report_names_each_file(tmp_path: Path, reported: Callable[[], str]) -> None:
    a = write(tmp_path / "s_001.jsonl", meta(), b"bad\n", text("a"))
    c = write(tmp_path / "s_002.jsonl", meta(), text("b"), b"bad\n", text("c"))
    tr = read_trace([a, c])
    assert [(d.path, d.line) for d in tr.diagnostics] == [(a, 2), (c, 3)]
    assert reported().splitlines() == [
        f"[trace] skipped 1 malformed line(s) [2] in {a}",
        f"[trace] skipped 1 malformed line(s) [3] in {c}",
    ]


# --------------------------------------------------------------------------- R-ROOT-10


def test_r_root_10_highest_file_without_session_meta_is_ignored(tmp_path: Path) -> None:
    a = write(tmp_path / "s_001.jsonl", meta(), text("a"))
    torn = write(tmp_path / "s_002.jsonl", encode(meta()))  # crash before its newline
    tr = read_trace([a, torn])
    assert tr.records == [meta(), text("a")]
    assert [(d.path, d.kind) for d in tr.diagnostics] == [(torn, "torn_tail"), (torn, "empty_file")]
    assert "no decodable session_meta" in tr.diagnostics[1].detail
    assert list(iter_trace([a, torn])) == tr.records


def test_r_root_10_meta_less_records_of_the_highest_file_are_dropped(tmp_path: Path) -> None:
    a = write(tmp_path / "s_001.jsonl", meta(), text("a"))
    odd = write(tmp_path / "s_002.jsonl", text("orphan"))
    tr = read_trace([a, odd])
    assert tr.records == [meta(), text("a")]
    assert [d.kind for d in tr.diagnostics] == ["empty_file"]


def test_r_root_10_rotation_head_only_file_is_ignored(tmp_path: Path) -> None:
    tools = b.tool_list_ready([], timestamp=TS)
    end = b.compaction_end("context", "discard", "completed", timestamp=TS)
    a = write(tmp_path / "s_001.jsonl", meta(), text("a"), end)
    head = write(tmp_path / "s_002.jsonl", meta(), tools)
    tr = read_trace([a, head])
    assert tr.records == [meta(), text("a"), end]
    assert [(d.path, d.kind) for d in tr.diagnostics] == [(head, "empty_file")]
    assert "rotation head" in tr.diagnostics[0].detail
    # One record after the head makes it a real file.
    write(head, meta(), tools, text("b"))
    tr = read_trace([a, head])
    assert tr.records == [meta(), text("a"), end, meta(), tools, text("b")]
    assert tr.diagnostics == []


def test_r_root_10_first_file_with_only_session_meta_is_not_residue(tmp_path: Path) -> None:
    a = write(tmp_path / "s_001.jsonl", meta())
    assert read_trace([a]).records == [meta()]


def test_r_root_10_only_the_highest_file_is_checked(tmp_path: Path) -> None:
    a = write(tmp_path / "s_001.jsonl", text("no meta here"))
    c = write(tmp_path / "s_002.jsonl", meta(), text("b"))
    tr = read_trace([c, a])
    assert tr.records == [text("no meta here"), meta(), text("b")]
    assert tr.diagnostics == []


def test_single_path_read_does_not_apply_r_root_10(tmp_path: Path) -> None:
    """Documented choice: a single path is read as it is; only a sequence is a session."""
    odd = write(tmp_path / "s_002.jsonl", meta(), b.tool_list_ready([], timestamp=TS))
    tr = read_trace(odd)
    assert len(tr.records) == 2
    assert tr.diagnostics == []
    assert len(read_trace([odd]).records) == 0


def test_iter_trace_streams_records_across_batches(tmp_path: Path) -> None:
    p = write(tmp_path / "s_001.jsonl", meta(), *[text(str(i)) for i in range(5000)])
    it = iter_trace(p)
    assert next(it) == meta()
    assert sum(1 for _ in it) == 5000


# --------------------------------------------------------------------------- chunking model


def _model(data: bytes, limit: int) -> tuple[list[tuple[int, OmniMessage]], list[str]]:
    """The reading rules applied to the whole file at once: what the chunked scanner must
    produce whatever the chunk size."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = data.split(b"\n")
    tail = lines.pop()
    records: list[tuple[int, OmniMessage]] = []
    bad: list[int] = []
    last_nonblank = 0
    for n, raw in enumerate(lines, start=1):
        if len(raw) <= limit and not raw.strip():
            continue
        last_nonblank = n
        if len(raw) > limit:
            bad.append(n)
            continue
        try:
            records.append((n, decode(raw.strip())))
        except TraceDecodeError:
            bad.append(n)
    diags = [f"{n}:malformed" for n in bad]
    if tail.strip() or len(tail) > limit:
        diags.append(f"{len(lines) + 1}:torn_tail")
    elif bad and bad[-1] == last_nonblank:
        diags[-1] = f"{bad[-1]}:torn_tail"
    return records, diags


def _line_of(size: int) -> bytes:
    """A record line of exactly ``size`` bytes, its newline excluded."""
    bare = len(encode(text("")))
    return line(text("s" * (size - bare)))


_LINE_KINDS = [
    line(text("a")),
    _line_of(199),
    _line_of(200),
    _line_of(201),
    _line_of(260),
    line(text("é" * 30)),
    encode(text("crlf")) + b"\r\n",
    b"\n",
    b"  \r\n",
    b"not json\n",
    b'{"timestamp":"t","type":"weird","payload":{}}\n',
    b"\xff\xfe\n",
    line(b.tool_call_output("c", "L" * 300, timestamp=TS)),
    b"\xef\xbb\xbf" + line(text("bom")),
]


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    picks=st.lists(st.integers(0, len(_LINE_KINDS) - 1), max_size=30),
    tail=st.sampled_from([b"", b"  ", b"{", encode(text("t")), b"q" * 400]),
    chunk=st.sampled_from([3, 5, 16, 97, 1 << 20]),
    limit=st.sampled_from([200, 1 << 28]),
)
def test_chunked_scan_matches_the_whole_file_rules(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    picks: list[int],
    tail: bytes,
    chunk: int,
    limit: int,
) -> None:
    """R-READ-1..4 and R-TRACE-17 hold at every chunk boundary."""
    data = b"".join(_LINE_KINDS[i] for i in picks) + tail
    p = tmp_path / "t.jsonl"
    p.write_bytes(data)
    monkeypatch.setattr(reader_mod, "_CHUNK_BYTES", chunk)
    items = list(scan_trace(p, max_line_bytes=limit))
    want_records, want_diags = _model(data, limit)
    assert [i for i in items if not isinstance(i, Diagnostic)] == want_records
    assert [f"{i.line}:{i.kind}" for i in items if isinstance(i, Diagnostic)] == want_diags
    # Items come in line order.
    numbers = [i.line if isinstance(i, Diagnostic) else i[0] for i in items]
    assert numbers == sorted(numbers)
