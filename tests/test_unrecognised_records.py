"""One decision about a record this version cannot read (issue 28): ``eventstore.unrecognised``
says what it is — damage (a known type that does not fit, no ``type``, the other envelope) or a
newer writer's type (kept, R-MSG-7, R-READ-4) — and every reader path takes it from there: the
validator (V-19), the projections' fold, the CLI's inspect and live rendering, the server's
index.  Damage is reported by each, never skipped without a word; a newer type is never damage.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from clikit import SID, invoke, meta, trace_file, turn, write_records
from rich.console import Console

from eventstore import DataRoot, decode, encode_line, read_trace, record_kind, unrecognised
from eventstore import builders as b
from penguin._index import Index
from penguin.cli.views.render import StreamRenderer
from projections import project
from replay import validate_file

TS = '"timestamp":"2026-07-18T11:10:30.000Z"'
# line -> (raw line, kind, damaged)
ODD: dict[str, tuple[str, str, bool]] = {
    "wrong field type": ('{%s,"type":"model_msg","payload":{"type":"text","role":"user","text":5}}', "text", True),
    "other envelope": ('{%s,"type":"model_msg","payload":{"type":"request_begin"}}', "request_begin", True),
    "no type": ('{%s,"type":"model_msg","payload":{"role":"user","text":"x"}}', "model_msg", True),
    "newer payload type": ('{%s,"type":"event_msg","payload":{"type":"hologram","n":1}}', "hologram", False),
    "newer envelope": ('{%s,"type":"telemetry_msg","payload":{"x":1}}', "telemetry_msg", False),
}  # fmt: skip


def _session(tmp_path: Path) -> tuple[Path, dict[int, str]]:
    """A session whose first turn is followed by the odd records, then a second turn; returns
    its file and the line of each odd record."""
    home = tmp_path / "home"
    path = write_records(trace_file(home), [meta(), b.user_text("hi"), *turn("one")])
    lines: dict[int, str] = {}
    with path.open("ab") as f:
        for n, (name, (raw, _kind, _damaged)) in enumerate(ODD.items()):
            f.write((raw % TS).encode() + b"\n")
            lines[7 + n] = name
    with path.open("ab") as f:
        f.write(b"".join(encode_line(r) for r in [b.user_text("again"), *turn("two")]))
    return path, lines


def test_the_one_decision(tmp_path: Path) -> None:
    for raw, kind, damaged in ODD.values():
        record = decode(raw % TS)
        found = unrecognised(record)
        assert found is not None
        assert (found.kind, found.damaged) == (kind, damaged) == (record_kind(record), damaged)
        assert str(found).startswith(f"{kind} record {'skipped' if damaged else 'kept unread'}: ")
    assert unrecognised(b.user_text("fine")) is None


def test_every_reader_reports_damage_and_keeps_newer_types(tmp_path: Path) -> None:
    path, lines = _session(tmp_path)
    damaged = {line for line, name in lines.items() if ODD[name][2]}
    details = {line: str(unrecognised(decode(ODD[name][0] % TS))) for line, name in lines.items()}

    # The validator: V-19 at each damaged line, nothing for a newer type (R-MSG-7).
    findings = validate_file(path)
    assert {f.line for f in findings if f.rule == "V-19"} == damaged
    assert all(f.severity == "error" for f in findings if f.rule == "V-19")
    assert {f.line for f in findings} == damaged

    # The fold: every odd record is a record of the session, and changes nothing else.
    records = read_trace(path).records
    plain = [r for r in records if unrecognised(r) is None]
    ctx, state, usage = project(records)
    ctx0, state0, usage0 = project(plain)
    assert state.records == state0.records + len(ODD)
    assert (ctx.render, state.turns_total, usage.rows) == (
        ctx0.render, state0.turns_total, usage0.rows
    )  # fmt: skip

    # The CLI's inspect: a diagnostic per damaged record, saying what every reader says; the
    # record listing names each record's kind as record_kind does.
    home = tmp_path / "home"
    insp = json.loads(invoke("--home", home, "inspect", SID, "--json").stdout)
    reported = {d["line"]: d["detail"] for d in insp["diagnostics"] if d["kind"] == "malformed"}
    assert reported == {line: details[line] for line in damaged}
    rows = json.loads(invoke("--home", home, "inspect", SID, "--records", "--json").stdout)
    kinds = {row["line"]: row["type"] for row in rows["records"]}
    assert {line: kinds[line] for line in lines} == {at: ODD[n][1] for at, n in lines.items()}

    # The CLI's live rendering: a line for every odd record, none dropped silently.
    out = io.StringIO()
    renderer = StreamRenderer(Console(file=out, width=200, color_system=None))
    for record in records:
        renderer.feed(record)
    renderer.close()
    shown = [line for line in out.getvalue().splitlines() if line.startswith("[unread] ")]
    assert shown == [f"[unread] {details[line]}" for line in sorted(lines)]

    # The server's index: the damaged records counted on the session's row.
    index = Index(DataRoot(home))
    try:
        index.refresh()
        row = index.session_row(SID)
    finally:
        index.close()
    assert row is not None and row["unreadable"] == len(damaged)
    assert row["records"] == state.records
