"""The ``penguin`` CLI through typer's CliRunner (SPEC §16, R-CLI-1…8): every command's happy
path, its ``--json`` shape, the exit codes on bad input, and terminal safety on a hostile trace.
The same behaviour through a real process is in test_cli_subprocess.py, and the interactive
parts (prompts, Ctrl-C, colours) in test_cli_pty.py."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner, Result

from engine import AbortSignal
from engine.llm import DEFAULT_SCRIPT
from eventstore import (
    DataRoot,
    TokenCounts,
    ToolDefinition,
    TraceWriter,
    decode,
    encode,
    encode_line,
    read_trace,
)
from eventstore import builders as b
from penguin.cli import app
from penguin.cli.follow import Follower
from penguin.cli.tasks import live as _live
from penguin.cli.terminal.safe import safe, safe_json, safe_json_bytes
from penguin.cli.views.render import StreamRenderer
from replay._validate import validate_session

FAST: dict[str, Any] = {
    "tools": [{"name": "shell", "description": "Run a command (scripted)."}],
    "responses": [
        [
            {"thinking": "Let me look."},
            {"text": "Listing files."},
            {
                "tool_call": {
                    "name": "shell",
                    "arguments": {"cmd": "ls"},
                    "result": {"output": "a.txt\nb.txt\n"},
                }
            },
        ],
        [{"text": "Here are two files."}],
    ],
}
RETRY: dict[str, Any] = {
    "responses": [
        [{"text": "half an ans"}, {"fail": {"status": "timeout", "message": "idle timeout"}}],
        [{"text": "The whole answer."}],
    ]
}
# A second task for a resumed session: its call ids must differ from the first task's (V-8).
MORE: dict[str, Any] = {
    "tools": FAST["tools"],
    "responses": [
        [
            {
                "tool_call": {
                    "name": "shell",
                    "arguments": {"cmd": "pwd"},
                    "id": "call_more",
                    "result": {"output": "/w"},
                }
            }
        ],
        [{"text": "Done again."}],
    ],
}
PERMANENT: dict[str, Any] = {
    "responses": [[{"fail": {"status": "failed", "message": "bad request", "permanent": True}}]]
}

SID = "session-2026-07-18-11-10-22-3f8a1c2d"
DATE = "2026-07-18"

# Every escape a trace could smuggle to a terminal (plus rich markup, which must stay literal).
ESC_2J = "\x1b[2J"
OSC8 = "\x1b]8;;https://evil.example/\x1b\\click me\x1b]8;;\x1b\\"
OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"
BIDI = "\u202egnp.exe"
C1_CSI = "\x9b31m"
HOSTILE = f"{ESC_2J}{OSC8}{OSC52}\x07{BIDI}{C1_CSI}[bold red]markup[/]"
FORBIDDEN = (b"\x1b", b"\x07", b"\xc2\x9b", "\u202e".encode())


# --------------------------------------------------------------------------- helpers


def invoke(
    *args: str | Path, input: str | None = None, env: dict[str, str] | None = None
) -> Result:
    result = CliRunner().invoke(app, [str(a) for a in args], input=input, env=env)
    # Never a traceback: every failure is a one-line message and an exit code.
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(
            f"uncaught {result.exception!r}\n{result.output}"
        ) from result.exception
    assert "Traceback" not in result.output
    return result


def write_script(tmp_path: Path, script: dict[str, Any], name: str = "script.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(script))
    return path


def run_session(tmp_path: Path, home: Path, script: dict[str, Any], *extra: str) -> Result:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return invoke(
        "--home",
        home,
        "--init",
        "run",
        "-m",
        "What is here?",
        "--script",
        write_script(tmp_path, script),
        "--workspace",
        ws,
        *extra,
    )


def session_ids(home: Path) -> list[str]:
    return [s.session_id for s in DataRoot(home).sessions()]


def assert_terminal_safe(data: bytes) -> None:
    for bad in FORBIDDEN:
        assert bad not in data, f"raw {bad!r} reached the terminal: {data[:400]!r}"


def meta(session_id: str = SID, **overrides: str) -> Any:
    fields: dict[str, Any] = {
        "session_id": session_id,
        "provider": "scripted",
        "model_id": "demo",
        "model_context_window": "unknown",
        "system_prompt": "You are careful.",
        "agent_state": "/home/u/.penguin/data/p/agents/a/agent_state",
        "workspace": "/home/u/project",
    } | overrides
    return b.session_meta(**fields)


def trace_file(home: Path, index: int = 1, sid: str = SID) -> Path:
    d = home / "default_project" / "agents" / "default_agent" / "traces" / DATE
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{sid}_{index:03d}.jsonl"


def write_records(path: Path, records: list[Any], *, raw: bytes = b"") -> Path:
    path.write_bytes(b"".join(encode_line(r) for r in records) + raw)
    return path


def turn(text: str, usage: int = 4) -> list[Any]:
    counts = TokenCounts(cache_write=usage - 1, output=1, total=usage)
    return [
        b.request_begin(),
        b.assistant_text(text),
        b.token_usage(counts),
        b.request_end("completed"),
    ]


def hostile_home(tmp_path: Path) -> Path:
    """A session whose every string field carries terminal escapes, plus a malformed line with
    raw escape bytes and an unknown record type."""
    home = tmp_path / "hostile"
    tools = [ToolDefinition(name=HOSTILE, description=HOSTILE)]
    records = [
        meta(
            provider=HOSTILE,
            model_id=HOSTILE,
            system_prompt=HOSTILE,
            workspace=HOSTILE,
            agent_state=HOSTILE,
        ),
        b.user_text(HOSTILE),
        b.tool_list_ready(tools),
        b.request_begin(),
        b.thinking(HOSTILE),
        b.assistant_text(HOSTILE),
        b.tool_call(HOSTILE, HOSTILE, "call_" + HOSTILE),
        b.approval_decision("allow", "call_" + HOSTILE),
        b.token_usage(TokenCounts(cache_write=3, output=1, total=4)),
        b.request_end("completed"),
        b.tool_call_output("call_" + HOSTILE, HOSTILE),
        b.request_begin(),
        b.request_end("failed", error_message=HOSTILE, attempt=1, retry_in_ms=250),
        b.abort(HOSTILE),
        b.compaction_begin("manual", "summarize", context=4, turns=1),
        b.request_begin(),
        b.assistant_text(f"[summary]{HOSTILE}[/summary]"),
        b.request_end("completed"),
        b.compaction_end("manual", "summarize", "failed", attempt=1, error_message=HOSTILE),
    ]
    unknown = json.dumps(
        {
            "timestamp": HOSTILE,
            "type": "event_msg",
            "payload": {"type": "x_" + HOSTILE, "v": HOSTILE},
        }
    ).encode()
    raw = b"not json \x1b[2J\x07 \xc2\x9b\n" + unknown + b"\n"
    path = trace_file(home)
    path.write_bytes(
        b"".join(encode_line(r) for r in records[:5])
        + raw
        + b"".join(encode_line(r) for r in records[5:])
    )
    return home


# --------------------------------------------------------------------------- run (R-CLI-1)


def test_run_streams_the_task_and_prints_session_and_trace_r_cli_1(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = run_session(tmp_path, home, FAST)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "> What is here?" in out
    assert "Let me look." in out  # thinking, streamed
    assert '[tool] shell {"cmd":"ls"}  (call_1_1)' in out
    assert "[approval] allow call_1_1" in out
    assert "a.txt" in out and "[output call_1_1 completed]" in out
    assert "Here are two files." in out
    (sid,) = session_ids(home)
    files = DataRoot(home).trace_files(sid)
    assert f"session: {sid}" in out
    assert f"trace:   {files[-1]}" in out
    assert [f for f in validate_session(files) if f.severity == "error"] == []


def test_run_prints_retry_lines_r_cli_1(tmp_path: Path) -> None:
    result = run_session(tmp_path, tmp_path / "home", RETRY)
    assert result.exit_code == 0, result.output
    assert "[retry] attempt 1, next in 250 ms (timeout: idle timeout)" in result.stdout
    assert "The whole answer." in result.stdout


def test_run_json_prints_each_message_as_one_json_line_r_cli_1(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = run_session(tmp_path, home, FAST, "--json")
    assert result.exit_code == 0, result.output
    head, *lines = result.stdout.splitlines()
    (sid,) = session_ids(home)
    # Issue 15 item 17: the first line names the session and its trace, then only messages.
    assert json.loads(head) == {
        "session_id": sid,
        "trace": str(DataRoot(home).latest_trace(sid)),
        # SPEC R-BOX-3: the sandbox the run's tools are under (the default)
        "sandbox": {"mode": "workspace-write", "network": False},
    }
    messages = [decode(line.encode()) for line in lines]
    assert any(m.is_partial for m in messages)
    recorded = read_trace(DataRoot(home).trace_files(sid)).records
    complete = [encode(m) for m in messages if not m.is_partial]
    # Every complete streamed message is a trace record (the prompt is written, not streamed).
    assert set(complete) <= {encode(r) for r in recorded}
    assert "session: " in result.stderr and "trace: " in result.stderr


def test_run_without_a_model_refuses_and_says_how_to_set_one_r_cli_1(tmp_path: Path) -> None:
    """Issue 15 item 1: no silent demo model.  The embedded script used to answer (and write
    hello.txt with tools allowed, in the current directory)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "home"
    result = invoke("--home", home, "--init", "run", "-m", "demo please", "--workspace", ws)
    assert result.exit_code == 2
    assert "penguin config set model" in result.stderr and "--llm" in result.stderr
    assert not (ws / "hello.txt").exists()
    assert session_ids(home) == []


def test_run_deny_all_records_denials(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = run_session(tmp_path, home, FAST, "--approve", "deny-all")
    assert result.exit_code == 0, result.output
    assert "[approval] deny call_1_1" in result.stdout
    assert "Tool call denied by user." in result.stdout


@pytest.mark.parametrize(
    ("answer", "decision"), [("y\n", "allow"), ("n\n", "deny"), ("", "deny"), ("a\n", "allow")]
)
def test_run_approve_ask_reads_the_answer_from_stdin(
    tmp_path: Path, answer: str, decision: str
) -> None:
    home = tmp_path / "home"
    ws = tmp_path / "ws"
    ws.mkdir()
    result = invoke(
        "--home",
        home,
        "--init",
        "run",
        "-m",
        "go",
        "--script",
        write_script(tmp_path, FAST),
        "--workspace",
        ws,
        "--approve",
        "ask",
        input=answer,
    )
    assert result.exit_code == 0, result.output
    assert "[approve] shell" in result.stderr and "allow?" in result.stderr
    records = read_trace(DataRoot(home).trace_files(session_ids(home)[0])).records
    decisions = [
        r.payload.decision
        for r in records
        if r.payload.__class__.__name__ == "ApprovalDecisionPayload"
    ]  # type: ignore[union-attr]
    assert decisions == [decision]


def test_run_shows_steering_delivered_during_the_run(tmp_path: Path) -> None:
    """Input that arrives mid-run (R-STEER) is part of the rendering, not only of the trace."""
    script = {
        "responses": [
            [{"steer": "also check b.txt"}, {"text": "Looking at a."}],
            [{"text": "And b too."}],
        ]
    }
    result = run_session(tmp_path, tmp_path / "home", script)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert (
        out.index("Looking at a.")
        < out.index("> [user_steering]\nalso check b.txt")
        < out.index("And b too.")
    )


def test_run_that_ends_with_abort_exits_1_r_cli_1(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = run_session(tmp_path, home, PERMANENT)
    assert result.exit_code == 1, result.output
    assert "[abort]" in result.stdout
    records = read_trace(DataRoot(home).trace_files(session_ids(home)[0])).records
    assert records[-1].payload.__class__.__name__ == "AbortPayload"


def test_run_options_reach_the_session(tmp_path: Path) -> None:
    """--max-turns, --system-prompt and the compaction options shape the run."""
    home = tmp_path / "home"
    result = run_session(tmp_path, home, FAST, "--max-turns", "1", "--system-prompt", "Be terse.")
    # Issue 15 item 9: reaching --max-turns means the task did not finish: exit 1.
    assert result.exit_code == 1, result.output
    assert "reached --max-turns" in result.stdout
    assert "[reached max turns (1); stopping]" in result.stdout
    records = read_trace(DataRoot(home).trace_files(session_ids(home)[0])).records
    assert records[0].payload.system_prompt == "Be terse."  # type: ignore[union-attr]
    home2 = tmp_path / "home2"
    result = run_session(
        tmp_path, home2, FAST, "--max-context-length", "5", "--compaction-mode", "discard"
    )
    assert result.exit_code == 0, result.output
    assert "[compaction] discard (context; context 6, turns 2)" in result.stdout
    assert "[compaction completed]" in result.stdout


def test_run_input_errors_exit_2(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert (
        invoke(
            "--home", home, "--init", "run", "-m", "x", "--workspace", tmp_path / "nope"
        ).exit_code
        == 2
    )
    bad = tmp_path / "bad.json"
    bad.write_text('{"responses": [[{"nonsense": 1}]]}')
    result = invoke(
        "--home", home, "--init", "run", "-m", "x", "--script", bad, "--workspace", tmp_path
    )
    assert result.exit_code == 2 and "invalid script" in result.stderr
    result = invoke(
        "--home", home, "--init", "run", "-m", "x", "--model", "m", "--workspace", tmp_path
    )
    assert result.exit_code == 2 and "--llm" in result.stderr
    # A provider without its key: exit 2 with the variable to set, before anything is written.
    result = invoke(
        "--home",
        home,
        "--init",
        "run",
        "-m",
        "x",
        "--llm",
        "anthropic",
        "--model",
        "m",
        "--api-key-env",
        "PENGUIN_TEST_NO_SUCH_KEY",
        "--workspace",
        tmp_path,
    )
    assert result.exit_code == 2 and "PENGUIN_TEST_NO_SUCH_KEY" in result.stderr
    assert not home.exists()
    assert invoke("--home", home, "--init", "run").exit_code == 2  # -m is required


def test_home_option_overrides_penguin_home(tmp_path: Path) -> None:
    env_home, opt_home = tmp_path / "env-home", tmp_path / "opt-home"
    ws = tmp_path / "ws"
    ws.mkdir()
    result = invoke(
        "--home",
        opt_home,
        "--init",
        "run",
        "-m",
        "x",
        "--script",
        write_script(tmp_path, FAST),
        "--workspace",
        ws,
        env={"PENGUIN_HOME": str(env_home)},
    )
    assert result.exit_code == 0, result.output
    assert len(session_ids(opt_home)) == 1 and not env_home.exists()
    listed = invoke("sessions", "--json", env={"PENGUIN_HOME": str(opt_home)})
    assert [r["session_id"] for r in json.loads(listed.stdout)] == session_ids(opt_home)


def test_project_and_agent_place_and_narrow_sessions(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ws = tmp_path / "ws"
    ws.mkdir()
    script = write_script(tmp_path, FAST)
    for agent in ("alpha", "beta"):
        result = invoke(
            "--home",
            home,
            "--project",
            "proj",
            "--agent",
            agent,
            "--init",
            "run",
            "-m",
            "x",
            "--script",
            script,
            "--workspace",
            ws,
        )
        assert result.exit_code == 0, result.output
    rows = json.loads(invoke("--home", home, "--agent", "beta", "sessions", "--json").stdout)
    assert [(r["project"], r["agent"]) for r in rows] == [("proj", "beta")]
    assert invoke("--home", home, "--project", "../x", "sessions").exit_code == 2


# --------------------------------------------------------------------------- sessions (R-CLI-3)


def test_sessions_lists_newest_first_with_the_spec_columns_r_cli_3(tmp_path: Path) -> None:
    home = tmp_path / "home"
    older, newer = "session-2026-01-01-00-00-00-00000001", "session-2026-02-01-00-00-00-00000002"
    write_records(trace_file(home, sid=older), [meta(older), b.user_text("a"), *turn("A")])
    write_records(
        trace_file(home, sid=newer),
        [meta(newer), b.user_text("b"), *turn("B"), b.user_text("c"), *turn("C")],
    )
    rows = json.loads(invoke("--home", home, "sessions", "--json").stdout)
    assert [r["session_id"] for r in rows] == [newer, older]
    first = rows[0]
    # The R-CLI-3 columns stay in the JSON rows; the text listing is the readable one (item 15).
    assert {k: first[k] for k in first if k not in ("active", "children", "parent")} == {
        "session_id": newer,
        "short_id": "00000002",
        "project": "default_project",
        "agent": "default_agent",
        "created": "2026-02-01T00:00:00",
        "files": 1,
        "records": 11,
        "turns": 2,
        "status": "completed",
        "last_status": "completed",
        "task_running": False,
        "archived": False,
        "title": "b",
        "workspace": "/home/u/project",
        "error": None,
        "latest_trace": str(trace_file(home, sid=newer)),
    }
    text = invoke("--home", home, "sessions").stdout
    for column in ("id", "active", "turns", "status", "title", "00000002", "completed"):
        assert column in text
    assert text.index(newer[-8:]) < text.index(older[-8:])


def test_sessions_on_an_empty_root(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = invoke("--home", tmp_path / "empty", "sessions", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    assert "no sessions" in invoke("--home", tmp_path / "empty", "sessions").stdout
    # A root that does not exist is a mistyped --home (issue 30 item 8), not an empty one.
    missing = invoke("--home", tmp_path / "none", "sessions")
    assert missing.exit_code == 2 and "no data root at" in missing.stderr


# --------------------------------------------------------------------------- inspect (R-CLI-4)


def two_file_session(home: Path) -> list[Path]:
    f1 = write_records(trace_file(home, 1), [meta(), b.user_text("first task"), *turn("one")])
    f2 = write_records(
        trace_file(home, 2), [meta(), b.user_text("second task"), *turn("two", 9), b.abort("stop")]
    )
    return [f1, f2]


def test_inspect_shows_files_state_context_and_timeline_r_cli_4(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_session(tmp_path, home, RETRY)
    (sid,) = session_ids(home)
    result = invoke("--home", home, "inspect", sid)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for section in (
        "Files",
        "State (SessionState)",
        "Model context (ModelContext)",
        "Timeline",
        "Diagnostics",
    ):
        assert section in out
    assert "turn request #1  timeout  attempt 1" in out
    assert "retry in 250 ms" in out
    assert "turn request #2  completed  attempt 2" in out
    assert "request_begin 2" in out  # counts per record type


def test_inspect_json_shape_r_cli_4(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_session(tmp_path, home, FAST)
    (sid,) = session_ids(home)
    data = json.loads(invoke("--home", home, "inspect", sid, "--json").stdout)
    assert set(data) >= {
        "session_id",
        "meta",
        "files",
        "counts",
        "state",
        "context",
        "timeline",
        "requests",
        "tool_calls",
        "compactions",
        "aborts",
        "diagnostics",
    }
    assert data["session_id"] == sid
    assert data["state"]["turns_total"] == 2
    assert data["context"] == {
        "history": 6,
        "carry_over": 0,
        "pending_summary": None,
        "closed": False,
        "open_request": False,
        "dangling_compaction": None,
    }
    (call,) = data["tool_calls"]
    assert (call["name"], call["approval"], call["output_status"], call["output"]) == (
        "shell",
        "allow",
        "completed",
        "a.txt\nb.txt\n",
    )
    assert [r["status"] for r in data["requests"]] == ["completed", "completed"]
    assert all(isinstance(r["tokens"], dict) for r in data["requests"])
    assert data["files"][0]["counts"]["tool_call"] == 1


def test_inspect_records_use_fork_coordinates_r_cli_4(tmp_path: Path) -> None:
    """file:ordinal = (file index, 0-based record position in the file), R-FORK-1; a malformed
    line takes no ordinal but keeps its line number."""
    home = tmp_path / "home"
    f1, _ = two_file_session(home)
    raw = f1.read_bytes().split(b"\n")
    f1.write_bytes(b"\n".join([*raw[:2], b"{oops", *raw[2:]]))
    data = json.loads(invoke("--home", home, "inspect", SID, "--records", "--json").stdout)
    rows = data["records"]
    by_file = [read_trace(f, report=False).records for f in (f1, trace_file(home, 2))]
    assert [r["coord"] for r in rows[:3]] == ["1:0", "1:1", "1:2"]
    assert [r["line"] for r in rows[:3]] == [1, 2, 4]  # line 3 is the malformed one
    for row in rows:
        assert row["record"] == json.loads(encode_line(by_file[row["file"] - 1][row["ordinal"]]))
    text = invoke("--home", home, "inspect", SID, "--records").stdout
    assert "2:0 L1" in text and "text user: second task" in text


def test_inspect_file_option_narrows_to_one_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    two_file_session(home)
    data = json.loads(invoke("--home", home, "inspect", SID, "--file", "2", "--json").stdout)
    assert [f["index"] for f in data["files"]] == [2]
    assert {e["at"].split(":")[0] for e in data["timeline"]} == {"2"}
    assert data["state"]["files"] == 2  # the state folds every file up to the chosen one
    assert [a["reason"] for a in data["aborts"]] == ["stop"]
    result = invoke("--home", home, "inspect", SID, "--file", "7")
    assert result.exit_code == 2 and "no file 7" in result.stderr


def test_inspect_a_path_and_a_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    f1, f2 = two_file_session(home)
    one = json.loads(invoke("inspect", f2, "--json").stdout)
    assert [f["index"] for f in one["files"]] == [2]
    both = json.loads(invoke("inspect", f1.parent, "--json").stdout)
    assert [f["index"] for f in both["files"]] == [1, 2]
    other = "session-2026-07-18-11-10-22-00000000"
    write_records(trace_file(home, sid=other), [meta(other)])
    result = invoke("inspect", f1.parent)
    assert result.exit_code == 2 and "holds 2 sessions" in result.stderr


def test_inspect_reports_reader_diagnostics(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = write_records(trace_file(home), [meta(), b.user_text("x")], raw=b'{"torn')
    data = json.loads(invoke("inspect", path, "--json").stdout)
    assert [d["kind"] for d in data["diagnostics"]] == ["torn_tail"]
    assert "torn_tail" in invoke("inspect", path).stdout


# --------------------------------------------------------------------------- validate (R-CLI-5)


def test_validate_clean_and_bad_traces_r_cli_5(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_session(tmp_path, home, FAST)
    (sid,) = session_ids(home)
    assert invoke("--home", home, "validate", sid).exit_code == 0
    bad = write_records(
        tmp_path / f"{SID}_001.jsonl", [meta(), b.request_end("completed")]
    )  # V-4: an end without a begin
    result = invoke("validate", bad)
    assert result.exit_code == 1
    assert f"{bad}:2: V-4 error:" in result.stdout
    rows = json.loads(invoke("validate", bad, "--json").stdout)
    assert {"path", "line", "rule", "severity", "message"} == set(rows[0])
    assert any(r["rule"] == "V-4" and r["severity"] == "error" for r in rows)


def test_validate_strict_fails_on_warnings_r_cli_5(tmp_path: Path) -> None:
    warn_only = write_records(tmp_path / f"{SID}_001.jsonl", [meta(), b.request_begin()])
    result = invoke("validate", warn_only)  # an open request at the end of the file: W
    assert result.exit_code == 0 and "V-4 warning" in result.stdout
    assert invoke("validate", "--strict", warn_only).exit_code == 1


def test_validate_many_files_and_directories_at_once_r_cli_5(tmp_path: Path) -> None:
    home = tmp_path / "home"
    two_file_session(home)
    other = "session-2026-07-18-11-10-22-00000000"
    (tmp_path / "loose").mkdir()
    extra = write_records(
        tmp_path / "loose" / f"{other}_001.jsonl", [meta(other), b.request_end("completed")]
    )
    result = invoke("validate", home, extra)
    assert result.exit_code == 1
    assert f"{extra}:2: V-4 error" in result.stdout
    assert "3 file(s), 2 session(s)" in result.stderr


# --------------------------------------------------------------------------- replay (R-CLI-6)


def test_replay_match_and_divergence_r_cli_6(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_session(tmp_path, home, FAST)
    (sid,) = session_ids(home)
    result = invoke("--home", home, "replay", sid)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("match (1 of 1 run(s) compared)")
    data = json.loads(invoke("--home", home, "replay", sid, "--json").stdout)
    assert data["matched"] is True and data["runs_compared"] == 1 and data["divergence"] is None
    # Tamper with a figure the engine computes (the session token total, R-RUN-10): the
    # replayed run computes the true one and differs from the record there.
    path = DataRoot(home).trace_files(sid)[0]
    lines = path.read_bytes().splitlines()
    at = max(i for i, line in enumerate(lines) if b'"token_usage"' in line)
    record = json.loads(lines[at])
    record["payload"]["session"]["total"] += 100
    lines[at] = json.dumps(record, separators=(",", ":")).encode()
    path2 = tmp_path / "copy" / path.name
    path2.parent.mkdir()
    path2.write_bytes(b"\n".join(lines) + b"\n")
    result = invoke("replay", path2)
    assert result.exit_code == 1, result.output
    assert "diverged" in result.stdout
    data = json.loads(invoke("replay", path2, "--json").stdout)
    assert data["matched"] is False
    assert {"index", "expected", "actual", "reason"} <= set(data["divergence"])


def test_replay_of_a_session_with_a_subagent_r_cli_6(tmp_path: Path) -> None:
    """R-CLI-6, R-SUB-3: the corpus's subagent session replays (its directory or the parent's
    file, the child found beside it); without the child's trace it is a clear exit-2 error."""
    corpus = Path(__file__).parents[2] / "fixtures" / "traces" / "subagent"
    result = invoke("replay", corpus)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("match (1 of 1 run(s) compared)")
    (parent,) = [p for p in corpus.rglob("*.jsonl") if b'"type":"subagent"' in p.read_bytes()]
    assert invoke("replay", parent).exit_code == 0
    alone = tmp_path / "alone" / parent.parent.name / parent.name
    alone.parent.mkdir(parents=True)
    alone.write_bytes(parent.read_bytes())
    result = invoke("replay", alone)
    assert result.exit_code == 2, result.output
    assert "the trace of subagent session-" in result.stderr


def test_replay_partial_comparison_fails_unless_allowed_r_gold_5(tmp_path: Path) -> None:
    """R-GOLD-5: a session whose last run cannot be reproduced (a disk that failed) exits 1
    with "N of M runs compared: <why>"; --allow-partial makes it exit 0."""
    from eventstore import encode_line, read_trace
    from projections import markers as mk

    corpus = Path(__file__).parents[2] / "fixtures" / "traces" / "plain"
    (src,) = corpus.rglob("*.jsonl")
    records = read_trace([src]).records
    n = max(i for i, r in enumerate(records) if type(r.payload).__name__ == "RequestBeginPayload")
    cut = [*records[:n], b.abort(mk.abort_trace_write_failed("disk full"))]
    path = tmp_path / src.parent.name / src.name
    path.parent.mkdir()
    path.write_bytes(b"".join(encode_line(r) for r in cut))
    result = invoke("replay", path)
    assert result.exit_code == 1, result.output
    assert "1 of 2 runs compared: run 2 contains a trace write failure" in result.stdout
    allowed = invoke("replay", path, "--allow-partial")
    assert allowed.exit_code == 0, allowed.output
    data = json.loads(invoke("replay", path, "--json").stdout)
    assert (data["matched"], data["passed"], data["runs_compared"]) == (True, False, 1)


def test_replay_live_tools_r_gold_7(tmp_path: Path) -> None:
    """R-GOLD-7: --live-tools runs the recorded session's tools for real in a scratch copy of
    the workspace; a changed file is the divergence (exit 1), the workspace is left alone."""
    from engine import LocalEnvironment, Session, allow_all
    from engine.llm import ScriptedLLM

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("ship on friday\n")
    script = {
        "responses": [
            [{"tool_call": {"name": "read_file", "arguments": {"path": "notes.txt"}}}],
            [{"text": "Friday."}],
        ]
    }
    home = tmp_path / "home"

    async def record() -> str:
        session = await Session.create(
            llm=ScriptedLLM(script), environment=LocalEnvironment(ws), root=home, workspace=ws
        )
        async with session:
            async for _ in session.run([b.user_text("deadline?")], approve=allow_all):
                pass
        return session.id

    sid = anyio.run(record)
    result = invoke("--home", home, "replay", sid, "--live-tools", ws)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("match (1 of 1 run(s) compared)")
    (ws / "notes.txt").write_text("ship on monday\n")
    result = invoke("--home", home, "replay", sid, "--live-tools", ws)
    assert result.exit_code == 1, result.output
    assert "read_file" in result.stdout and "monday" in result.stdout


# --------------------------------------------------------------------------- stats (R-CLI-7)


def test_stats_one_session_r_cli_7(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_session(tmp_path, home, RETRY)
    (sid,) = session_ids(home)
    data = json.loads(invoke("--home", home, "stats", sid, "--json").stdout)
    assert data["session_id"] == sid
    assert data["requests"] == [
        {"kind": "turn", "status": "completed", "count": 1},
        {"kind": "turn", "status": "timeout", "count": 1},
    ]
    assert data["retries"] == 1
    assert data["compactions"] == {"completed": 0, "failed": 0, "aborted": 0}
    assert data["tokens"]["total"] == sum(
        r["request"]["total"] for r in data["rows"] if r["request"]
    )
    assert [e["kind"] for e in data["errors"]] == ["turn"]
    text = invoke("--home", home, "stats").stdout  # the latest session by default
    assert "Requests" in text and "Tokens" in text and "idle timeout" in text


def test_stats_all_sessions_r_cli_7(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_session(tmp_path, home, RETRY)
    run_session(tmp_path, home, FAST)
    data = json.loads(invoke("--home", home, "stats", "--all", "--json").stdout)
    assert len(data["sessions"]) == 2
    assert data["totals"]["requests_total"] == 4
    assert data["totals"]["retries"] == 1
    assert data["totals"]["tokens"]["total"] == sum(s["tokens"]["total"] for s in data["sessions"])
    assert "Usage by session" in invoke("--home", home, "stats", "--all").stdout
    assert invoke("--home", home, "stats", "--all", session_ids(home)[0]).exit_code == 2


# --------------------------------------------------------------------------- resume (R-CLI-2)


def test_resume_without_message_reads_only_r_cli_2(tmp_path: Path) -> None:
    home = tmp_path / "home"
    two_file_session(home)

    # The session index (<home>/index.sqlite3*) is a host cache that "the latest session"
    # catches up, not a trace: R-CLI-2 is about the traces and locks.
    def traces() -> dict[Path, bytes]:
        return {
            p: p.read_bytes()
            for p in home.rglob("*")
            if p.is_file() and not p.name.startswith("index.sqlite3")
        }

    before = traces()
    result = invoke("--home", home, "resume")  # the latest session
    assert result.exit_code == 0, result.output
    assert SID in result.stdout and "Carry-over" not in result.stdout
    data = json.loads(invoke("--home", home, "resume", SID, "--json").stdout)
    assert data["session_id"] == SID and data["latest_trace"].endswith("_002.jsonl")
    assert data["state"]["turns_total"] == 2
    assert data["last_reply"] == "two"
    # No lock file, no closure, no byte changed (§16: read-only commands).
    assert traces() == before


def test_resume_with_message_runs_a_task_on_the_session_r_cli_2(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_session(tmp_path, home, FAST)
    (sid,) = session_ids(home)
    result = invoke(
        "--home",
        home,
        "resume",
        sid,
        "-m",
        "And now?",
        "--script",
        write_script(tmp_path, MORE, "again.json"),
    )
    assert result.exit_code == 0, result.output
    assert f"session: {sid}" in result.stdout and "Done again." in result.stdout
    files = DataRoot(home).trace_files(sid)
    assert [f for f in validate_session(files) if f.severity == "error"] == []
    records = read_trace(files).records
    users = [
        r.payload.text
        for r in records
        if getattr(r.payload, "role", None) == "user"
        and r.payload.__class__.__name__ == "TextPayload"
    ]  # type: ignore[union-attr]
    assert users == ["What is here?", "And now?"]


def test_resume_with_the_same_script_keeps_call_ids_unique(tmp_path: Path) -> None:
    """Resuming with the script the session was recorded with (the embedded default here)
    must not reuse its default call ids: an id answered twice in a file is invalid (V-7/V-8)."""
    home = tmp_path / "home"
    ws = tmp_path / "ws"
    ws.mkdir()
    script = ("--script", str(DEFAULT_SCRIPT))
    first = invoke("--home", home, "--init", "run", "-m", "first", "--workspace", ws, *script)
    assert first.exit_code == 0, first.output
    result = invoke("--home", home, "resume", "-m", "second", *script)
    assert result.exit_code == 0, result.output
    files = DataRoot(home).trace_files(session_ids(home)[0])
    assert [f for f in validate_session(files) if f.severity == "error"] == []


def test_resume_a_locked_session_exits_2_with_the_holder_pid(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_session(tmp_path, home, FAST)
    (sid,) = session_ids(home)
    writer = TraceWriter(DataRoot(home).latest_trace(sid), session_id=sid)
    try:
        result = invoke(
            "--home",
            home,
            "resume",
            sid,
            "-m",
            "x",
            "--script",
            write_script(tmp_path, FAST, "again.json"),
        )
    finally:
        writer.close()
    assert result.exit_code == 2
    assert f"locked by process {os.getpid()}" in result.stderr


def test_resume_unknown_session_exits_2(tmp_path: Path) -> None:
    result = invoke("--home", tmp_path, "resume", "session-2020-01-01-00-00-00-deadbeef")
    assert result.exit_code == 2 and "unknown session" in result.stderr
    (tmp_path / "empty").mkdir()
    result = invoke("--home", tmp_path / "empty", "resume")
    assert result.exit_code == 2 and "no sessions yet" in result.stderr
    result = invoke("--home", tmp_path / "missing", "resume")  # issue 30 item 8
    assert result.exit_code == 2 and "no data root at" in result.stderr


# --------------------------------------------------------------------------- demo (R-CLI-8)


def test_demo_validates_its_trace_r_cli_8(tmp_path: Path) -> None:
    result = invoke("--home", tmp_path / "home", "--init", "demo")
    assert result.exit_code == 0, result.output
    assert "[compaction completed]" in result.stdout and "trace: valid" in result.stdout


# --------------------------------------------------------------------------- bad input (§16)


BAD_INPUTS = ["missing", "empty_dir", "not_trace", "binary", "unknown_id"]


def bad_input(tmp_path: Path, kind: str) -> tuple[str, str]:
    """(argument, expected message fragment)."""
    if kind == "missing":
        return str(tmp_path / "nope" / "x.jsonl"), "no such file or directory"
    if kind == "empty_dir":
        (tmp_path / "empty").mkdir()
        (tmp_path / "empty" / "notes.txt").write_text("hi")
        return str(tmp_path / "empty"), "no trace files"
    if kind == "not_trace":
        path = tmp_path / "data.jsonl"
        path.write_text('{"a": 1}\n{"b": 2}\n')
        return str(path), "not a trace"
    if kind == "binary":
        path = tmp_path / "blob.jsonl"
        path.write_bytes(bytes(range(256)) * 8)
        return str(path), "binary file"
    return "session-2020-01-01-00-00-00-deadbeef", "unknown session"


@pytest.mark.parametrize("kind", BAD_INPUTS)
@pytest.mark.parametrize("command", ["inspect", "validate", "replay", "stats"])
def test_bad_input_exits_2_without_a_traceback(tmp_path: Path, command: str, kind: str) -> None:
    arg, message = bad_input(tmp_path, kind)
    for extra in ([], ["--json"]):
        result = invoke("--home", tmp_path / "home", command, arg, *extra)
        assert result.exit_code == 2, result.output
        assert message in result.stderr
        assert result.stdout == ""


def test_a_torn_only_record_is_still_a_trace(tmp_path: Path) -> None:
    """Crash residue (one record cut before its newline) is a trace with a V-1 warning, not
    "not a trace" (exit 2)."""
    path = tmp_path / f"{SID}_001.jsonl"
    path.write_bytes(encode_line(meta())[:-1])
    result = invoke("validate", path)
    assert result.exit_code == 0, result.output
    assert "V-1 warning" in result.stdout


def test_unknown_option_is_a_usage_error() -> None:
    assert invoke("inspect", "--no-such-option", "x").exit_code == 2


# --------------------------------------------------------------------------- terminal safety


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", SID],
        ["inspect", SID, "--json"],
        ["inspect", SID, "--records"],
        ["inspect", SID, "--records", "--json"],
        ["validate", SID],
        ["validate", SID, "--json"],
        ["stats", SID],
        ["stats", SID, "--json"],
        ["stats", "--all"],
        ["sessions"],
        ["sessions", "--json"],
        ["resume", SID],
        ["resume", SID, "--json"],
        ["replay", SID],
        ["replay", SID, "--json"],
    ],
)
def test_hostile_trace_reaches_the_terminal_neutralised(tmp_path: Path, args: list[str]) -> None:
    """ESC[2J, OSC 8 links, OSC 52 clipboard writes, BEL, bidi overrides and C1 CSI in every
    string field of a trace: no raw escape byte reaches stdout or stderr, rich markup stays
    literal text, and JSON output still round-trips the exact strings."""
    home = hostile_home(tmp_path)
    result = invoke("--home", home, *args)
    assert result.exit_code in (0, 1, 2), result.output
    assert_terminal_safe(result.stdout_bytes)
    assert_terminal_safe(result.stderr_bytes)
    if "--json" not in args and args[0] in ("inspect", "resume"):
        assert "[bold red]markup[/]" in result.stdout  # shown, not interpreted
    if "--json" in args and args[0] in ("inspect", "resume"):
        data = json.loads(result.stdout)
        if args[0] == "resume":
            assert data["meta"]["system_prompt"] == HOSTILE
        elif "--records" in args:
            assert data["records"][0]["record"]["payload"]["system_prompt"] == HOSTILE
        else:
            assert data["meta"]["system_prompt"] == HOSTILE


def test_hostile_stream_is_rendered_neutralised(tmp_path: Path) -> None:
    """The live rendering of `run` and `--json` lines: a script that streams escapes."""
    script = {
        "tools": [{"name": "shell", "description": "x"}],
        "responses": [
            [
                {"thinking": HOSTILE},
                {"text": HOSTILE, "chunks": 3},
                {
                    "tool_call": {
                        "name": "shell",
                        "arguments": HOSTILE,
                        "id": "c1",
                        "result": {
                            "output": HOSTILE + "\n" + HOSTILE,
                            "chunks": [HOSTILE, "\n", HOSTILE],
                        },
                    }
                },
            ],
            [{"text": "ok"}],
        ],
    }
    for extra in ([], ["--json"]):
        result = run_session(tmp_path, tmp_path / "home", script, *extra)
        assert result.exit_code == 0, result.output
        assert_terminal_safe(result.stdout_bytes)
        assert_terminal_safe(result.stderr_bytes)


# --------------------------------------------------------------------------- units


def test_safe_json_escapes_what_json_encoders_leave_raw() -> None:
    value = {"k": HOSTILE + "\u0085\u2066é"}
    text = safe_json(value)
    assert json.loads(text) == value
    assert_terminal_safe(text.encode())
    assert "é" in text  # other non-ASCII stays readable
    line = encode_line(b.user_text(HOSTILE))
    safe_line = safe_json_bytes(line)
    assert_terminal_safe(safe_line)
    assert decode(safe_line.strip()) == decode(line.strip())
    assert safe("\ud800x") == "\\ud800x"  # a lone surrogate cannot crash the printer


def test_renderer_attributes_concurrent_tool_output_by_call_id() -> None:
    from rich.console import Console

    console = Console(record=True, width=200, color_system=None)
    renderer = StreamRenderer(console)
    msgs = [
        b.tool_call("shell", "{}", "c1"),
        b.tool_call("shell", "{}", "c2"),
        b.partial_tool_call_output("start", "c1"),
        b.partial_tool_call_output("start", "c2"),
        b.partial_tool_call_output("delta", "c1", "one\ntw"),
        b.partial_tool_call_output("delta", "c2", "alpha\n"),
        b.partial_tool_call_output("delta", "c1", "o\n"),
        b.partial_tool_call_output("stop", "c2"),
        b.tool_call_output("c2", "alpha\n"),
        b.partial_tool_call_output("stop", "c1"),
        b.tool_call_output("c1", "one\ntwo\n"),
        b.request_begin(),
        b.tool_call("shell", "{}", "c3"),
        b.partial_tool_call_output("start", "c3"),
        b.partial_tool_call_output("delta", "c3", "solo"),
        b.partial_tool_call_output("stop", "c3"),
        b.tool_call_output("c3", "solo"),
    ]
    for m in msgs:
        renderer.feed(m)
    renderer.close()
    lines = console.export_text().splitlines()
    assert "  [c1] one" in lines and "  [c2] alpha" in lines and "  [c1] two" in lines
    # A line split across fragments is printed once, whole; a lone call is not tagged.
    assert "  solo" in lines and not any(line.strip() == "tw" for line in lines)
    # Streamed output is not printed a second time when the complete output arrives.
    assert lines.count("  [c1] one") == 1
    assert lines.index("  [c1] one") < lines.index("  [c2] alpha") < lines.index("  [c1] two")


def test_follower_prints_only_complete_lines_and_follows_rotation(tmp_path: Path) -> None:
    home = tmp_path / "home"
    f1 = write_records(trace_file(home, 1), [meta(), b.user_text("a")])
    seen: list[tuple[int, int, int, str]] = []
    follower = Follower(
        f1, lambda i, o, line, r: seen.append((i, o, line, r.payload.__class__.__name__))
    )
    follower.poll()
    assert [(i, o, line) for i, o, line, _ in seen] == [(1, 0, 1), (1, 1, 2)]
    line = encode_line(b.assistant_text("b"))
    with open(f1, "ab") as f:
        f.write(line[:7])
    follower.poll()
    assert len(seen) == 2  # a partial last line waits for its newline
    with open(f1, "ab") as f:
        f.write(line[7:])
    follower.poll()
    assert seen[-1] == (1, 2, 3, "TextPayload")
    with open(f1, "ab") as f:  # a torn tail, which a resuming writer cuts (R-TRACE-14)
        f.write(b'{"timestamp": "x", "ty')
    follower.poll()
    complete_size = f1.stat().st_size - len(b'{"timestamp": "x", "ty')
    with open(f1, "r+b") as f:
        f.truncate(complete_size)
    follower.poll()
    with open(f1, "ab") as f:
        f.write(encode_line(b.abort("stop")))
    follower.poll()
    assert seen[-1] == (1, 3, 4, "AbortPayload")
    write_records(trace_file(home, 2), [meta(), b.user_text("c")])
    follower.poll()
    assert [(i, o, line) for i, o, line, _ in seen[-2:]] == [(2, 0, 1), (2, 1, 2)]


@pytest.mark.anyio
async def test_first_ctrl_c_aborts_the_run_second_quits_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """First SIGINT → the run's AbortSignal; second → exit 130 without waiting for the run."""
    from rich.console import Console

    quits: list[int] = []
    quit_event = anyio.Event()

    def fake_quit() -> None:
        quits.append(1)
        quit_event.set()

    monkeypatch.setattr(_live, "_quit_now", fake_quit)
    cancel = AbortSignal()
    err = Console(record=True, width=200, color_system=None)
    async with anyio.create_task_group() as tg:
        await tg.start(_live._interrupts, cancel, err)
        os.kill(os.getpid(), signal.SIGINT)
        with anyio.fail_after(5):
            await cancel.wait()
        assert quits == []
        os.kill(os.getpid(), signal.SIGINT)
        with anyio.fail_after(5):
            await quit_event.wait()
        tg.cancel_scope.cancel()
    assert quits == [1]
    assert "Ctrl-C again to quit" in err.export_text()
