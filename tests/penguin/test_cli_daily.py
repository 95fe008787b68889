"""Issue 30: the defects a daily user of the CLI hits (items 2, 4-6, 8-11; the chat screen is
``test_cli_chat_screen``, the terminal prompts ``test_cli_daily_tty``).  Each test fails
without its fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import msgspec
import pytest
from clikit import (
    FAST,
    SID,
    invoke,
    meta,
    run_script,
    session_ids,
    trace_file,
    turn,
    write_records,
)
from providerkit import SSEServer, recording, sse

from eventstore import AbortPayload, DataRoot, GoalFinishedPayload, read_trace
from eventstore import builders as b
from replay import export_trace, validate_session

PENGUIN = Path(sys.executable).parent / "penguin"
SHIPPED_GOAL = Path(__file__).resolve().parents[2] / "fixtures" / "goal_script.json"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PENGUIN_HOME", "OPENAI_API_KEY")}
    env.update(extra)
    return env


def _sh(cmd: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], capture_output=True, env=_env(**env), timeout=120
    )


# --------------------------------------------------------------------------- item 2: pipes

SLOW_TAIL = {
    "tools": FAST["tools"],
    "responses": [
        [{"text": "Listing files."}, {"sleep_ms": 300}, FAST["responses"][0][1]],
        [{"text": "Here are two files."}],
    ],
}


def test_run_json_into_head_ends_quietly_with_0_and_the_session_intact(tmp_path: Path) -> None:
    """R-CLI-1: ``run --json | head -1`` — the reader stops after one line; the run goes on
    to its end without a reader (exit 0, nothing on stderr) and the session is not aborted."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "s.json"
    script.write_text(json.dumps(SLOW_TAIL))
    proc = _sh(
        f"'{PENGUIN}' --home '{home}' --init run -m go --script '{script}' "
        f"--workspace '{ws}' --json | head -1"
    )
    assert proc.returncode == 0, proc.stderr
    assert b"internal error" not in proc.stderr and b"ExceptionGroup" not in proc.stderr
    assert json.loads(proc.stdout)["session_id"]
    (info,) = DataRoot(home).sessions()
    records = read_trace(info.files).records
    assert not any(isinstance(r.payload, AbortPayload) for r in records)
    texts = [getattr(r.payload, "text", None) for r in records]
    assert "Here are two files." in texts  # the run went on to its end
    assert [f for f in validate_session(info.files) if f.severity == "error"] == []
    listed = invoke("--home", home, "sessions", "--json")
    assert json.loads(listed.stdout)[0]["status"] == "completed"


def test_progress_goes_to_stderr_only_on_a_terminal(tmp_path: Path) -> None:
    """A progress bar on a pipe is noise (and ``2>&1 | head -1`` broke on it): none."""
    home = tmp_path / "home"
    for n in range(60):  # above the progress threshold
        sid = f"session-2026-07-18-11-10-22-{n:08x}"
        write_records(trace_file(home, sid=sid), [meta(sid), b.user_text("x"), *turn("y")])
    proc = _sh(f"'{PENGUIN}' validate '{home}' 2>&1 | head -1")
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.decode()
    assert "validate" not in first.split(":")[0] or "file(s)" in first, first
    assert "━" not in first and "\x1b[" not in first
    whole = _sh(f"'{PENGUIN}' validate '{home}' 2>&1 >/dev/null")
    assert whole.stdout.decode().strip().splitlines() == [
        "60 file(s), 60 session(s): 0 error(s), 0 warning(s)"
    ]


# --------------------------------------------------------------------------- item 4


def test_thinking_flag_reaches_the_model_on_run_and_resume(tmp_path: Path) -> None:
    """``--thinking LEVEL`` is the run's thinking level (R-RUN-1), on run and resume -m."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    body = recording("openai_text.sse")
    with SSEServer() as server:
        server.queue(sse(body), sse(body))
        common = ["--llm", "openai", "--model", "m", "--base-url", server.url]
        first = invoke(
            "--home", home, "--init", "run", "-m", "hi", *common, "--workspace", ws,
            "--thinking", "high",
        )  # fmt: skip
        assert first.exit_code == 0, first.output
        (sid,) = session_ids(home)
        again = invoke("--home", home, "resume", sid, "-m", "more", *common, "--thinking", "low")
        assert again.exit_code == 0, again.output
        sent = [r.json for r in server.requests]
    assert [s.get("reasoning_effort") for s in sent] == ["high", "low"]


def test_thinking_from_config_and_a_bad_level_refused(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    home.mkdir()
    assert invoke("--home", home, "config", "set", "thinking", "medium").exit_code == 0
    bad = invoke("--home", home, "config", "set", "thinking", "loud")
    assert bad.exit_code == 2 and "thinking" in bad.stderr
    with SSEServer() as server:
        server.queue(sse(recording("openai_text.sse")))
        result = invoke(
            "--home", home, "run", "-m", "hi", "--llm", "openai", "--model", "m",
            "--base-url", server.url, "--workspace", ws,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        (sent,) = [r.json for r in server.requests]
    assert sent["reasoning_effort"] == "medium"
    refused = invoke("--home", home, "run", "-m", "x", "--script", "nope", "--thinking", "loud")
    assert refused.exit_code == 2 and "--thinking" in refused.stderr


def test_thinking_option_on_every_command_that_runs_a_task() -> None:
    for command in ("run", "resume", "chat"):
        assert "--thinking" in invoke(command, "--help").stdout, command


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"penguin {version('penguin-engine')}"


# --------------------------------------------------------------------------- item 5: labels


def test_a_run_stopped_by_max_turns_is_listed_as_such(tmp_path: Path) -> None:
    home = tmp_path / "home"
    loop = {
        "tools": FAST["tools"],
        "responses": [FAST["responses"][0], FAST["responses"][0], FAST["responses"][0]],
    }
    assert run_script(tmp_path, home, loop, "--max-turns", "2").exit_code == 1
    (row,) = json.loads(invoke("--home", home, "sessions", "--json").stdout)
    assert row["status"] == "max_turns"
    assert "max_turns" in invoke("--home", home, "sessions").stdout


def test_diff_counts_the_status_changes_it_lists(tmp_path: Path) -> None:
    home = tmp_path / "home"
    head = [meta(), b.user_text("go"), b.request_begin(), b.tool_call("shell", {}, "c1")]
    tail = [*turn("x")[2:], b.approval_decision("allow", "c1")]
    a = write_records(tmp_path / "a.jsonl", [*head, *tail, b.tool_call_output("c1", "ok")])
    other = b.tool_call_output("c1", "ok", stop_reason="failed")
    bb = write_records(tmp_path / "b.jsonl", [*head, *tail, other])
    result = invoke("--home", home, "diff", a, bb, "--json")
    summary = json.loads(result.stdout)["summary"]
    listed = [d for d in json.loads(result.stdout)["differences"] if "status" in d["what"]]
    assert len(listed) == summary["status_changes"] == 1


def _failed_request(message: str) -> list[Any]:
    return [
        meta(),
        b.user_text("go"),
        b.request_begin(),
        b.request_end("timeout", error_message=message),
    ]


@pytest.mark.parametrize(
    ("message", "label"),
    [
        ("openai: HTTP 500: boom", "server error 500"),
        ("openai: cannot connect: [Errno 111] Connection refused", "connection refused"),
        ("openai: cannot connect", "cannot connect"),
    ],
)
def test_failed_requests_are_named_for_what_happened(
    tmp_path: Path, message: str, label: str
) -> None:
    home = tmp_path / "home"
    path = write_records(trace_file(home), _failed_request(message))
    for fmt in ("md", "html"):
        text = export_trace([path], format=fmt)
        assert label in text and "request timeout" not in text, fmt
    errors = invoke("--home", home, "stats", SID).stdout.split("Errors", 1)[1]
    assert label in errors and "timeout" not in errors.replace(message, "")
    # The listing shows the one status (R-SET-5): a run that never ended reads interrupted, and
    # is never called a timeout.
    listed = invoke("--home", home, "sessions").stdout
    assert "interrupted" in listed and "timeout" not in listed


def test_goal_sessions_are_titled_by_their_objective_with_one_token_total(
    tmp_path: Path,
) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    result = invoke(
        "--home", home, "--init", "run", "--goal", "-m", "make all tests pass",
        "--script", SHIPPED_GOAL, "--workspace", ws,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (row,) = json.loads(invoke("--home", home, "sessions", "--json").stdout)
    assert row["title"] == "make all tests pass"
    listing = invoke("--home", home, "sessions").stdout
    assert "make all tests pass" in listing and "[goal]" not in listing
    (info,) = DataRoot(home).sessions()
    done = read_trace(info.files).records[-1].payload
    assert isinstance(done, GoalFinishedPayload)
    summary = next(x for x in result.stdout.splitlines() if " turn(s), " in x)
    assert f"{done.tokens_used} tokens used" in summary, summary
    assert "total" not in summary, summary


# --------------------------------------------------------------------------- item 6: listing


def _at(record: Any, timestamp: str) -> Any:
    return msgspec.structs.replace(record, timestamp=timestamp)


def _many(home: Path, n: int) -> list[str]:
    ids = []
    for k in range(n):
        sid = f"session-2026-07-18-11-10-22-{k:08x}"
        ts = f"2026-07-18T11:{k // 60:02d}:{k % 60:02d}.000Z"
        records = [meta(sid), b.user_text(f"task {k}"), *turn("y")]
        path = write_records(trace_file(home, sid=sid), [_at(r, ts) for r in records])
        os.utime(path, (1_700_000_000 + (n - k), 1_700_000_000 + (n - k)))  # mtime: reversed
        ids.append(sid)
    return ids


def test_sessions_shows_the_latest_20_and_says_how_many_more(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ids = _many(home, 25)
    out = invoke("--home", home, "sessions").stdout.splitlines()
    assert len(out) == 1 + 20 + 1
    assert out[-1] == "5 more (use -n)"
    # Ordered by the last record's time (the files' times say the opposite).
    assert ids[-1][-8:] in out[1] and ids[5][-8:] in out[20]
    assert len(invoke("--home", home, "sessions", "-n", "30").stdout.splitlines()) == 26
    assert len(json.loads(invoke("--home", home, "sessions", "--json").stdout)) == 25


def test_active_comes_from_the_last_record_not_the_file_time(tmp_path: Path) -> None:
    home = tmp_path / "home"
    records = [meta(), b.user_text("old"), *turn("y")]
    path = write_records(trace_file(home), [_at(r, "2025-01-02T03:04:05.000Z") for r in records])
    os.utime(path)  # copied just now
    (row,) = json.loads(invoke("--home", home, "sessions", "--json").stdout)
    assert row["active"].startswith("2025-01-0")
    assert "just now" not in invoke("--home", home, "sessions").stdout


def test_show_does_not_pad_piped_output(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_records(trace_file(home), [meta(), b.user_text("hi"), *turn("short answer")])
    out = invoke("--home", home, "show", SID).stdout
    assert "short answer" in out
    assert all(line == line.rstrip() for line in out.splitlines()), repr(out)


# --------------------------------------------------------------------------- item 8: errors


def test_export_onto_an_existing_file_is_a_clear_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_records(trace_file(home), [meta(), b.user_text("hi"), *turn("x")])
    out = tmp_path / "out.md"
    out.write_text("mine")
    result = invoke("--home", home, "export", SID, "--out", out)
    assert result.exit_code == 2
    assert "Errno" not in result.stderr and "already exists" in result.stderr
    assert out.read_text() == "mine"


def test_a_home_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    for command in (
        ["sessions"],
        ["stats", "--all"],
        ["query", "SELECT 1"],
        ["show", SID],
        ["inspect", SID],
        ["resume"],
    ):
        result = invoke("--home", tmp_path / "typo", *command)
        assert result.exit_code == 2, command
        assert "no data root" in result.stderr and "typo" in result.stderr


GARBLED = "2026-1#####02:32:33Z"


def test_a_garbled_timestamp_is_a_validator_finding_and_a_query_diagnostic(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    records = [meta(), b.user_text("hi"), *turn("x")]
    records[2] = _at(records[2], GARBLED)
    path = write_records(trace_file(home), records)
    findings = validate_session([path])
    assert [(f.line, f.severity) for f in findings if f.rule == "V-19"] == [(3, "error")]
    assert any("timestamp" in f.message for f in findings)
    sql = "SELECT line, kind, detail FROM diagnostics"
    result = invoke("--home", home, "query", sql, "--format", "json")
    rows = json.loads(result.stdout)
    assert any(r["line"] == 3 and "timestamp" in r["detail"] for r in rows), rows


# --------------------------------------------------------------------------- item 9


def test_a_keyless_openai_compatible_endpoint_is_mentioned_once(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    body = recording("openai_text.sse")
    with SSEServer() as server:
        server.queue(sse(body))
        result = invoke(
            "--home", home, "--init", "run", "-m", "hi", "--llm", "openai", "--model", "m",
            "--base-url", server.url, "--workspace", ws,
            env={"OPENAI_API_KEY": ""},
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "authorization" not in server.requests[0].headers
    assert result.stderr.count("no API key") == 1
    assert "OPENAI_API_KEY" in result.stderr


def test_import_new_id_makes_a_repaired_copy_resumable(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_records(trace_file(home), [meta(), b.user_text("hi"), *turn("x")], raw=b'{"torn')
    repaired = tmp_path / "fixed"
    assert invoke("--home", home, "repair", SID, "--into", repaired).exit_code == 0
    (copy,) = sorted(repaired.rglob("*.jsonl"))
    refused = invoke("--home", home, "import", copy)
    assert refused.exit_code == 2 and "--new-id" in refused.stderr
    result = invoke("--home", home, "import", copy, "--new-id", "--json")
    assert result.exit_code == 0, result.output
    new = json.loads(result.stdout)["session_id"]
    assert new != SID and set(session_ids(home)) == {SID, new}
    files = DataRoot(home).trace_files(new)
    assert validate_session(files) == []
    assert invoke("--home", home, "resume", new).exit_code == 0


# --------------------------------------------------------------------------- item 10


@pytest.mark.parametrize(
    "sql",
    [
        "COPY (SELECT 1) TO '{out}'",
        "DROP VIEW sessions",
        "CREATE TABLE t AS SELECT 1",
        "ATTACH '{out}' AS other",
        "SELECT * FROM read_text('/etc/hostname')",
        "SET enable_external_access = true",
        "INSTALL httpfs",
    ],
)
def test_query_is_read_only(tmp_path: Path, sql: str) -> None:
    home = tmp_path / "home"
    write_records(trace_file(home), [meta(), b.user_text("hi"), *turn("x")])
    out = tmp_path / "written"
    result = invoke("--home", home, "query", sql.format(out=out))
    assert result.exit_code == 2, result.output
    assert not out.exists()
    again = invoke("--home", home, "query", "SELECT count(*) AS n FROM sessions", "--format", "csv")
    assert again.stdout.splitlines() == ["n", "1"]


def test_query_still_reads(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_records(trace_file(home), [meta(), b.user_text("hi"), *turn("x")])
    result = invoke(
        "--home", home, "query",
        "WITH s AS (SELECT session_id FROM sessions) SELECT count(*) AS n FROM s",
        "--format", "csv",
    )  # fmt: skip
    assert result.stdout.splitlines() == ["n", "1"], result.output
    assert invoke("--home", home, "query", "--report", "tools").exit_code == 0
