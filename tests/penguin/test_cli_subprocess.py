"""The ``penguin`` console script as a real process (SPEC §16): every command's happy path, the
``--json`` shapes, exit codes 0/1/2 on good and bad input, a session locked by another process,
``inspect --follow`` across a rotation, and no raw escape byte on stdout for a hostile trace —
never a traceback."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from eventstore import DataRoot, TraceWriter, decode, encode_line, read_trace
from eventstore import builders as b
from replay._validate import validate_session

PENGUIN = Path(sys.executable).parent / "penguin"
SID = "session-2026-07-18-11-10-22-3f8a1c2d"
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
HOSTILE = (
    "\x1b[2J\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
    "\x1b]52;c;cm0gLXJmIH4=\x07\x07\u202egnp.exe\x9b31m"
)
FORBIDDEN = (b"\x1b", b"\x07", b"\xc2\x9b", "\u202e".encode())
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


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PENGUIN_HOME", "FORCE_COLOR")}


def penguin(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(
        [str(PENGUIN), *map(str, args)],
        capture_output=True,
        timeout=timeout,
        env=_env(),
        check=False,
    )
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    return proc


def penguins(*calls: list[str | Path]) -> list[subprocess.CompletedProcess[bytes]]:
    """Several independent invocations at once (process start-up dominates their cost)."""
    procs = [
        (
            call,
            subprocess.Popen(
                [str(PENGUIN), *map(str, call)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=_env(),
            ),
        )
        for call in calls
    ]
    done = []
    for call, proc in procs:
        out, err = proc.communicate(timeout=60)
        assert b"Traceback" not in err, err.decode()
        done.append(subprocess.CompletedProcess(call, proc.returncode, out, err))
    return done


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One session recorded by ``penguin run`` (R-CLI-1), shared by the read-only tests."""
    base = tmp_path_factory.mktemp("recorded")
    script = base / "fast.json"
    script.write_text(json.dumps(FAST))
    (base / "ws").mkdir()
    proc = penguin(
        "--home",
        base / "home",
        "--init",
        "run",
        "-m",
        "What is here?",
        "--script",
        script,
        "--workspace",
        base / "ws",
    )
    assert proc.returncode == 0, proc.stderr.decode()
    (info,) = DataRoot(base / "home").sessions()
    out = proc.stdout.decode()
    assert '[tool] shell {"cmd":"ls"}' in out and "Here are two files." in out
    assert f"session: {info.session_id}" in out and f"trace:   {info.files[-1]}" in out
    return base / "home", info.session_id


def test_run_json_lines_r_cli_1(tmp_path: Path) -> None:
    script = tmp_path / "fast.json"
    script.write_text(json.dumps(FAST))
    proc = penguin(
        "--home",
        tmp_path / "home",
        "--init",
        "run",
        "-m",
        "go",
        "--script",
        script,
        "--workspace",
        tmp_path,
        "--json",
    )
    assert proc.returncode == 0
    head, *lines = proc.stdout.splitlines()
    assert set(json.loads(head)) == {"session_id", "trace", "sandbox"}
    messages = [decode(line) for line in lines]
    assert any(m.is_partial for m in messages) and not any(
        m.type == "session_meta" for m in messages
    )
    assert b"session: " in proc.stderr


def test_read_commands_happy_paths(recorded: tuple[Path, str]) -> None:
    home, sid = recorded
    g = ["--home", home]
    sessions, inspect, inspect_json, validate, replay, stats, stats_all, resume = penguins(
        [*g, "sessions", "--json"],
        [*g, "inspect", sid],
        [*g, "inspect", sid, "--records", "--json"],
        [*g, "validate", sid],
        [*g, "replay", sid],
        [*g, "stats", sid, "--json"],
        [*g, "stats", "--all"],
        [*g, "resume", "--json"],  # the latest session, read only
    )
    rows = json.loads(sessions.stdout)
    assert [r["session_id"] for r in rows] == [sid] and rows[0]["turns"] == 2
    assert inspect.returncode == 0 and b"Timeline" in inspect.stdout
    assert json.loads(inspect_json.stdout)["records"][0]["coord"] == "1:0"
    assert validate.returncode == 0
    assert replay.returncode == 0 and replay.stdout.startswith(b"match")
    data = json.loads(stats.stdout)
    assert data["requests_total"] == 2 and data["tokens"]["total"] > 0
    assert stats_all.returncode == 0 and sid.encode() in stats_all.stdout
    assert resume.returncode == 0 and json.loads(resume.stdout)["session_id"] == sid


def test_demo_r_cli_8(tmp_path: Path) -> None:
    proc = penguin("--home", tmp_path / "home", "--init", "demo")
    assert proc.returncode == 0 and b"trace: valid" in proc.stdout


def test_bad_input_exits_2(tmp_path: Path) -> None:
    """A missing path, a directory without traces, a non-trace file, a binary file, an unknown
    session id: one line on stderr, nothing on stdout, exit 2."""
    (tmp_path / "empty").mkdir()
    text = tmp_path / "notes.jsonl"
    text.write_text("just some text\n")
    blob = tmp_path / "blob.jsonl"
    blob.write_bytes(bytes(range(256)))
    unknown = "session-2020-01-01-00-00-00-deadbeef"
    g = ["--home", tmp_path / "home"]
    calls: list[list[str | Path]] = [
        [*g, "inspect", tmp_path / "nope.jsonl", "--json"],
        [*g, "validate", tmp_path / "empty"],
        [*g, "stats", text, "--json"],
        [*g, "replay", blob],
        [*g, "inspect", unknown],
        [*g, "validate", blob, "--json"],
        [*g, "resume", unknown],
    ]
    for proc in penguins(*calls):
        assert proc.returncode == 2, proc.args
        assert proc.stdout == b""
        assert proc.stderr.startswith(b"penguin: ") and proc.stderr.count(b"\n") == 1


def test_validate_exit_1_on_a_bad_trace(tmp_path: Path) -> None:
    meta = b.session_meta(
        session_id=SID,
        provider="p",
        model_id="m",
        model_context_window=1,
        system_prompt="s",
        agent_state="/a",
        workspace="/w",
    )
    path = tmp_path / f"{SID}_001.jsonl"
    path.write_bytes(encode_line(meta) + encode_line(b.request_end("completed")))
    proc = penguin("validate", path)
    assert proc.returncode == 1 and b":2: V-4 error:" in proc.stdout


def test_hostile_trace_never_reaches_stdout_raw(tmp_path: Path) -> None:
    meta = b.session_meta(
        session_id=SID,
        provider=HOSTILE,
        model_id=HOSTILE,
        model_context_window=1,
        system_prompt=HOSTILE,
        agent_state=HOSTILE,
        workspace=HOSTILE,
    )
    records = [
        meta,
        b.user_text(HOSTILE),
        b.request_begin(),
        b.thinking(HOSTILE),
        b.assistant_text(HOSTILE),
        b.tool_call(HOSTILE, HOSTILE, HOSTILE),
        b.approval_decision("allow", HOSTILE),
        b.request_end("completed"),
        b.tool_call_output(HOSTILE, HOSTILE),
        b.abort(HOSTILE),
    ]
    day = (
        tmp_path / "home" / "default_project" / "agents" / "default_agent" / "traces" / "2026-07-18"
    )
    day.mkdir(parents=True)
    path = day / f"{SID}_001.jsonl"
    path.write_bytes(b"".join(encode_line(r) for r in records) + b"\x1b[2J raw\n")
    calls: list[list[str | Path]] = [
        ["inspect", path],
        ["inspect", path, "--records"],
        ["stats", path],
        ["validate", path],
        ["inspect", path, "--json"],
        ["--home", tmp_path / "home", "resume", SID],
    ]
    for proc in penguins(*calls):
        assert proc.returncode in (0, 1, 2), proc.stderr
        for bad in FORBIDDEN:
            assert bad not in proc.stdout, (proc.args, proc.stdout[:300])
            assert bad not in proc.stderr, (proc.args, proc.stderr[:300])


def test_resume_of_a_session_locked_by_another_process_exits_2(
    tmp_path: Path, recorded: tuple[Path, str]
) -> None:
    home = tmp_path / "home"
    shutil.copytree(recorded[0], home)
    sid = recorded[1]
    script = tmp_path / "more.json"
    script.write_text(json.dumps(MORE))
    writer = TraceWriter(DataRoot(home).latest_trace(sid), session_id=sid)  # this process holds it
    try:
        proc = penguin("--home", home, "resume", sid, "-m", "more", "--script", script)
    finally:
        writer.close()
    assert proc.returncode == 2
    assert f"locked by process {os.getpid()}".encode() in proc.stderr
    proc = penguin("--home", home, "resume", sid, "-m", "more", "--script", script)
    assert proc.returncode == 0, proc.stderr
    files = DataRoot(home).trace_files(sid)
    assert [f for f in validate_session(files) if f.severity == "error"] == []
    assert len(read_trace(files).records) > len(
        read_trace(DataRoot(recorded[0]).trace_files(sid)).records
    )


def _follow_meta() -> Any:
    return b.session_meta(
        session_id=SID,
        provider="p",
        model_id="m",
        model_context_window=1,
        system_prompt="s",
        agent_state="/a",
        workspace="/w",
    )


def test_follower_tails_appends_and_moves_to_the_rotated_file(tmp_path: Path) -> None:
    """What --follow does on each wake-up, driven step by step (no watcher, no clock): complete
    lines only, then the next ``_NNN`` file once it exists, even while it is still empty."""
    from penguin.cli.follow import Follower

    meta = _follow_meta()
    f1, f2 = tmp_path / f"{SID}_001.jsonl", tmp_path / f"{SID}_002.jsonl"
    f1.write_bytes(encode_line(meta) + encode_line(b.user_text("first")))
    seen: list[tuple[int, int, str]] = []

    def emit(index: int, ordinal: int, _line: int, record: Any) -> None:
        seen.append((index, ordinal, getattr(record.payload, "text", "meta")))

    follower = Follower(f1, emit)
    follower.poll()
    assert seen == [(1, 0, "meta"), (1, 1, "first")]
    line = encode_line(b.assistant_text("second"))
    with open(f1, "ab") as f:
        f.write(line[:7])  # a line still being written is not printed
    follower.poll()
    assert len(seen) == 2
    with open(f1, "ab") as f:
        f.write(line[7:])
    follower.poll()
    assert seen[-1] == (1, 2, "second")
    f2.touch()  # the rotation has created the file but not written its head yet
    follower.poll()
    assert follower.path == f2 and len(seen) == 3
    f2.write_bytes(encode_line(meta) + encode_line(b.user_text("third")))
    follower.poll()
    assert seen[3:] == [(2, 0, "meta"), (2, 1, "third")]


def test_inspect_follow_prints_appends_and_ends_on_ctrl_c(tmp_path: Path) -> None:
    """--follow prints the records, then what is appended, and ends with exit 0 on Ctrl-C.

    Ordering comes from the output alone: the process handles Ctrl-C before it prints its first
    record, so SIGINT is sent only after output was seen.  The deadline is a deadlock guard."""
    traces = tmp_path / "home" / "default_project" / "agents" / "default_agent" / "traces"
    day = traces / "2026-07-18"
    day.mkdir(parents=True)
    f1 = day / f"{SID}_001.jsonl"
    f1.write_bytes(encode_line(_follow_meta()) + encode_line(b.user_text("first")))
    env = {k: v for k, v in os.environ.items() if k != "PENGUIN_HOME"}
    proc = subprocess.Popen(
        [str(PENGUIN), "--home", str(tmp_path / "home"), "inspect", SID, "--follow", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    out = b""

    def lines(n: int) -> list[bytes]:
        nonlocal out
        assert proc.stdout is not None
        deadline = time.monotonic() + 120  # a deadlock guard, not a timing assertion
        while out.count(b"\n") < n:
            ready, _, _ = select.select(
                [proc.stdout], [], [], max(0.0, deadline - time.monotonic())
            )
            assert ready, f"no line {n} within the deadlock guard: {out!r}"
            chunk = os.read(proc.stdout.fileno(), 65536)
            assert chunk, f"follow ended early: {out!r}"
            out += chunk
        return out.splitlines()

    try:
        assert len(lines(2)) == 2
        with open(f1, "ab") as f:
            f.write(encode_line(b.assistant_text("second")))
        assert decode(lines(3)[2]).payload.text == "second"  # type: ignore[union-attr]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()
    assert b"Traceback" not in stderr
