"""Resume at every record boundary (R-RESUME-18, INV-12, INV-25, INV-26), as a property.

Hypothesis draws small scripted sessions — tool turns (0–3 calls with scripted delays, so
outputs land out of call order; some tools fail), transport failures and retries, auth
failures, steering, aborts fired by the consumer on its k-th message, max_turns, and
compactions (summarize or discard, low thresholds, summaries that succeed, come back empty,
call tools or time out) — and runs them live.  Then, for every record boundary of the trace,
a copy cut there is resumed and sent one prompt:

- the request must be legal: every completed tool call answered exactly once, later (INV-12);
- where the live session was at rest (right after one of its runs ended), the request must
  equal the one the live session sent for the same prompt (R-RESUME-18).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from enginekit import assert_requests_paired
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import AbortSignal, CompactionSettings, LLMRequest, RetryPolicy, Session, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import DataRoot, OmniMessage, TextPayload
from eventstore import builders as b
from replay import resume_session

TOOLS = [{"name": "t", "description": "test tool"}]
SUMMARIZE = "SUMMARIZE"


class Dispatching:
    """Turn requests go to one script, compaction requests (their last message is the
    compaction prompt) to another, so compactions can happen wherever the engine decides."""

    provider = "scripted"
    model_id = "property"
    vision = True

    def __init__(self, turns: list[Any], summaries: list[Any]) -> None:
        self.turns = ScriptedLLM({"responses": turns, "tools": TOOLS})
        self.summaries = ScriptedLLM({"responses": summaries, "tools": TOOLS})
        self.requests: list[LLMRequest] = []

    def bind(self, session: Session) -> None:
        self.turns.bind(session)

    def stream(self, request: LLMRequest) -> Any:
        self.requests.append(request)
        last = request.messages[-1].payload if request.messages else None
        if isinstance(last, TextPayload) and last.role == "user" and last.text == SUMMARIZE:
            return self.summaries.stream(request)
        return self.turns.stream(request)


@dataclass
class Plan:
    turns: list[Any]
    summaries: list[Any]
    aborts: list[int | None]
    compaction: CompactionSettings | None
    max_turns: int


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    turns: list[Any] = []
    for r in range(draw(st.integers(3, 10))):
        kind = draw(st.sampled_from(["text", "tools", "tools", "tools", "fail", "steer"]))
        items: list[Any] = []
        if kind in ("text", "steer"):
            if kind == "steer":
                items.append({"steer": f"steer {r}"})
            items.append({"text": f"reply {r}"})
        elif kind == "tools":
            if draw(st.booleans()):
                items.append({"text": f"calling {r}"})
            for j in range(draw(st.integers(0, 3))):
                result = {
                    "output": f"out {r}.{j}",
                    "delay_ms": draw(st.sampled_from([0, 1, 4])),
                    "status": draw(st.sampled_from(["completed", "completed", "failed"])),
                }
                items.append(
                    {
                        "tool_call": {
                            "name": "t",
                            "arguments": {"n": j},
                            "id": f"c{r}_{j}",
                            "result": result,
                        }
                    }
                )
        else:
            if draw(st.booleans()):
                items.append({"text": f"partial {r}"})
            status = draw(st.sampled_from(["timeout", "failed", "malformed", "auth"]))
            items.append({"fail": {"status": status, "message": f"err {r}"}})
        turns.append(items)
    summaries: list[Any] = []
    for i in range(4):
        kind = draw(st.sampled_from(["ok", "ok", "ok", "empty", "tools", "timeout"]))
        summaries.append(
            {
                "ok": [{"text": f"[summary]S{i}[/summary]"}],
                "empty": [{"text": "[summary] [/summary]"}],
                "tools": [{"tool_call": {"name": "t", "arguments": {}, "id": f"k{i}"}}],
                "timeout": [{"fail": {"status": "timeout", "message": "idle"}}],
            }[kind]
        )
    runs = draw(st.sampled_from([1, 2, 3, 3, 4]))
    aborts = [draw(st.none() | st.integers(1, 30)) for _ in range(runs)]
    mode = draw(st.sampled_from([None, "summarize", "summarize", "summarize", "discard"]))
    compaction = (
        None
        if mode is None
        else CompactionSettings(
            max_context_length=draw(st.integers(3, 12)), mode=mode, prompt=SUMMARIZE
        )
    )
    return Plan(turns, summaries, aborts, compaction, draw(st.sampled_from([2, 100])))


@dataclass
class Rest:
    """A boundary where the live session was at rest, and what it sent next."""

    prompt: OmniMessage
    request: LLMRequest | None


async def run_live(
    plan: Plan, home: Path, workspace: Path
) -> tuple[list[list[bytes]], dict[int, Rest], str]:
    llm = Dispatching(plan.turns, plan.summaries)
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm.turns),
        root=DataRoot(home),
        workspace=workspace,
        system_prompt="prop",
        compaction=plan.compaction,
        retry=RetryPolicy(max_reconnects=1, base_ms=1, cap_ms=1),
        max_turns=plan.max_turns,
        fsync="never",
    )
    llm.bind(session)
    root = DataRoot(home)

    def boundary() -> int:
        try:
            files = root.trace_files(session.id)
        except FileNotFoundError:
            return 0
        return sum(len(f.read_bytes().splitlines()) for f in files)

    prompts = [b.user_text(f"task {i}") for i in range(len(plan.aborts))]
    rests: list[tuple[int, int]] = []  # (boundary after run i, requests before run i+1)
    async with session:
        for prompt, abort_at in zip(prompts, plan.aborts, strict=True):
            signal = AbortSignal()
            seen = 0
            async for _msg in session.run([prompt], approve=allow_all, signal=signal):
                seen += 1
                if seen == abort_at:
                    signal.abort()
            rests.append((boundary(), len(llm.requests)))
        files = [f.read_bytes().splitlines(keepends=True) for f in root.trace_files(session.id)]
        follow = b.user_text("continue")
        await collect_all(session.run([follow], approve=allow_all))
    nexts = [*prompts[1:], follow]
    at_rest: dict[int, Rest] = {}
    for (line, before), prompt in zip(rests, nexts, strict=True):
        # The next run's first request, when it sent one (an abort may come first).
        sent = llm.requests[before] if len(llm.requests) > before else None
        at_rest[line] = Rest(prompt, sent)
    return files, at_rest, session.id


async def collect_all(agen: Any) -> None:
    async for _ in agen:
        pass


def write_cut(home: Path, sid: str, date: str, files: list[list[bytes]], keep: int) -> None:
    """The session's files cut after ``keep`` lines, replacing whatever the last resume left
    (one data root is reused: creating directories dominates the cost of a boundary)."""
    root = DataRoot(home)
    directory = root.ensure_dir(root.traces_dir() / date)
    for old in directory.glob(f"{sid}_*.jsonl"):
        old.unlink()
    for index, lines in enumerate(files, start=1):
        if keep <= 0:
            break
        path = root.trace_path(sid, index, date=date)
        path.write_bytes(b"".join(lines[:keep]))
        path.chmod(0o600)
        keep -= len(lines)


async def resumed_request(home: Path, sid: str, workspace: Path, prompt: OmniMessage) -> LLMRequest:
    llm = ScriptedLLM({"responses": [[{"text": "fine"}]], "tools": TOOLS})
    session = await resume_session(
        DataRoot(home),
        sid,
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        compaction=None,
        fsync="never",
    )
    async with session:
        await collect_all(session.run([prompt], approve=allow_all))
    assert len(llm.requests) == 1
    return llm.requests[0]


async def check(plan: Plan) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        workspace = base / "ws"
        workspace.mkdir()
        with anyio.fail_after(30):
            files, at_rest, sid = await run_live(plan, base / "live", workspace)
        date = DataRoot(base / "live").locate(sid).date
        total = sum(len(lines) for lines in files)
        assert set(at_rest) <= set(range(total + 1))
        home = base / "cut"
        for keep in range(1, total + 1):
            write_cut(home, sid, date, files, keep)
            rest = at_rest.get(keep)
            prompt = rest.prompt if rest is not None else b.user_text("next")
            request = await resumed_request(home, sid, workspace, prompt)
            assert_requests_paired([request])
            assert request.messages[-1] is prompt or request.messages[-1] == prompt
            if rest is not None and rest.request is not None:
                live = rest.request
                assert request.messages == live.messages, f"cut after {keep} of {total} lines"
                assert request.new_messages == live.new_messages
                assert request.system_prompt == live.system_prompt
                assert request.tools == live.tools


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(plan=plans())
def test_resume_at_every_record_boundary(plan: Plan) -> None:
    """R-RESUME-18 at rest, INV-12 everywhere (SPEC §13)."""
    anyio.run(check, plan)
