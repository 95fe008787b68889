"""Time travel (SPEC R-TOOL-1): ``request_at`` is the request the LLM received, byte for byte.

Every scenario of the fixture corpus (``fixtures/make_fixtures.py``) is run again with every
``ScriptedLLM`` recording what it received; then ``request_at`` at each ``request_begin`` of
the trace (in file then ordinal order) must equal the request at the same position in the
recording.  Damaged scenarios keep the requests before the damage.  Random sessions come
from the resume property's generator (aborts, retries, steering, compactions, rotations).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from enginekit import collect, make_env, make_session
from hypothesis import HealthCheck, given, settings

from engine import GoalOptions, LLMRequest, LocalEnvironment, allow_all
from engine.llm import ScriptedLLM
from eventstore import DataRoot, RequestBeginPayload, TextPayload, encode, read_trace, scan_trace
from eventstore import builders as b
from projections import ModelContext
from replay import context_at, request_at, trace_point

ROOT = Path(__file__).resolve().parents[2]
EXTENDED = bool(os.environ.get("PENGUIN_EXTENDED"))


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


fixtures = _load("_penguin_make_fixtures", ROOT / "fixtures" / "make_fixtures.py")
prop = _load("_penguin_resume_property", ROOT / "tests" / "replay" / "test_resume_property.py")


def begins(files: list[Path]) -> list[tuple[int, int]]:
    out = []
    for n, path in enumerate(files, start=1):
        ordinal = 0
        for item in scan_trace(path):
            if isinstance(item, tuple):
                if isinstance(item[1].payload, RequestBeginPayload):
                    out.append((n, ordinal))
                ordinal += 1
    return out


def same(rebuilt: LLMRequest, sent: LLMRequest, where: str) -> None:
    assert [encode(m) for m in rebuilt.messages] == [encode(m) for m in sent.messages], where
    assert rebuilt.new_messages == sent.new_messages, where
    assert rebuilt.system_prompt == sent.system_prompt, where
    assert msgspec.json.encode(rebuilt.tools) == msgspec.json.encode(sent.tools), where


class Recording:
    """Every request any ScriptedLLM receives, in order (a session and its resumed successor
    use different model objects)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.requests: list[LLMRequest] = []
        original = ScriptedLLM.stream

        def stream(llm: ScriptedLLM, request: LLMRequest) -> Any:
            self.requests.append(request)
            return original(llm, request)

        monkeypatch.setattr(ScriptedLLM, "stream", stream)


# Damaged scenarios: how many of the recorded requests the damaged trace still rebuilds (None:
# all that have a request_begin left).  The malformed middle line is the first reply, so only
# the first request is still what the model saw; the unknown records are ignored by the fold.
INTACT_PREFIX: dict[str, int | None] = {
    "damaged_torn_tail": None,
    "damaged_dangling_request": None,
    "damaged_dangling_compaction": None,
    "damaged_unknown_future": None,
    "damaged_malformed_middle": 1,
}
CASES = [s for s in fixtures.SCENARIOS if s[2] is None or s[0] in INTACT_PREFIX]


def first_user_text(messages: Any) -> str | None:
    for msg in messages:
        p = msg.payload
        if isinstance(p, TextPayload) and p.role == "user":
            return p.text
    return None


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_request_at_equals_every_recorded_request(
    case: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name, scenario, damage, _ = case
    rec = Recording(monkeypatch)

    async def run() -> tuple[list[Path], list[list[Path]]]:
        ctx = await scenario(tmp_path)
        root = DataRoot(ctx.home)
        return root.trace_files(ctx.session.id), [root.trace_files(c) for c in ctx.children]

    files, children = anyio.run(run)
    requests = rec.requests
    if children:  # a subagent's requests rebuild from its own trace (its own system prompt)
        requests = [r for r in rec.requests if r.system_prompt == fixtures.SYSTEM]
        others = [r for r in rec.requests if r.system_prompt != fixtures.SYSTEM]
        for child in children:  # several children (concurrent, nested): told by their prompt
            prompt = first_user_text(read_trace(child).records)
            child_requests = [r for r in others if first_user_text(r.messages) == prompt]
            child_positions = begins(child)
            assert len(child_positions) == len(child_requests) > 0
            for position, sent in zip(child_positions, child_requests, strict=True):
                same(request_at(child, position), sent, f"{name} child at {position}")
    if damage is not None:
        damage(files)
        files = [f for f in files if f.exists()]
    positions = begins(files)
    assert positions, name
    if damage is None:
        assert len(positions) == len(requests)
    else:
        assert 0 < len(positions) <= len(requests)
    keep = INTACT_PREFIX.get(name) or len(positions)
    for position, sent in list(zip(positions, requests, strict=False))[:keep]:
        same(request_at(files, position), sent, f"{name} at {position}")
    if name == "damaged_malformed_middle":  # the lost reply is missing from the next request
        with pytest.raises(AssertionError):
            same(request_at(files, positions[1]), requests[1], name)


def test_synthesized_messages_are_marked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The abort_stream scenario's second task carries a [turn_aborted] block: made by the fold,
    held by no record."""
    rec = Recording(monkeypatch)

    async def run() -> list[Path]:
        ctx = await fixtures.abort_stream(tmp_path)
        return DataRoot(ctx.home).trace_files(ctx.session.id)

    files = anyio.run(run)
    last = begins(files)[-1]
    point = trace_point(files, last)
    assert point.request is not None
    same(point.request, rec.requests[-1], "last request")
    marked = [point.request.messages[i] for i in sorted(point.synthesized)]
    assert marked, "the block is synthesized"
    recorded = {encode(r) for r in read_trace(files).records}
    assert all(encode(m) not in recorded for m in marked)
    unmarked = [m for i, m in enumerate(point.request.messages) if i not in point.synthesized]
    assert all(encode(m) in recorded for m in unmarked)


def test_context_at_any_record_is_the_fold_up_to_it(tmp_path: Path) -> None:
    files = sorted((ROOT / "fixtures" / "traces" / "compaction_mid_task").rglob("*.jsonl"))
    for n, path in enumerate(files, start=1):
        records = read_trace(path).records
        for ordinal in range(len(records)):
            assert context_at(files, (n, ordinal)) == ModelContext.from_records(
                records[: ordinal + 1]
            )


@pytest.mark.parametrize(
    ("position", "message"),
    [((9, 0), "no file 9"), ((1, 10_000), "no record 10000"), ((1, 0), "not a request_begin")],
)
def test_bad_positions_are_value_errors(position: tuple[int, int], message: str) -> None:
    files = sorted((ROOT / "fixtures" / "traces" / "plain").rglob("*.jsonl"))
    with pytest.raises(ValueError, match=message):
        request_at(files, position)


@settings(
    max_examples=60 if EXTENDED else 8,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(plan=prop.plans())
def test_request_at_on_random_sessions(plan: Any) -> None:
    """Aborts, cancellations, retries, auth failures, steering, goal rounds, compactions,
    rotations and write faults, drawn by the resume property's generator: every request the
    live session sent is rebuilt from its trace."""

    async def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            (base / "ws").mkdir()
            with anyio.fail_after(30):
                live = await prop.run_live(plan, base / "live", base / "ws")
            try:
                files = DataRoot(base / "live").trace_files(live.sid)
            except FileNotFoundError:
                files = []  # the very first write failed: nothing was sent either
            positions = begins(files)
            assert len(positions) == len(live.requests)
            recorded = {encode(r) for r in read_trace(files).records} if files else set()
            for position, request in zip(positions, live.requests, strict=True):
                point = trace_point(files, position)
                assert point.request is not None
                same(point.request, request, f"at {position}")
                # what is not marked synthesized is a record of the trace
                unmarked = [
                    m for i, m in enumerate(point.request.messages) if i not in point.synthesized
                ]
                assert all(encode(m) in recorded for m in unmarked)

    anyio.run(run)


def test_request_at_in_goal_mode(tmp_path: Path) -> None:
    """Goal rounds (SPEC §18): each round's goal block is input the fold must rebuild too."""
    edit = {"path": "${GOAL_FILE}", "old": "\nstatus: active", "new": "\nstatus: complete"}
    script: list[Any] = [
        [{"text": "Progress noted."}],
        [{"text": "More progress."}],
        [{"tool_call": {"name": "edit_file", "arguments": edit}}],
        [{"text": "Verified: done."}],
    ]
    env = make_env(tmp_path)

    async def run() -> tuple[list[Path], list[LLMRequest]]:
        session, llm = await make_session(env, script, environment=LocalEnvironment(env.workspace))
        async with session:
            await collect(
                session.run(
                    [b.user_text("make all tests pass")],
                    approve=allow_all,
                    goal=GoalOptions(budget=1_000_000),
                )
            )
        return env.root.trace_files(session.id), llm.requests

    files, sent = anyio.run(run)
    positions = begins(files)
    assert len(positions) == len(sent) == 4
    for position, request in zip(positions, sent, strict=True):
        same(request_at(files, position), request, f"goal at {position}")


def test_trace_point_as_json() -> None:
    files = sorted((ROOT / "fixtures" / "traces" / "abort_stream").rglob("*.jsonl"))
    data = trace_point(files, (1, 13)).as_json()
    assert data["at"] == "1:13" and data["record"]["payload"]["type"] == "request_begin"
    rows = data["request"]["messages"]
    assert [r["synthesized"] for r in rows] == [False, False, True, False]
    assert [r["new"] for r in rows] == [False, False, True, True]
    other = trace_point(files, (1, 11)).as_json()
    assert "request" not in other and other["context"]["carry_over"] == 1
