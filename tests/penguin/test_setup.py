"""The one setup path (SPEC §23, R-SET-3): override, else record, else the host's default."""

from __future__ import annotations

import json
from pathlib import Path

from clikit import invoke

from engine import CompactionSettings, RetryPolicy, Session
from eventstore import SettingsPayload, WorkspaceSnapshotPayload, iter_trace
from penguin._setup import Overrides, resolve, settings_line

RECORDED = SettingsPayload(
    approval="deny-all",
    max_turns=1,
    compaction={"mode": "discard", "max_context_length": 5000, "max_session_turns": -1},
    retry={"max_reconnects": 2, "base_ms": 10, "cap_ms": 20},
    thinking_level="high",
    model={"provider": "openai", "model_id": "gpt-x", "base_url": "http://llm:8000/v1"},
)


def test_recorded_settings_win_over_the_hosts_defaults() -> None:
    r = resolve(RECORDED, Overrides(), default_approval="allow-all")
    assert r.approval == "deny-all" and r.max_turns == 1
    assert r.compaction == CompactionSettings(mode="discard", max_context_length=5000)
    assert r.retry == RetryPolicy(max_reconnects=2, base_ms=10, cap_ms=20)
    assert r.thinking_level == "high"
    assert r.model == ("openai", "gpt-x", "http://llm:8000/v1")
    assert r.overridden == ()


def test_an_override_wins_and_changes_only_what_it_names() -> None:
    """``--max-context-length`` on a resumed discard session keeps its mode."""
    r = resolve(
        RECORDED,
        Overrides(approval="ask", compaction={"max_context_length": 9000}),
        default_approval="allow-all",
    )
    assert r.approval == "ask" and r.max_turns == 1
    assert r.compaction == CompactionSettings(mode="discard", max_context_length=9000)
    assert set(r.overridden) == {"approval", "compaction"}
    off = resolve(RECORDED, Overrides(compaction_off=True), default_approval="ask")
    assert off.compaction is None


def test_without_a_record_the_defaults_apply() -> None:
    """A reference trace (no settings record) or a new session."""
    r = resolve(None, Overrides(), default_approval="ask")
    assert (r.approval, r.max_turns, r.model) == ("ask", 100, None)
    assert r.compaction == Session.DEFAULT_COMPACTION and r.retry == Session.DEFAULT_RETRY


def test_the_restored_settings_on_one_line() -> None:
    assert settings_line(RECORDED) == (
        "settings: approval deny-all; max turns 1; compaction discard at 5000 tokens; "
        "retries 2; thinking high; model openai/gpt-x at http://llm:8000/v1"
    )
    assert settings_line(None) == "settings: none recorded (the defaults apply)"
    assert "compaction off" in settings_line(SettingsPayload(compaction=False))


def test_resume_keeps_the_recorded_snapshots_over_the_configs_r_set_3(tmp_path: Path) -> None:
    """config.toml's ``snapshots`` is a default: a session recorded with snapshots off stays
    off when resumed under a config that has them on (and takes no snapshot)."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    config = home / "config.toml"
    config.write_text('[defaults]\nsnapshots = "false"\n')
    script = tmp_path / "script.json"
    calls = [
        [{"tool_call": {"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}}],
        [{"text": "done"}],
    ]
    script.write_text(json.dumps(calls))
    first = invoke("--home", home, "run", "-m", "go", "--workspace", ws, "--script", script)
    assert first.exit_code == 0, first.output
    config.write_text("")  # snapshots on by default from now on
    second = invoke("--home", home, "resume", "-m", "again", "--script", script)
    assert second.exit_code == 0, second.output
    records = [r for p in sorted(home.rglob("*.jsonl")) for r in iter_trace(p)]
    settings = [r.payload for r in records if isinstance(r.payload, SettingsPayload)]
    assert [s.snapshots for s in settings] == [False]  # stated once, unchanged by the resume
    assert not [r for r in records if isinstance(r.payload, WorkspaceSnapshotPayload)]
    # A new session takes the config's default.
    third = invoke("--home", home, "run", "-m", "go", "--workspace", ws, "--script", script)
    assert third.exit_code == 0, third.output
    assert any(
        isinstance(r.payload, WorkspaceSnapshotPayload)
        for p in home.rglob("*.jsonl")
        for r in iter_trace(p)
    )


def test_subagents_from_the_choice_else_the_recorded_tools_else_off() -> None:
    """R-SET-3 for ``run_subagent``: recorded in the settings' ``tools`` (R-SET-1)."""
    with_tools = RECORDED.__class__(tools=["exec_command", "run_subagent"])
    assert resolve(None, Overrides(), default_approval="ask").subagents is False
    assert resolve(None, Overrides(subagents=True), default_approval="ask").subagents is True
    assert resolve(with_tools, Overrides(), default_approval="ask").subagents is True
    assert resolve(RECORDED, Overrides(), default_approval="ask").subagents is False
    # A host's default applies to what has no record; a record without the tool keeps it off.
    assert resolve(None, Overrides(), default_approval="ask", default_subagents=True).subagents
    assert not resolve(
        RECORDED, Overrides(), default_approval="ask", default_subagents=True
    ).subagents
    off = resolve(with_tools, Overrides(subagents=False), default_approval="ask")
    assert off.subagents is False and off.overridden == ("tools",)
    same = resolve(with_tools, Overrides(subagents=True), default_approval="ask")
    assert same.subagents is True and same.overridden == ()


def test_resume_keeps_the_recorded_subagents_unless_told_otherwise(tmp_path: Path) -> None:
    """``penguin run --subagents`` records the tool set; ``resume`` offers run_subagent again
    without the flag (R-SET-3); ``--no-subagents`` turns it off, and that is recorded."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    spawn = {"tool_call": {"name": "run_subagent", "arguments": {"prompt": "look"}}}
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "responses": [[spawn], [{"text": "done"}]],
                "subagent": [[{"text": "child answer"}]],
            }
        )
    )
    run = ("--home", home, "run", "-m", "go", "--workspace", ws, "--script", script)
    first = invoke(*run, "--subagents")
    assert first.exit_code == 0, first.output
    again = invoke("--home", home, "resume", "-m", "again", "--script", script)
    assert again.exit_code == 0, again.output
    off = invoke("--home", home, "resume", "-m", "once more", "--script", script, "--no-subagents")
    assert off.exit_code == 0, off.output

    def children() -> int:
        return sum(
            1
            for p in home.rglob("*.jsonl")
            for r in iter_trace(p)
            if r.type == "session_meta" and getattr(r.payload, "source", None) == "subagent"
        )

    assert children() == 2  # the first run's child and the resumed run's
    traces = [list(iter_trace(p)) for p in sorted(home.rglob("*.jsonl"))]
    (parent,) = [t for t in traces if getattr(t[0].payload, "source", None) is None]
    tools = [r.payload.tools for r in parent if isinstance(r.payload, SettingsPayload)]
    assert tools == [["exec_command", "read_file", "write_file", "edit_file", "run_subagent"], None]
    # The restored settings line says so.
    assert "tools exec_command,read_file,write_file,edit_file,run_subagent" in again.output


def test_a_recorded_subagents_choice_a_script_cannot_keep_says_how_to_go_without(
    tmp_path: Path,
) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    plain, own_tools = tmp_path / "plain.json", tmp_path / "tools.json"
    plain.write_text(json.dumps([[{"text": "hi"}]]))
    tools = [{"name": "echo", "description": "echo", "parameters": {"type": "object"}}]
    own_tools.write_text(json.dumps({"responses": [[{"text": "again"}]], "tools": tools}))
    first = invoke(
        "--home", home, "run", "-m", "go", "--workspace", ws, "--script", plain, "--subagents"
    )
    assert first.exit_code == 0, first.output
    refused = invoke("--home", home, "resume", "-m", "again", "--script", own_tools)
    assert refused.exit_code == 2
    assert "recorded with subagents (--no-subagents goes without)" in refused.output
    without = invoke(
        "--home", home, "resume", "-m", "again", "--script", own_tools, "--no-subagents"
    )
    assert without.exit_code == 0, without.output
