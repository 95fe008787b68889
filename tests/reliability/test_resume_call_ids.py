"""A crash at every record boundary of a scripted session, then a resumed run: the trace it
leaves validates (R-RUN-20, R-RESUME-14a, V-8).

A crash right after an ``approval_decision`` leaves its request span open; resume closes it
``aborted`` and the context drops the attempt, so the call is in the trace but in no later
request.  A ScriptedLLM bound to the resumed session restarts its default ``call_<r>_<n>`` ids
and must rename them past every recorded call, not only those of the history it is sent:
otherwise the resumed run approves the same ``tool_call_id`` a second time (the server crash
suite's rare V-8 failure).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from engine import Session, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import ApprovalDecisionPayload, iter_trace
from eventstore import builders as b
from replay import resume_session, validate_session

pytestmark = pytest.mark.anyio

TOOLS = [{"name": "echo", "description": "echo", "parameters": {"type": "object"}}]


def _script() -> dict[str, Any]:
    turns: list[Any] = [
        [
            {"text": f"turn {n}"},
            {"tool_call": {"name": "echo", "arguments": {"n": n}, "result": {"output": f"{n}"}}},
        ]
        for n in range(2)
    ]
    return {"responses": [*turns, [{"text": "done"}]], "tools": TOOLS}


async def _task(session: Session, llm: ScriptedLLM, text: str) -> None:
    llm.bind(session)
    async with session:
        async for _ in session.run([b.user_text(text)], approve=allow_all):
            pass


async def _resume_and_run(root: Path, sid: str) -> None:
    llm = ScriptedLLM(_script())
    session = await resume_session(
        root, sid, llm=llm, environment=ScriptedEnvironment.from_llm(llm)
    )
    await _task(session, llm, "again")


async def test_resume_after_a_crash_at_each_record_approves_each_call_once(
    tmp_path: Path,
) -> None:
    base, ws = tmp_path / "base", tmp_path / "ws"
    ws.mkdir()
    llm = ScriptedLLM(_script())
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=base,
        workspace=ws,
        system_prompt="t",
    )
    sid = session.id
    await _task(session, llm, "go")
    # A second task on a resumed session: its ids are the renamed ``call_<r>_<n>#2``.
    await _resume_and_run(base, sid)
    [latest] = sorted(base.rglob(f"{sid}_*.jsonl"))
    lines = latest.read_bytes().splitlines(keepends=True)
    decisions = [
        k + 1
        for k, rec in enumerate(iter_trace(latest, report=False))
        if isinstance(rec.payload, ApprovalDecisionPayload)
    ]
    assert len(decisions) == 4
    for cut in range(1, len(lines) + 1):
        root = tmp_path / f"cut{cut}"
        shutil.copytree(base, root, ignore=shutil.ignore_patterns("index.sqlite3*"))
        [file] = sorted(root.rglob(f"{sid}_*.jsonl"))
        file.write_bytes(b"".join(lines[:cut]))
        await _resume_and_run(root, sid)
        files = sorted(root.rglob(f"{sid}_*.jsonl"))
        errors = [str(f) for f in validate_session(files) if f.severity == "error"]
        assert errors == [], f"crash after record {cut} (decisions at {decisions})"
        shutil.rmtree(root)
