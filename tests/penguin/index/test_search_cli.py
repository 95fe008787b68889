"""``penguin search`` on its real output, and ``GET /api/search`` (R-SRV-13: both read the
one index): matching sessions newest first, a highlighted snippet escaped for the terminal, a
``FILE:ORDINAL`` that ``penguin inspect --at`` opens, FTS5 syntax, errors as exit 2 / 400."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from clikit import invoke, meta, run_script, trace_file, turn, write_records

from eventstore import builders as b

PARSER_RUN = {
    "tools": [{"name": "shell", "description": "Run a command (scripted)."}],
    "responses": [
        [
            {"text": "Searching for the flaky parser."},
            {
                "tool_call": {
                    "name": "shell",
                    "arguments": {"cmd": "grep -rn tokenizer src"},
                    "result": {"output": "src/lex.py:41: def tokenizer(stream):\n"},
                }
            },
        ],
        [{"text": "The tokenizer drops the last byte."}],
    ],
}


def sid_of(n: int) -> str:
    return f"session-2026-07-18-10-00-{n:02d}-{n:08x}"


def stamped(sid: str, active: float, *records: Any) -> list[Any]:
    stamp = datetime.fromtimestamp(active, UTC).isoformat(timespec="milliseconds")
    stamp = stamp.replace("+00:00", "Z")
    return [msgspec.structs.replace(r, timestamp=stamp) for r in (meta(sid), *records)]


def test_search_a_real_run_and_open_the_hit_with_inspect(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run_script(tmp_path, home, PARSER_RUN).exit_code == 0
    result = invoke("--home", home, "search", "tokenizer", "--json")
    assert result.exit_code == 0, result.output
    (hit,) = json.loads(result.stdout)
    assert hit["matches"] >= 3  # the call's arguments, its output, the answer
    assert any(s["match"] and s["text"].lower() == "tokenizer" for s in hit["snippet"])
    assert hit["kind"] in ("tool_call", "tool_output", "assistant")
    # The position opens with inspect --at, and it is the record that matched.
    shown = invoke("--home", home, "inspect", hit["session_id"], "--at", hit["at"], "--json")
    assert shown.exit_code == 0, shown.output
    assert "tokenizer" in shown.stdout
    # The readable listing: the short id, the position, the snippet, the hint.
    text = invoke("--home", home, "search", "tokenizer").stdout
    assert hit["short_id"] in text and f"{hit['at']}" in text and "tokenizer" in text
    assert "penguin inspect SESSION --at FILE:ORDINAL" in text
    # Phrases, prefixes, AND/OR/NOT (within one message: a text, a call or an output).
    for query, found in [
        ('"drops the last byte"', 1),
        ('"the last drops byte"', 0),
        ("tokeni*", 1),
        ("parser AND searching", 1),
        ("tokenizer AND parser", 0),
        ("parser NOT flaky", 0),
        ("walrus OR flaky", 1),
    ]:
        rows = json.loads(invoke("--home", home, "search", query, "--json").stdout)
        assert len(rows) == found, query


def test_newest_first_limit_since_and_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    now = time.time()
    ws = tmp_path / "ws"
    ws.mkdir()
    ages = {1: 3 * 86400, 2: 60, 3: 3600}
    for n, age in ages.items():
        sid = sid_of(n)
        workspace = str(ws) if n == 3 else "/elsewhere"
        records = stamped(sid, now - age, b.user_text(f"heron number {n}"), *turn("ok"))
        records[0] = msgspec.structs.replace(
            records[0], payload=msgspec.structs.replace(records[0].payload, workspace=workspace)
        )
        write_records(trace_file(home, sid=sid), records)
    rows = json.loads(invoke("--home", home, "search", "heron", "--json").stdout)
    assert [r["session_id"] for r in rows] == [sid_of(2), sid_of(3), sid_of(1)]
    rows = json.loads(invoke("--home", home, "search", "heron", "-n", "1", "--json").stdout)
    assert [r["session_id"] for r in rows] == [sid_of(2)]
    rows = json.loads(invoke("--home", home, "search", "heron", "--since", "2d", "--json").stdout)
    assert [r["session_id"] for r in rows] == [sid_of(2), sid_of(3)]
    monkeypatch.chdir(ws)
    rows = json.loads(invoke("--home", home, "search", "heron", "--cwd", "--json").stdout)
    assert [r["session_id"] for r in rows] == [sid_of(3)]
    none = invoke("--home", home, "search", "pelican")
    assert none.exit_code == 0 and "no session matches" in none.stdout


def test_untrusted_text_is_escaped_for_the_terminal(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sid = sid_of(1)
    evil = "osprey \x1b]0;owned\x07 \x1b[2J\u202e gnirts"
    write_records(trace_file(home, sid=sid), [meta(sid), b.user_text(evil), *turn("ok")])
    out = invoke("--home", home, "search", "osprey")
    assert out.exit_code == 0
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout and "\u202e" not in out.stdout
    assert "osprey" in out.stdout
    as_json = invoke("--home", home, "search", "osprey", "--json").stdout
    assert "\x1b" not in as_json and "\u202e" not in as_json


@pytest.mark.parametrize(
    ("query", "said"),
    [("AND (", "syntax error"), ("foo:bar", "no such column"), ('"unclosed', "unterminated")],
)
def test_a_query_syntax_error_is_a_clear_message_exit_2(
    tmp_path: Path, query: str, said: str
) -> None:
    home = tmp_path / "home"
    write_records(trace_file(home, sid=sid_of(1)), [meta(sid_of(1)), b.user_text("x")])
    result = invoke("--home", home, "search", query)
    assert result.exit_code == 2
    assert said in result.stderr and "query syntax:" in result.stderr
    assert "Traceback" not in result.stderr
    assert invoke("--home", home, "search", "x", "--since", "soon").exit_code == 2


def test_sessions_and_search_share_the_one_index(tmp_path: Path) -> None:
    """No JSON cache any more: ``penguin sessions`` writes the index ``search`` reads."""
    home = tmp_path / "home"
    assert run_script(tmp_path, home, PARSER_RUN).exit_code == 0
    assert invoke("--home", home, "sessions").exit_code == 0
    assert (home / "index.sqlite3").is_file()
    assert not (home / ".cache" / "sessions-v2.json").exists()


def test_an_archived_session_is_still_found_and_says_it_is_archived(tmp_path: Path) -> None:
    """Archiving (a ``session_archived`` mark) hides a session from the listing, not from a
    search: its hit says ``archived`` (JSON) / ``[archived]`` (the listing), so a hit missing
    from ``penguin sessions`` is explained."""
    home = tmp_path / "home"
    now = time.time()
    for n in (1, 2):
        sid = sid_of(n)
        records = stamped(sid, now - 60 * n, b.user_text(f"egret number {n}"), *turn("ok"))
        write_records(trace_file(home, sid=sid), records)
    assert invoke("--home", home, "sessions", "--archive", sid_of(2)).exit_code == 0
    rows = json.loads(invoke("--home", home, "search", "egret", "--json").stdout)
    assert [(r["session_id"], r["archived"]) for r in rows] == [
        (sid_of(1), False),
        (sid_of(2), True),
    ]
    lines = invoke("--home", home, "search", "egret").stdout.splitlines()
    (archived,) = [line for line in lines if "[archived]" in line]
    assert sid_of(2)[-8:] in archived and sid_of(1)[-8:] not in archived
