"""The two request shapes of ``../shared/cases`` (issue 31, item 6): the live and the resumed
engine follow the SPEC's rules, not only each other.

- ``carry-order-after-write-fault``: a committed turn whose running call has no output and whose
  later call was denied.  R-CARRY-3 / R-RESUME-9: the real outputs (the denial) in call order
  first, then one placeholder per call without an output — also after a compaction attempt
  put the carry-over back into pending (it used to be re-sorted into call order there).
- ``goal-downgrade-midrun-compaction``: a Prompt whose first text starts with a goal block and
  has a second text after it.  R-CARRY-12 / R-RUN-5: only carry-over is downgraded; a run's own
  Prompt is sent as written (a second text of the same Prompt used to make the first one stale).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from enginekit import collect
from sharedkit import SHARED

from engine import allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    DataRoot,
    OmniMessage,
    TextPayload,
    ThinkingPayload,
    TokenCounts,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolDefinition,
    encode_line,
    read_trace,
)
from eventstore import builders as b
from projections import ModelContext
from projections import markers as mk
from replay import request_at, resume_session

CASES = SHARED / "cases"
CARRY = CASES / "carry-order-after-write-fault"
GOAL = CASES / "goal-downgrade-midrun-compaction"


def shape(msg: OmniMessage) -> tuple[str, str | None, str]:
    p = msg.payload
    if isinstance(p, ToolCallOutputPayload):
        return ("tool_call_output", p.tool_call_id, p.output)
    if isinstance(p, ToolCallPayload):
        return ("tool_call", p.tool_call_id, p.name)
    if isinstance(p, ThinkingPayload):
        return ("thinking", None, "")  # the case files normalize thinking bodies away
    if isinstance(p, TextPayload):
        return ("text", None, p.text)
    return (type(p).__name__, None, "")


def expected_shapes(case: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    out: list[tuple[str, str | None, str]] = []
    for e in case["expected_by_spec"]:
        if e["type"] == "model_msg":  # the next prompt, normalized away in the case file
            continue
        text = "" if e["type"] == "thinking" else (e["text"] or "")
        out.append((e["type"], e["tool_call_id"], text))
    return out


def cut(shapes: list[tuple[str, str | None, str]]) -> list[tuple[str, str | None, str]]:
    # The case files cut long texts at 160 characters.
    return [(k, cid, text[:160]) for k, cid, text in shapes]


def install(case_dir: Path, home: Path) -> str:
    (trace,) = case_dir.glob("*.jsonl")
    dest = home / "default_project" / "agents" / "default_agent" / "traces" / "2026-12-02"
    dest.mkdir(parents=True)
    shutil.copyfile(trace, dest / trace.name)
    return trace.name.rsplit("_", 1)[0]


@pytest.mark.needs_shared(CARRY)
@pytest.mark.anyio
async def test_carry_order_case_resumes_as_the_spec_says(tmp_path: Path) -> None:
    """R-CARRY-3, R-RESUME-9: after the crash inside the failed manual compaction, the next
    request holds the denial of c50694_4 before the placeholder of c50694_3."""
    case = json.loads((CARRY / "case.json").read_text())
    home = tmp_path / "home"
    sid = install(CARRY, home)
    ws = tmp_path / "ws"
    ws.mkdir()
    llm = ScriptedLLM({"responses": [[{"text": "ok"}]]})
    session = await resume_session(
        DataRoot(home), sid, llm=llm, environment=ScriptedEnvironment.from_llm(llm), workspace=ws
    )
    prompt = [b.user_text(m["payload"]["text"]) for m in case["next_prompt"]]
    async with session:
        await collect(session.run(prompt, approve=allow_all))
    sent = [shape(m) for m in llm.requests[0].messages]
    assert cut(sent[: -len(prompt)]) == cut(expected_shapes(case))
    outputs = [s for s in sent if s[0] == "tool_call_output"]
    assert outputs == [
        ("tool_call_output", "c50694_4", mk.DENIED_BY_USER),
        ("tool_call_output", "c50694_3", mk.PLACEHOLDER_ABORTED),
    ]


@pytest.mark.needs_shared(GOAL)
def test_goal_case_request_keeps_the_runs_own_prompt() -> None:
    """R-CARRY-12, R-RUN-5: the request the trace ends in sends its Prompt's goal text as
    written (the fold, hence resume and the live engine, R-PROJ-3)."""
    case = json.loads((GOAL / "case.json").read_text())
    (trace,) = GOAL.glob("*.jsonl")
    last = len(trace.read_text().splitlines()) - 1
    request = request_at([trace], (1, last))
    assert cut([shape(m) for m in request.messages]) == cut(expected_shapes(case))
    assert request.messages[-2].payload.text.startswith("[goal]\nround: 9\n")  # type: ignore[union-attr]


# --------------------------------------------------------------------------- live engine

TOOLS = [{"name": "t", "description": "test tool"}]


def write(path: Path, records: list[OmniMessage]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(encode_line(r) for r in records))


@pytest.mark.anyio
async def test_live_carry_over_after_a_put_back_compaction_keeps_placeholders_last(
    tmp_path: Path,
) -> None:
    """R-CARRY-3, R-RESUME-9, R-COMPACT-28: a crash left c1 (allowed, running) without an
    output and c2 denied.  The resumed session's manual compaction fails before anything is
    committed, so its input goes back into the carry-over exactly; the next run (live) and a
    fresh fold of the trace (resume) both send the denial first, then the placeholder."""
    from engine import CompactionSettings

    home = tmp_path / "home"
    ws = tmp_path / "ws"
    ws.mkdir()
    root = DataRoot(home)
    sid = root.new_session_id()
    meta = b.session_meta(
        session_id=sid,
        provider="scripted",
        model_id="script",
        model_context_window="unknown",
        system_prompt="",
        agent_state=str(root.agent_state("default_project", "default_agent")),
        workspace=str(ws),
    )
    records = [
        meta,
        b.user_text("go"),
        b.tool_list_ready([ToolDefinition(name="t", description="test tool")]),
        b.request_begin(),
        b.tool_call("t", "{}", "c1"),
        b.approval_decision("allow", "c1"),
        b.tool_call("t", "{}", "c2"),
        b.approval_decision("deny", "c2"),
        b.tool_call_output("c2", mk.DENIED_BY_USER, stop_reason="aborted"),
        b.token_usage(TokenCounts(0, 5, 1, 6), TokenCounts(0, 5, 1, 6)),
        b.request_end("completed"),
    ]
    write(root.trace_path(sid, 1, date=sid.split("-", 1)[1][:10]), records)
    script = {
        "tools": TOOLS,
        "responses": [
            [{"fail": {"status": "auth", "message": "key revoked"}}],  # the compaction
            [{"text": "next"}],
        ],
    }
    llm = ScriptedLLM(script)
    session = await resume_session(
        root,
        sid,
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        compaction=CompactionSettings(max_context_length=0),
    )
    async with session:
        assert await session.compact() == "failed"
        await collect(session.run([b.user_text("again")], approve=allow_all))
    order = [
        (s[1], s[2]) for s in map(shape, llm.requests[-1].messages) if s[0] == "tool_call_output"
    ]
    assert order == [("c2", mk.DENIED_BY_USER), ("c1", mk.PLACEHOLDER_CRASH)]
    # The compaction request itself folded them in the same order (R-COMPACT-28).
    folded = [s[1] for s in map(shape, llm.requests[0].messages) if s[0] == "tool_call_output"]
    assert folded == ["c2", "c1"]
    # A fresh fold of the whole trace sends the same request again (R-RESUME-18).
    trace = read_trace(root.trace_files(sid)).records
    begins = [n for n, r in enumerate(trace) if r.type == "event_msg" and _is_begin(r)]
    again = request_at(root.trace_files(sid), (1, begins[-1]))
    assert again.messages == llm.requests[-1].messages
    assert ModelContext.from_records(trace).pending == []


def _is_begin(record: OmniMessage) -> bool:
    from eventstore import RequestBeginPayload

    return isinstance(record.payload, RequestBeginPayload)


@pytest.mark.anyio
async def test_live_prompt_with_a_goal_text_and_a_second_text_is_sent_as_written(
    tmp_path: Path,
) -> None:
    """R-RUN-5, R-CARRY-12: a Prompt of two texts, the first starting with a goal block, is
    the run's own input: the live request sends both as written; a goal text carried over
    from an ended run is still downgraded."""
    from engine import Session

    goal_text = "[goal]\nround: 9\nobjective here\n[/goal]\n\nrest of text"
    llm = ScriptedLLM(
        {
            "tools": TOOLS,
            "responses": [
                [{"text": "a"}],
                [{"fail": {"status": "auth", "message": "no"}}],
                [{"text": "b"}],
            ],
        }
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    session = await Session.create(
        llm=llm, environment=ScriptedEnvironment.from_llm(llm), root=tmp_path / "h", workspace=ws
    )
    async with session:
        await collect(session.run([b.user_text(goal_text), b.user_text("second")]))
        # An ended run's goal text in the carry-over (case B) is downgraded when re-sent.
        await collect(session.run([b.user_text(goal_text), b.user_text("third")]))
        await collect(session.run([b.user_text("fourth")]))
    first = [shape(m)[2] for m in llm.requests[0].messages]
    assert first == [goal_text, "second"]
    second = [shape(m)[2] for m in llm.requests[1].messages]
    assert second[-2:] == [goal_text, "third"]
    carried = llm.requests[2].messages[-2].payload
    assert isinstance(carried, TextPayload)
    assert "[user_input][goal round 9 of an ended goal run" in carried.text


# --------------------------------------------------------------------------- golden replay


@pytest.mark.needs_shared(GOAL)
def test_goal_case_trace_replays_with_every_run_compared() -> None:
    """R-GOLD-3..5: an engine-written session with an abort, a failed mid-task compaction, a
    resume and a crash at its end (the file stops at a ``request_begin``) replays whole; its
    goal-looking prompt is not a goal-mode round (it names no goal file)."""
    from replay.golden import replay_trace

    result = replay_trace(list(GOAL.glob("*.jsonl")))
    assert str(result) == "match"
    assert result.runs_compared == result.runs_total == 3


@pytest.mark.needs_shared(CARRY)
def test_carry_case_trace_is_compared_up_to_its_disk_fault() -> None:
    """R-GOLD-5: the run that a disk fault ended (R-TRACE-15) cannot be reproduced: what comes
    before it matches, and the result says why the rest was not compared."""
    from replay.golden import replay_trace

    result = replay_trace(list(CARRY.glob("*.jsonl")))
    assert result.matched and not result.complete
    assert result.partial_reason == (
        "2 of 4 runs compared: run 3 contains a trace write failure (R-TRACE-15)"
    )
