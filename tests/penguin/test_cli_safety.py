"""Issue 15 items 1-5 and 12: the CLI is safe by default.

No silent demo model (R-CLI-1 [changed]), resume keeps the recorded model, the config file,
the approval default, nothing the reader skips goes unreported, bad input is caught early,
and the global options work after the command too."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

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
    write_script,
)

from eventstore import DataRoot, read_trace
from eventstore import builders as b
from penguin.cli.config import Config
from penguin.cli.globalopts import hoist_globals
from penguin.cli.tasks.model import LlmOptions, choose_approve, choose_model

NO_KEY = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": ""}


def recorded_session(tmp_path: Path, *, provider: str = "openai", model: str = "gpt-x") -> Path:
    home = tmp_path / "home"
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    records = [meta(provider=provider, model_id=model, workspace=str(ws)), b.user_text("hi")]
    write_records(trace_file(home), [*records, *turn("hello")])
    return home


# --------------------------------------------------------------------------- item 1


def test_resume_reuses_the_recorded_provider_and_model(tmp_path: Path) -> None:
    home = recorded_session(tmp_path)
    before = trace_file(home).read_bytes()
    # The recorded openai model is chosen: its key is what is missing (nothing else runs).
    result = invoke("--home", home, "resume", SID, "-m", "more", env=NO_KEY)
    assert result.exit_code == 2 and "$OPENAI_API_KEY" in result.stderr
    assert trace_file(home).read_bytes() == before
    choice = choose_model(LlmOptions(), config=Config(home), recorded=("openai", "gpt-x"))
    assert (choice.provider, choice.model) == ("openai", "gpt-x")


def test_resume_with_another_model_is_refused_unless_told(tmp_path: Path) -> None:
    home = recorded_session(tmp_path)
    before = trace_file(home).read_bytes()
    other = ("--llm", "anthropic", "--model", "claude-x")
    result = invoke("--home", home, "resume", SID, "-m", "more", *other, env=NO_KEY)
    assert result.exit_code == 2
    assert "openai/gpt-x" in result.stderr and "--change-model" in result.stderr
    # With --change-model the refusal is gone (the missing key is what stops it now).
    result = invoke(
        "--home", home, "resume", SID, "-m", "more", *other, "--change-model", env=NO_KEY
    )
    assert result.exit_code == 2 and "$ANTHROPIC_API_KEY" in result.stderr
    assert trace_file(home).read_bytes() == before


def test_resume_of_a_scripted_session_needs_a_script(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run_script(tmp_path, home, FAST).exit_code == 0
    (sid,) = session_ids(home)
    before = read_trace(DataRoot(home).trace_files(sid)).records
    result = invoke("--home", home, "resume", sid, "-m", "again")
    assert result.exit_code == 2 and "--script FILE" in result.stderr
    assert read_trace(DataRoot(home).trace_files(sid)).records == before
    # A script with another model_id is another model.
    other = write_script(tmp_path, {**FAST, "model_id": "other"}, "other.json")
    result = invoke("--home", home, "resume", sid, "-m", "again", "--script", other)
    assert result.exit_code == 2 and "--change-model" in result.stderr
    result = invoke(
        "--home", home, "resume", sid, "-m", "again", "--script", other, "--change-model"
    )
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------------------- item 2


def test_config_set_show_and_no_keys_stored(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert invoke("--home", home, "config", "set", "model", "gpt-4o").exit_code == 2  # no root
    for key, value in (("provider", "openai"), ("model", "gpt-4o"), ("api_key_env", "MY_KEY")):
        result = invoke("--home", home, "--init", "config", "set", key, value)
        assert result.exit_code == 0, result.output
    data = tomllib.loads((home / "config.toml").read_text())
    assert data == {"defaults": {"provider": "openai", "model": "gpt-4o", "api_key_env": "MY_KEY"}}
    assert (home / "config.toml").stat().st_mode & 0o077 == 0
    shown = json.loads(invoke("--home", home, "config", "show", "--json").stdout)
    assert shown["settings"]["model"] == "gpt-4o"
    refused = invoke("--home", home, "config", "set", "api_key", "sk-secret")
    assert refused.exit_code == 2 and "never stored" in refused.stderr
    assert "sk-secret" not in (home / "config.toml").read_text()
    bad = invoke("--home", home, "config", "set", "approve", "sometimes")
    assert bad.exit_code == 2 and "allow-all" in bad.stderr
    # run uses the configured model: the configured key variable is what it asks for.
    ws = tmp_path / "ws"
    ws.mkdir()
    result = invoke(
        "--home", home, "run", "-m", "x", "--workspace", ws, env={"MY_KEY": ""} | NO_KEY
    )
    assert result.exit_code == 2 and "$MY_KEY" in result.stderr
    assert session_ids(home) == []


def test_config_file_errors_name_the_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("[defaults]\nmodel = \n")
    result = invoke("--home", home, "config", "show")
    assert result.exit_code == 2 and "config.toml" in result.stderr and "line 2" in result.stderr


# --------------------------------------------------------------------------- item 3


def test_approval_defaults() -> None:
    empty = Config(Path("/nonexistent"))
    assert choose_approve(None, scripted=True, config=empty) == "allow-all"
    # CliRunner and pytest: stdin is not a terminal.
    assert choose_approve(None, scripted=False, config=empty) == "refuse"
    assert choose_approve("allow-all", scripted=False, config=empty) == "allow-all"
    configured = Config(Path("/x"), {"approve": "deny-all"})
    assert choose_approve(None, scripted=False, config=configured) == "deny-all"


@pytest.mark.anyio
async def test_refusal_without_a_terminal_is_said_once(tmp_path: Path) -> None:
    from engine import Session
    from engine.llm import ScriptedEnvironment, ScriptedLLM
    from eventstore.builders import user_text
    from penguin.cli.tasks.live import drive
    from penguin.cli.terminal.console import err_console, out_console

    two_calls = {
        **FAST,
        "responses": [
            [
                {"tool_call": {"name": "shell", "arguments": {"cmd": "a"}, "id": "c1"}},
                {"tool_call": {"name": "shell", "arguments": {"cmd": "b"}, "id": "c2"}},
            ],
            [{"text": "ok"}],
        ],
    }
    llm = ScriptedLLM(two_calls)
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=DataRoot(tmp_path / "home"),
        workspace=tmp_path,
        system_prompt="s",
    )
    err_path = tmp_path / "err.txt"
    with open(err_path, "w") as err_file:
        err = err_console()
        err.file = err_file
        async with session:
            await drive(
                session,
                [user_text("go")],
                approve="refuse",
                as_json=False,
                out=out_console(),
                err=err,
            )
    text = err_path.read_text()
    assert text.count("tool calls are refused") == 1 and "--approve allow-all" in text
    decisions = [
        r.payload.decision
        for r in read_trace(session.trace_path).records
        if r.payload.__class__.__name__ == "ApprovalDecisionPayload"
    ]
    assert decisions == ["deny", "deny"]


# --------------------------------------------------------------------------- item 4


def wrong_typed_session(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    path = trace_file(home)
    write_records(path, [meta(workspace=str(ws)), b.user_text("the prompt"), *turn("hi")])
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"text":"the prompt"', b'"text":5')
    path.write_bytes(b"".join(lines) + b'{"timestamp": "torn')
    return home


def test_every_reader_diagnostic_is_reported_once(tmp_path: Path) -> None:
    home = wrong_typed_session(tmp_path)
    inspected = invoke("--home", home, "inspect", SID)
    assert "Diagnostics\n  none" not in inspected.stdout
    assert "text record skipped" in inspected.stdout and "torn_tail" in inspected.stdout
    insp = json.loads(invoke("--home", home, "inspect", SID, "--json").stdout)
    assert {d["kind"] for d in insp["diagnostics"]} == {"malformed", "torn_tail"}
    for args in (("resume", SID), ("sessions",)):
        result = invoke("--home", home, *args)
        assert result.exit_code == 0, result.output
        assert result.stderr.count("text record skipped") == 1, result.stderr
        assert result.stderr.count("torn_tail") == 1


def test_resume_reports_the_skipped_prompt_and_the_repair(tmp_path: Path) -> None:
    home = wrong_typed_session(tmp_path)
    script = write_script(tmp_path, {"responses": [[{"text": "ok"}]]})
    result = invoke(
        "--home", home, "resume", SID, "-m", "next", "--script", script, "--change-model"
    )
    assert result.exit_code == 0, result.output
    assert result.stderr.count("text record skipped") == 1
    assert "[resume] repaired: cut the torn last line 7" in result.stderr
    assert result.stderr.count("malformed line") == 0  # the library's own line is not doubled


# --------------------------------------------------------------------------- item 5


def test_bad_home_is_caught_before_anything_runs(tmp_path: Path) -> None:
    script = write_script(tmp_path, FAST)
    task = ("run", "-m", "x", "--script", script, "--workspace", tmp_path)
    a_file = tmp_path / "file"
    a_file.write_text("")
    result = invoke("--home", a_file, *task)
    assert result.exit_code == 2 and "is a file" in result.stderr
    assert invoke("--home", a_file, "sessions").exit_code == 2
    absent = tmp_path / "absent"
    result = invoke("--home", absent, *task)
    assert result.exit_code == 2 and "--init" in result.stderr and not absent.exists()
    assert invoke("--home", absent, "--init", *task).exit_code == 0
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        result = invoke("--home", locked, *task)
        assert result.exit_code == 2 and "not writable" in result.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("-m", ""), "is empty"),
        (("-m", "   "), "is empty"),
        (("-m", "x", "--max-turns", "0"), "at least 1"),
        (("-m", "x", "--max-turns", "-3"), "at least 1"),
    ],
)
def test_bad_task_options_exit_2(tmp_path: Path, extra: tuple[str, ...], message: str) -> None:
    script = write_script(tmp_path, FAST)
    home = tmp_path / "home"
    result = invoke(
        "--home", home, "--init", "run", *extra, "--script", script, "--workspace", tmp_path
    )
    assert result.exit_code == 2 and message in result.stderr
    assert session_ids(home) == []


def test_empty_and_garbage_traces_are_reported_as_such(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = trace_file(home)
    path.write_bytes(b"")
    result = invoke("--home", home, "resume", SID)
    assert result.exit_code == 2
    assert "no usable trace" in result.stderr and "unknown session" not in result.stderr
    path.write_bytes(b"garbage\nmore garbage\n")
    result = invoke("--home", home, "resume", SID)
    assert result.exit_code == 2 and "no usable trace" in result.stderr
    result = invoke("--home", home, "inspect", path)
    assert result.exit_code == 2 and "not a trace" in result.stderr
    path.write_bytes(b"")
    result = invoke("--home", home, "inspect", path)
    assert result.exit_code == 2 and "empty" in result.stderr


# --------------------------------------------------------------------------- item 12


def test_global_options_after_the_command(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ws = tmp_path / "ws"
    ws.mkdir()
    script = write_script(tmp_path, FAST)
    result = invoke(
        "run", "-m", "x", "--script", script, "--workspace", ws, "--home", home, "--init"
    )
    assert result.exit_code == 0, result.output
    (sid,) = session_ids(home)
    listed = invoke("sessions", "--json", f"--home={home}", "--project", "default_project")
    assert [r["session_id"] for r in json.loads(listed.stdout)] == [sid]
    assert hoist_globals(["run", "-m", "x", "--home", "H"]) == ["--home", "H", "run", "-m", "x"]
    assert hoist_globals(["--agent", "a", "inspect", "S", "--project", "p"]) == [
        "--agent", "a", "--project", "p", "inspect", "S",
    ]  # fmt: skip
    assert hoist_globals(["validate", "--", "--home"]) == ["validate", "--", "--home"]


def test_no_probing_of_own_provider_classes() -> None:
    """Issue 14 item 1: the CLI imports and types against its own modules."""
    cli = Path(__file__).parents[2] / "penguin" / "cli"
    everything = "".join(p.read_text() for p in cli.rglob("*.py"))
    assert "inspect.signature" not in everything and "getattr(llm_module" not in everything
    # Optional extras (server, duckdb) may be missing; the package's own modules may not.
    for name in (
        "tasks/model.py",
        "tasks/live.py",
        "commands/replay.py",
        "commands/run.py",
        "commands/resume.py",
    ):
        assert "except ImportError" not in (cli / name).read_text()


@pytest.mark.parametrize(("answer", "code"), [("y\n", 0), ("n\n", 2)])
def test_a_new_data_root_is_asked_for_on_a_terminal(tmp_path: Path, answer: str, code: int) -> None:
    """Issue 15 item 5: on a terminal, a data root that does not exist is created only after a
    yes (without one, ``--init`` is required: test_bad_home_is_caught_before_anything_runs)."""
    import pty
    import select
    import subprocess
    import sys
    import time

    home = tmp_path / "new-home"
    script = write_script(tmp_path, FAST)
    master, slave = pty.openpty()
    argv = [str(Path(sys.executable).parent / "penguin"), "--home", str(home), "run", "-m", "x"]
    proc = subprocess.Popen(
        [*argv, "--script", str(script), "--workspace", str(tmp_path)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={k: v for k, v in os.environ.items() if k != "PENGUIN_HOME"},
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 30
        while b"Create a new data root" not in seen:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, seen
            seen += os.read(master, 4096)
        assert not home.exists()
        os.write(master, answer.encode())
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
        assert proc.wait(30) == code, seen
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert home.exists() == (code == 0)
