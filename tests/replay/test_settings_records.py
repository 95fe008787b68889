"""Session settings are records (SPEC §23): written when R-SET-2 says, folded last-wins, taken
back by resume (R-SET-3), never holding a secret (R-SET-4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from enginekit import Env, collect, make_env, make_session, trace_records

from engine import (
    CompactionSettings,
    RetryPolicy,
    allow_all,
    deny_all,
    public_url,
    settings_payload,
)
from engine.llm import OpenAICompatible, ScriptedEnvironment, ScriptedLLM
from eventstore import OmniMessage, SettingsPayload, encode, read_trace
from eventstore import builders as b
from projections import SessionState
from replay import load_session, resume_session

pytestmark = pytest.mark.anyio

TOOLS = [{"name": "t", "description": "test tool"}]
CALL = [{"tool_call": {"name": "t", "arguments": {}, "id": "c"}}]


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


def settings_of(records: list[OmniMessage]) -> list[tuple[int, SettingsPayload]]:
    return [(i, r.payload) for i, r in enumerate(records) if isinstance(r.payload, SettingsPayload)]


def kind(msg: OmniMessage) -> str:
    return msg.type if msg.type == "session_meta" else type(msg.payload).__name__


async def test_first_run_states_the_complete_settings_before_its_input(env: Env) -> None:
    """R-SET-1, R-SET-2a: session_meta, settings, then the prompt."""
    session, _ = await make_session(
        env, [[{"text": "hi"}]], compaction=CompactionSettings(max_session_turns=7), max_turns=3
    )
    async with session:
        await collect(session.run([b.user_text("a")], approve=allow_all, thinking_level="high"))
    records = trace_records(session)
    assert [kind(r) for r in records[:3]] == ["session_meta", "SettingsPayload", "TextPayload"]
    s = records[1].payload
    assert isinstance(s, SettingsPayload)
    assert s.approval == "allow-all" and s.max_turns == 3
    assert s.compaction == {
        "max_context_length": 128000,
        "max_session_turns": 7,
        "mode": "summarize",
    }
    assert s.retry == {"max_reconnects": 5, "base_ms": 1, "cap_ms": 4}
    assert s.model == {"provider": "scripted", "model_id": "script"}
    # A run's own thinking level is not the default (R-SET-1: the default of runs passing none).
    assert s.thinking_level is None
    assert session.state.settings == s


async def test_a_run_with_other_settings_records_them_and_an_equal_one_does_not(env: Env) -> None:
    """R-SET-2b: written only when a run's settings differ from the projection's."""
    session, _ = await make_session(env, [[{"text": "1"}], [{"text": "2"}], [{"text": "3"}]])
    async with session:
        await collect(session.run([b.user_text("a")], approve=allow_all))
        await collect(session.run([b.user_text("b")], approve=allow_all))
        await collect(session.run([b.user_text("c")], approve=deny_all))
    found = settings_of(trace_records(session))
    assert [s.approval for _, s in found] == ["allow-all", "deny-all"]


async def test_every_rotated_file_starts_with_its_settings(env: Env) -> None:
    """R-SET-2c: right after tool_list_ready at the head of a rotated file; a run whose settings
    changed after the compaction puts the new settings there, and no second record."""
    script = {
        "responses": [[{"text": "a"}], [{"text": "[summary]s[/summary]"}], [{"text": "b"}]],
        "tools": TOOLS,
    }
    session, _ = await make_session(env, script, compaction=CompactionSettings(max_session_turns=1))
    async with session:
        await collect(session.run([b.user_text("one")], approve=allow_all))
        assert session.state.rotation_pending
        await collect(session.run([b.user_text("two")], approve=deny_all))
    files = env.root.trace_files(session.id)
    assert len(files) == 2
    second = read_trace(files[1]).records
    assert [kind(r) for r in second[:3]] == [
        "session_meta",
        "ToolListReadyPayload",
        "SettingsPayload",
    ]
    assert [s.approval for _, s in settings_of(second)] == ["deny-all"]
    state = SessionState.from_records([*read_trace(files[0]).records, *second])
    assert state == session.state and state.settings is not None
    assert state.settings.approval == "deny-all"


async def test_resume_takes_the_recorded_settings(env: Env) -> None:
    """R-SET-3: no option given → the recorded max_turns, compaction, retry, thinking level
    and approval (an allow-all session is not resumed as deny-all, nor the reverse)."""
    session, _ = await make_session(
        env,
        {"responses": [[{"text": "a"}]], "tools": TOOLS},
        compaction=None,
        max_turns=1,
        retry=RetryPolicy(max_reconnects=2, base_ms=1, cap_ms=2),
    )
    async with session:
        await collect(session.run([b.user_text("one")], approve=allow_all))
    llm = ScriptedLLM({"responses": [CALL, [{"text": "b"}]], "tools": TOOLS})
    resumed = await resume_session(
        env.root, session.id, llm=llm, environment=ScriptedEnvironment.from_llm(llm)
    )
    llm.bind(resumed)
    assert resumed.options.max_turns == 1 and resumed.options.compaction is None
    assert resumed.options.retry == RetryPolicy(max_reconnects=2, base_ms=1, cap_ms=2)
    async with resumed:
        stream = await collect(resumed.run([b.user_text("two")]))  # no approve: the recorded one
    decisions = [
        m.payload.decision
        for m in stream
        if m.payload.__class__.__name__ == "ApprovalDecisionPayload"
    ]
    assert decisions == ["allow"]
    # max_turns=1 was kept: the task stops after the tool-call turn (R-MAXT-2).
    assert resumed.state.run_end == "max_turns"
    # Nothing changed, so nothing was recorded again (R-SET-2b).
    assert len(settings_of(trace_records(resumed))) == 1


async def test_an_explicit_option_overrides_and_is_recorded(env: Env) -> None:
    """R-SET-3: an explicit argument wins and, differing, is recorded before the run's input."""
    session, _ = await make_session(env, [[{"text": "a"}]], max_turns=4)
    async with session:
        await collect(session.run([b.user_text("one")], approve=deny_all))
    llm = ScriptedLLM([[{"text": "b"}]])
    resumed = await resume_session(
        env.root, session.id, llm=llm, environment=ScriptedEnvironment.from_llm(llm), max_turns=9
    )
    llm.bind(resumed)
    async with resumed:
        await collect(resumed.run([b.user_text("two")]))
    found = settings_of(trace_records(resumed))
    assert [(s.max_turns, s.approval) for _, s in found] == [(4, "deny-all"), (9, "deny-all")]


async def test_flat_resume_keeps_the_settings_of_an_earlier_file(env: Env) -> None:
    """R-TRACE-19: the settings fold goes through the file summaries; the state rebuilt from
    the sidecar equals the full fold."""
    script = {
        "responses": [[{"text": "a"}], [{"text": "[summary]s[/summary]"}], [{"text": "b"}]],
        "tools": TOOLS,
    }
    session, _ = await make_session(env, script, compaction=CompactionSettings(max_session_turns=1))
    async with session:
        await collect(session.run([b.user_text("one")], approve=deny_all))
        await collect(session.run([b.user_text("two")], approve=deny_all))
    for _ in range(2):  # once building the sidecar, once reading it
        _, _, _, state, _ = load_session(env.root, session.id, store_summaries=True)
        assert state == session.state
        assert state.settings is not None and state.settings.approval == "deny-all"


async def test_the_endpoint_is_recorded_without_its_secrets(env: Env) -> None:
    """R-SET-1, R-SET-4: the model's endpoint is recorded; user info, a key in the query and
    the API key are not."""
    secret = "sk-settings-Zx81Qw"
    llm = OpenAICompatible(
        "gpt-x", base_url=f"https://user:{secret}@llm.example/v1?key={secret}&v=2", api_key=secret
    )
    payload = b.settings(
        settings_payload(
            approval="ask",
            max_turns=1,
            compaction=None,
            retry=RetryPolicy(),
            thinking_level=None,
            llm=llm,
        )
    )
    assert payload.payload.model == {  # type: ignore[union-attr]
        "provider": "openai",
        "model_id": "gpt-x",
        "base_url": "https://llm.example/v1?v=2",
    }
    assert secret not in encode(payload).decode()
    assert public_url("http://a:b@h:1/p") == "http://h:1/p"
    await llm.aclose()


def test_the_suite_wide_secret_grep_finds_a_planted_key(tmp_path: Path) -> None:
    """R-SET-4: the session fixture's grep is not vacuous: a trace holding a suite key is found,
    and every listed key is one a test module really uses."""
    from secretkit import SUITE_SECRETS, traces_holding

    trace = tmp_path / "t" / "s_001.jsonl"
    trace.parent.mkdir()
    trace.write_text('{"payload": {"x": "Bearer ' + SUITE_SECRETS[0] + '"}}\n')
    (tmp_path / "clean_001.jsonl").write_text("{}\n")
    try:
        assert traces_holding(tmp_path, SUITE_SECRETS) == [(trace, SUITE_SECRETS[0])]
    finally:
        trace.unlink()  # planted here only: the suite's own grep must not find it
    tests = Path(__file__).resolve().parents[1]
    sources = "".join(
        p.read_text(encoding="utf-8") for p in tests.rglob("*.py") if p.name != "secretkit.py"
    )
    assert all(sources.count(secret) >= 1 for secret in SUITE_SECRETS)


async def test_diff_reports_a_settings_change(tmp_path: Path) -> None:
    """SPEC §23 item 7, R-TOOL-2: two runs of the same task under other settings differ."""
    from replay import diff_traces

    sides = []
    for n, turns in enumerate((3, 4)):
        (tmp_path / str(n)).mkdir()
        env = make_env(tmp_path / str(n))
        session, _ = await make_session(env, [[{"text": "same"}]], max_turns=turns)
        async with session:
            await collect(session.run([b.user_text("task")], approve=deny_all))
        sides.append(env.root.trace_files(session.id))
    result = diff_traces(sides[0], sides[1])
    assert not result.equal
    assert [d.what for d in result.differences] == ["settings"]
    assert result.summary["settings_changes"] == 1
    assert diff_traces(sides[0], sides[0]).equal
