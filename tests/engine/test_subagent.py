"""Subagents: the `run_subagent` tool over `SessionSubagentRunner` (SPEC §11 R-SUB-1…5, §2.1
`origin`, §7 carry-over of both sessions, §13 resume of both sessions).

A parent session's tool call spawns a child session with its own trace.  The child's messages
reach the parent stream tagged with `origin`; the parent trace holds only the `subagent` pointer;
each trace validates and resumes to the request its live session would have sent.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest
from enginekit import (
    Env,
    GatedEnvironment,
    assert_requests_paired,
    check_trace,
    collect,
    kinds,
    make_session,
    trace_records,
)
from pydantic import BaseModel

from engine import (
    AbortSignal,
    Approval,
    Environment,
    LLMRequest,
    LocalEnvironment,
    RetryPolicy,
    Session,
    Tool,
    ToolContext,
    ToolResult,
    allow_all,
)
from engine._subagent import (
    RUN_SUBAGENT,
    SessionSubagentRunner,
    SubagentOutcome,
    SubagentRunner,
    subagent_tool,
    tag_origin,
)
from engine._tools import read_file_tool, write_file_tool
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    AbortPayload,
    DataRoot,
    OmniMessage,
    SessionMetaPayload,
    SubagentPayload,
    TextPayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    read_trace,
)
from eventstore import builders as b
from eventstore.builders import payload_type, stop_reason_of
from replay import resume_session
from replay._validate import validate_session

pytestmark = pytest.mark.anyio

ABORTED = "[interrupted: tool aborted by user]"
FINAL = [{"text": "ok"}]
RETRY = RetryPolicy(base_ms=1, cap_ms=4)
# A deadlock guard for scenarios whose tools wait on each other, not a timing assertion.
GUARD_S = 20


def spawn(prompt: str, cid: str = "p1") -> dict[str, Any]:
    return {"tool_call": {"name": RUN_SUBAGENT, "arguments": {"prompt": prompt}, "id": cid}}


class Children:
    """The llm factory and `on_child` hook of a runner: child k gets scripts[k]."""

    def __init__(self, *scripts: Any) -> None:
        self.scripts = list(scripts)
        self.llms: list[ScriptedLLM] = []
        self.sessions: list[Session] = []

    def llm(self) -> ScriptedLLM:
        llm = ScriptedLLM(self.scripts[len(self.llms)])
        self.llms.append(llm)
        return llm

    def runner(self, env: Env, **options: Any) -> SessionSubagentRunner:
        return SessionSubagentRunner(
            self.llm,
            root=env.root,
            workspace=env.workspace,
            on_child=self.sessions.append,
            compaction=None,
            retry=RETRY,
            system_prompt="You are a subagent.",
            **options,
        )


def snapshot(env: Env, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(env.home, copy)
    return copy


def live_child_request(child: Session, prompt: OmniMessage) -> tuple[list[OmniMessage], int]:
    """What the live child would send next: its projections with the prompt and a request
    opened (the engine builds every request this way, R-PROJ-3)."""
    ctx = child.context.copy()
    ctx.apply(prompt)
    ctx.apply(b.request_begin())
    return ctx.request_messages(), len(ctx.snapshot)


async def resumed_request(
    home: Path, session_id: str, prompt: OmniMessage, environment: Environment
) -> LLMRequest:
    llm = ScriptedLLM([FINAL])
    resumed = await resume_session(
        DataRoot(home),
        session_id,
        llm=llm,
        environment=environment,
        compaction=None,
        retry=RETRY,
    )
    async with resumed:
        await collect(resumed.run([prompt], approve=allow_all))
        check_trace(resumed)
    return llm.requests[0]


def output_of(msgs: list[OmniMessage], cid: str) -> OmniMessage:
    found = [
        m
        for m in msgs
        if isinstance(m.payload, ToolCallOutputPayload)
        and m.payload.tool_call_id == cid
        and not m.is_partial
    ]
    assert len(found) == 1, f"{len(found)} outputs for {cid}"
    return found[0]


def pointers(records: list[OmniMessage]) -> list[str]:
    return [r.payload.session_id for r in records if isinstance(r.payload, SubagentPayload)]


class MeetArgs(BaseModel):
    name: str


def meet_tool(arrived: dict[str, anyio.Event]) -> Tool[MeetArgs]:
    """Returns only once every named call has started: proves calls run concurrently."""

    async def run(args: MeetArgs, ctx: ToolContext) -> str:
        arrived[args.name].set()
        for event in arrived.values():
            await event.wait()
        return f"met {args.name}"

    return Tool("meet", "wait for the others", MeetArgs, run, permission="r")


# ---------------------------------------------------------------------------- the main scenario


async def test_child_runs_concurrent_tools_and_stays_out_of_the_parent(
    env: Env, tmp_path: Path
) -> None:
    """R-SUB-1…5: origin-tagged forwarding, one pointer, nothing of the child in the parent's
    trace or requests, the parent's approve sees the child's calls; both traces validate and
    resume to their live next requests (R-RESUME-18)."""
    arrived = {"x": anyio.Event(), "y": anyio.Event()}
    child_tools: list[Tool[Any]] = [write_file_tool(), read_file_tool(), meet_tool(arrived)]
    child_script = [
        [
            {
                "tool_call": {
                    "name": "write_file",
                    "arguments": {"path": "a.txt", "content": "A"},
                    "id": "c1",
                }
            },
            {"tool_call": {"name": "meet", "arguments": {"name": "x"}, "id": "c2"}},
            {"tool_call": {"name": "meet", "arguments": {"name": "y"}, "id": "c3"}},
        ],
        [{"text": "Wrote "}, {"text": "a.txt; x and y met."}],
    ]
    children = Children(child_script)
    runner = children.runner(
        env,
        environment_factory=lambda r: LocalEnvironment(
            env.workspace, tools=child_tools, subagents=r
        ),
    )
    parent_script = [
        [{"text": "Delegating."}, spawn("write a.txt, then meet")],
        [{"text": "All done."}],
        FINAL,
    ]
    parent_env = LocalEnvironment(env.workspace, tools=[], subagents=runner)
    parent, parent_llm = await make_session(env, parent_script, environment=parent_env)
    seen: list[OmniMessage] = []

    def approve(call: OmniMessage) -> Approval:
        seen.append(call)
        return "allow"

    prompt = b.user_text("continue")
    async with runner, parent:
        with anyio.fail_after(GUARD_S):
            stream = await collect(parent.run([b.user_text("go")], approve=approve))
        check_trace(parent, stream)
        (child,) = children.sessions
        cid = child.id

        # R-SUB-1/4: the child's messages, tagged, starting with its session_meta, between the
        # parent's call and the parent's output for it.
        tagged = [i for i, m in enumerate(stream) if m.origin is not None]
        assert all(stream[i].origin == [cid] for i in tagged)
        first = stream[tagged[0]]
        assert first.type == "session_meta"
        assert isinstance(first.payload, SessionMetaPayload)
        assert first.payload.session_id == cid and first.payload.source == "subagent"
        call_at = next(
            i
            for i, m in enumerate(stream)
            if isinstance(m.payload, ToolCallPayload) and not m.is_partial
        )
        out_at = stream.index(output_of(stream, "p1"))
        assert call_at < tagged[0] and tagged[-1] < out_at
        child_kinds = kinds([stream[i] for i in tagged if not stream[i].is_partial])
        assert child_kinds[:3] == ["session_meta", "tool_list_ready", "request_begin"]
        assert child_kinds.count("tool_call_output") == 3
        assert "session_meta" not in kinds([m for m in stream if m.origin is None])  # INV-10

        # The tool output is the child's final answer (its last assistant text).
        out = output_of(stream, "p1")
        assert out.payload.output == "a.txt; x and y met."  # type: ignore[union-attr]
        assert stop_reason_of(out) == "completed"
        assert (env.workspace / "a.txt").read_text() == "A"

        # R-SUB-5: one approve policy; the child's calls arrive tagged with the child's id.
        assert [(m.payload.tool_call_id, m.origin) for m in seen] == [  # type: ignore[union-attr]
            ("p1", None),
            ("c1", [cid]),
            ("c2", [cid]),
            ("c3", [cid]),
        ]

        # R-SUB-2/3: the parent trace holds the pointer only, once.
        parent_records = trace_records(parent)
        assert pointers(parent_records) == [cid]
        assert all(r.origin is None for r in parent_records)
        child_ids = {"c1", "c2", "c3"}
        assert not [
            r for r in parent_records if getattr(r.payload, "tool_call_id", None) in child_ids
        ]
        # ... and the parent's next request holds none of the child's messages.
        follow_up = parent_llm.requests[1].messages
        assert kinds(follow_up) == ["text", "text", "tool_call", "tool_call_output"]
        assert all(m.origin is None for m in follow_up)

        # The child's own trace is complete and valid on its own.
        child_records = check_trace(child)
        meta = child_records[0].payload
        assert isinstance(meta, SessionMetaPayload) and meta.source == "subagent"
        assert meta.workspace == str(env.workspace.resolve())
        assert meta.system_prompt == "You are a subagent."
        assert [
            f for f in validate_session(env.root.trace_files(cid)) if f.severity == "error"
        ] == []
        assert pointers(child_records) == []
        assert_requests_paired(children.llms[0].requests)
        # The default depth cap: the child is not offered run_subagent at all.
        assert RUN_SUBAGENT not in [t.name for t in children.llms[0].requests[0].tools]

        copy = snapshot(env, tmp_path)
        child_messages, child_new = live_child_request(child, prompt)
        with anyio.fail_after(GUARD_S):
            await collect(parent.run([prompt], approve=approve))
        live = parent_llm.requests[-1]

    resumed = await resumed_request(
        copy, parent.id, prompt, LocalEnvironment(env.workspace, tools=[], subagents=runner)
    )
    assert resumed.messages == live.messages
    assert resumed.new_messages == live.new_messages
    assert resumed.tools == live.tools
    resumed_child = await resumed_request(
        copy, cid, prompt, LocalEnvironment(env.workspace, tools=child_tools)
    )
    assert resumed_child.messages == child_messages
    assert resumed_child.new_messages == child_new
    assert resumed_child.tools == children.llms[0].requests[0].tools
    assert resumed_child.system_prompt == "You are a subagent."


# ---------------------------------------------------------------------------- abort


async def abort_scenario(
    env: Env,
    tmp_path: Path,
    child_script: Any,
    *,
    child_env: Callable[[SubagentRunner | None], Environment] | None = None,
    fire: Callable[[OmniMessage, str | None], bool] | None = None,
    gated: GatedEnvironment | None = None,
) -> tuple[list[OmniMessage], Session, Session]:
    """Abort the parent while its child works; check both traces, carry-overs and resumes.
    Returns the parent stream and the two sessions (closed)."""
    children = Children(child_script)
    runner = children.runner(env, environment_factory=child_env)
    parent_script = [[spawn("do the thing")], FINAL]
    parent, parent_llm = await make_session(
        env, parent_script, environment=LocalEnvironment(env.workspace, tools=[], subagents=runner)
    )
    signal = AbortSignal()
    prompt = b.user_text("continue")
    stream: list[OmniMessage] = []

    async def abort_when_started() -> None:
        assert gated is not None
        await gated.start_event("c1").wait()
        signal.abort()

    async with runner, parent:
        with anyio.fail_after(GUARD_S):
            async with anyio.create_task_group() as tg:
                if gated is not None:
                    tg.start_soon(abort_when_started)
                async for msg in parent.run([b.user_text("go")], approve=allow_all, signal=signal):
                    stream.append(msg)
                    cid = children.sessions[0].id if children.sessions else None
                    if fire is not None and fire(msg, cid):
                        signal.abort()
        check_trace(parent, stream)
        (child,) = children.sessions
        check_trace(child)
        assert pointers(trace_records(parent)) == [child.id]

        # Both runs end with their own abort; the child's is forwarded before the parent's output.
        assert isinstance(stream[-1].payload, AbortPayload) and stream[-1].origin is None
        child_abort = [
            i
            for i, m in enumerate(stream)
            if isinstance(m.payload, AbortPayload) and m.origin == [child.id]
        ]
        assert len(child_abort) == 1
        assert child_abort[0] < stream.index(output_of(stream, "p1"))
        child_records = trace_records(child)
        assert isinstance(child_records[-1].payload, AbortPayload)
        assert child_records[-1].payload.reason == "aborted by user"

        # Parent: case A (R-CARRY-3) with the run_subagent call's real, aborted output.
        carry = parent.context.pending
        assert [
            (m.payload.tool_call_id, m.payload.output, stop_reason_of(m))  # type: ignore[union-attr]
            for m in carry
        ] == [("p1", ABORTED, "aborted")]

        copy = snapshot(env, tmp_path)
        child_messages, child_new = live_child_request(child, prompt)
        await collect(parent.run([prompt], approve=allow_all))
        live = parent_llm.requests[-1]

    resumed = await resumed_request(
        copy, parent.id, prompt, LocalEnvironment(env.workspace, tools=[], subagents=runner)
    )
    assert resumed.messages == live.messages
    assert resumed.new_messages == live.new_messages
    child_environment: Environment = (
        GatedEnvironment() if gated is not None else ScriptedEnvironment(child_script)
    )
    resumed_child = await resumed_request(copy, child.id, prompt, child_environment)
    assert resumed_child.messages == child_messages
    assert resumed_child.new_messages == child_new
    return stream, parent, child


async def test_abort_while_child_tool_runs(env: Env, tmp_path: Path) -> None:
    """R-CARRY-1/3 in both sessions: the child's committed call gets its aborted output (child
    case A), the parent's run_subagent call its aborted output (parent case A)."""
    gated = GatedEnvironment()
    child_script = {
        "responses": [[{"tool_call": {"name": "t", "arguments": {}, "id": "c1"}}], FINAL],
        "tools": [{"name": "t", "description": "test tool"}],
    }
    _, _, child = await abort_scenario(
        env, tmp_path, child_script, child_env=lambda _r: gated, gated=gated
    )
    assert gated.closed  # the child's environment was closed with the child
    assert [
        (m.payload.tool_call_id, m.payload.output, stop_reason_of(m))  # type: ignore[union-attr]
        for m in child.context.pending
    ] == [("c1", ABORTED, "aborted")]


async def test_abort_while_child_llm_streams(env: Env, tmp_path: Path) -> None:
    """R-CARRY-4/5: the child's LLM honours the signal: the child's carry-over is one
    [turn_aborted] block (case B) while the parent's is case A."""
    child_script = [[{"text": "thinking about it"}, {"sleep_ms": 60000}, {"text": "never"}]]

    def fire(msg: OmniMessage, cid: str | None) -> bool:
        return msg.origin == [cid] and isinstance(msg.payload, TextPayload) and not msg.is_partial

    _, _, child = await abort_scenario(
        env,
        tmp_path,
        child_script,
        fire=fire,
        child_env=lambda _r: ScriptedEnvironment(child_script),
    )
    carry = child.context.pending
    assert [m.payload.text for m in carry] == [  # type: ignore[union-attr]
        "[turn_aborted]\n  [user_input]do the thing[/user_input]\n"
        "  [text]thinking about it[/text]\n[/turn_aborted]"
    ]


# ---------------------------------------------------------------------------- refusals, failures


async def run_parent(
    env: Env, runner: SessionSubagentRunner, *, prompt: str = "go", open_runner: bool = True
) -> tuple[Session, list[OmniMessage]]:
    parent, _ = await make_session(
        env,
        [[spawn("nested work")], FINAL],
        environment=LocalEnvironment(env.workspace, tools=[], subagents=runner),
    )
    async with parent:
        with anyio.fail_after(GUARD_S):
            if open_runner:
                async with runner:
                    stream = await collect(parent.run([b.user_text(prompt)], approve=allow_all))
            else:
                stream = await collect(parent.run([b.user_text(prompt)], approve=allow_all))
        check_trace(parent, stream)
    return parent, stream


async def test_depth_cap_child_cannot_spawn(env: Env) -> None:
    """The nesting cap (depth 1): run_subagent is not offered to a child; a call to it is a
    failed output in the child, not an exception, and the child goes on."""
    children = Children([[spawn("grandchild work", "c1")], [{"text": "could not nest"}]])
    _, stream = await run_parent(env, children.runner(env))
    (child,) = children.sessions
    failed = output_of(stream, "c1")
    assert failed.origin == [child.id]
    assert stop_reason_of(failed) == "failed"
    assert failed.payload.output == "Unknown tool: run_subagent"  # type: ignore[union-attr]
    assert output_of(stream, "p1").payload.output == "could not nest"  # type: ignore[union-attr]
    assert len(children.llms) == 1


async def test_depth_cap_holds_even_if_the_child_environment_offers_the_tool(env: Env) -> None:
    """The cap is enforced by the runner too: a child environment that registers run_subagent
    anyway gets a [tool error] output."""
    children = Children([[spawn("grandchild work", "c1")], [{"text": "could not nest"}]])
    holder: list[SessionSubagentRunner] = []
    runner = children.runner(
        env,
        environment_factory=lambda _r: LocalEnvironment(
            env.workspace, tools=[], subagents=holder[0]
        ),
    )
    holder.append(runner)
    _, stream = await run_parent(env, runner)
    failed = output_of(stream, "c1")
    assert stop_reason_of(failed) == "failed"
    assert failed.payload.output == (  # type: ignore[union-attr]
        "[tool error] subagents cannot be started here: the subagent nesting depth is capped at 1"
    )
    assert len(children.llms) == 1


async def test_nesting_to_depth_two_prepends_origin(env: Env) -> None:
    """R-MSG-4, R-SUB-1/3: a grandchild's messages reach the top stream with origin
    [child, grandchild]; each trace points only at its direct child."""
    children = Children(
        [[spawn("grandchild work", "c1")], [{"text": "child done"}]],
        [[{"text": "grandchild done"}]],
    )
    parent, stream = await run_parent(env, children.runner(env, max_depth=2))
    child, grandchild = children.sessions
    origins = {tuple(m.origin) for m in stream if m.origin is not None}
    assert origins == {(child.id,), (child.id, grandchild.id)}
    nested_meta = [m for m in stream if m.type == "session_meta"]
    assert [m.origin for m in nested_meta] == [[child.id], [child.id, grandchild.id]]
    assert pointers(trace_records(parent)) == [child.id]
    assert pointers(check_trace(child)) == [grandchild.id]
    check_trace(grandchild)
    assert output_of(stream, "c1").payload.output == "grandchild done"  # type: ignore[union-attr]
    assert output_of(stream, "p1").payload.output == "child done"  # type: ignore[union-attr]


async def test_failed_child_is_a_tool_error(env: Env) -> None:
    """A child whose run ends by a non-user abort fails the call with its reason."""
    children = Children([])
    _, stream = await run_parent(env, children.runner(env))
    (child,) = children.sessions
    out = output_of(stream, "p1")
    assert stop_reason_of(out) == "failed"
    assert out.payload.output == (  # type: ignore[union-attr]
        f"[tool error] subagent {child.id} failed: "
        "llm request error: scripted: no response for request 1"
    )
    check_trace(child)


async def test_runner_not_open_is_a_tool_error(env: Env) -> None:
    """Without `async with runner` no child can be hosted: a failed output, nothing created."""
    children = Children([FINAL])
    parent, stream = await run_parent(env, children.runner(env), open_runner=False)
    out = output_of(stream, "p1")
    assert stop_reason_of(out) == "failed"
    assert "the subagent runner is not open" in out.payload.output  # type: ignore[union-attr]
    assert children.llms == [] and pointers(trace_records(parent)) == []


# ---------------------------------------------------------------------------- pieces


def test_tag_origin_prepends() -> None:
    """R-MSG-4: outer→inner."""
    msg = b.assistant_text("hi")
    assert tag_origin(msg, "a").origin == ["a"]
    assert tag_origin(tag_origin(msg, "b"), "a").origin == ["a", "b"]
    assert msg.origin is None


async def test_tool_reports_the_runner_outcome(env: Env) -> None:
    """The tool framing of an outcome: answer, abort, failure; non-origin messages dropped."""

    class Fake:
        def __init__(self, outcome: SubagentOutcome) -> None:
            self.outcome = outcome
            self.approve: Any = None

        async def run(
            self, prompt: str, *, signal: AbortSignal, approve: Any
        ) -> AsyncIterator[OmniMessage | SubagentOutcome]:
            self.approve = approve
            yield tag_origin(b.assistant_text(prompt), "kid")
            yield b.assistant_text("not tagged: dropped")
            yield self.outcome

    cases = [
        (SubagentOutcome(session_id="kid", status="completed", answer="42"), "42", "completed"),
        (SubagentOutcome(session_id="kid", status="aborted"), ABORTED, "aborted"),
        (
            SubagentOutcome(session_id="kid", status="failed", error="boom"),
            "[tool error] subagent kid failed: boom",
            "failed",
        ),
    ]
    for outcome, text, status in cases:
        fake = Fake(outcome)
        assert isinstance(fake, SubagentRunner)
        environment = LocalEnvironment(env.workspace, tools=[subagent_tool(fake)])
        call = b.tool_call(RUN_SUBAGENT, '{"prompt": "p"}', "x")
        msgs = await collect(environment.execute(call, signal=AbortSignal(), approve=allow_all))
        assert [m.origin for m in msgs if m.origin] == [["kid"]]
        out = msgs[-1]
        assert (out.payload.output, stop_reason_of(out)) == (text, status)  # type: ignore[union-attr]
        assert fake.approve is allow_all


async def test_non_interruptible_tool_finishes_its_protocol(env: Env) -> None:
    """`Tool(interruptible=False)`: the environment does not cancel the tool on abort; what it
    yields after the signal still streams, and its own `aborted` report decides (R-TOOL-3)."""

    class NoArgs(BaseModel):
        pass

    signal = AbortSignal()

    async def run(args: NoArgs, ctx: ToolContext) -> AsyncIterator[Any]:
        yield "started\n"
        await ctx.signal.wait()
        yield "cleaned up"
        yield ToolResult(status="aborted")

    environment = LocalEnvironment(
        env.workspace, tools=[Tool("slow", "d", NoArgs, run, interruptible=False)]
    )
    call = b.tool_call("slow", "{}", "x")
    msgs: list[OmniMessage] = []
    with anyio.fail_after(GUARD_S):
        async for msg in environment.execute(call, signal=signal, approve=None):
            msgs.append(msg)
            started = getattr(msg.payload, "event_type", None) == "delta"
            if payload_type(msg) == "partial_tool_call_output" and started:
                signal.abort()
    out = msgs[-1]
    assert out.payload.output == f"started\ncleaned up\n{ABORTED}"  # type: ignore[union-attr]
    assert stop_reason_of(out) == "aborted"


async def test_leaving_the_parent_stream_aborts_the_child(env: Env) -> None:
    """R-CARRY-2, R-CONC-3: breaking out of the parent's stream aborts the child through the
    same signal path; both traces end with their abort and no child task outlives the call."""
    gated = GatedEnvironment()
    child_script = {
        "responses": [[{"tool_call": {"name": "t", "arguments": {}, "id": "c1"}}]],
        "tools": [{"name": "t", "description": "test tool"}],
    }
    children = Children(child_script)
    runner = children.runner(env, environment_factory=lambda _r: gated)
    parent, _ = await make_session(
        env,
        [[spawn("wait")]],
        environment=LocalEnvironment(env.workspace, tools=[], subagents=runner),
    )
    async with runner, parent:
        with anyio.fail_after(GUARD_S):
            async with aclosing(parent.run([b.user_text("go")], approve=allow_all)) as run:
                async for msg in run:
                    if msg.origin and payload_type(msg) == "approval_decision":
                        await gated.start_event("c1").wait()
                        break
        assert not parent.running
        (child,) = children.sessions
        assert not child.running and gated.closed
        for session in (parent, child):
            last = check_trace(session)[-1].payload
            assert isinstance(last, AbortPayload) and last.reason == "aborted by user"


class _ListsWhenLet(LocalEnvironment):
    """A child environment whose tool list (the first thing its child's run awaits) waits for
    ``let``: its child announces itself late."""

    def __init__(self, workspace: Path, let: anyio.Event) -> None:
        super().__init__(workspace, tools=[])
        self.let = let

    async def list_tools(self) -> list[Any]:
        await self.let.wait()
        return await super().list_tools()


class _Streaming(ScriptedLLM):
    """Says when its child has got as far as asking its model."""

    def __init__(self, script: Any, asked: anyio.Event) -> None:
        super().__init__(script)
        self.asked = asked

    def stream(self, request: LLMRequest) -> Any:
        self.asked.set()
        return super().stream(request)


async def test_pointers_follow_call_order_when_children_start_out_of_order(env: Env) -> None:
    """R-SUB-3 and the readers that link a pointer to the earliest running call without a
    child (the span tree, the Web App): the first call's child is slow to start, the second's
    is at work first — its pointer still comes second."""
    let_first = anyio.Event()
    second_asked = anyio.Event()
    made: list[str] = []

    def environment(runner: SubagentRunner | None) -> Environment:
        made.append("env")
        let = let_first if len(made) == 1 else anyio.Event()
        if len(made) > 1:
            let.set()
        return _ListsWhenLet(env.workspace, let)

    llms = [
        ScriptedLLM([[{"text": "first done"}]]),
        _Streaming([[{"text": "second done"}]], second_asked),
    ]
    runner = SessionSubagentRunner(
        lambda: llms.pop(0),
        root=env.root,
        workspace=env.workspace,
        environment_factory=environment,
        compaction=None,
        retry=RETRY,
    )
    parent, _ = await make_session(
        env,
        [[spawn("first", "p1"), spawn("second", "p2")], FINAL],
        environment=LocalEnvironment(env.workspace, tools=[], subagents=runner),
    )

    async def let_go_once_the_second_works() -> None:
        await second_asked.wait()  # the second child is running: it would announce first
        let_first.set()

    async with parent, runner, anyio.create_task_group() as tg:
        tg.start_soon(let_go_once_the_second_works)
        with anyio.fail_after(GUARD_S):
            stream = await collect(parent.run([b.user_text("go")], approve=allow_all))
        check_trace(parent, stream)
    found = pointers(trace_records(parent))
    assert len(found) == 2
    prompts = [
        next(
            r.payload.text
            for r in read_trace(DataRoot(env.home).trace_files(child)).records
            if isinstance(r.payload, TextPayload) and r.payload.role == "user"
        )
        for child in found
    ]
    assert prompts == ["first", "second"]
    assert output_of(stream, "p1").payload.output == "first done"  # type: ignore[union-attr]
