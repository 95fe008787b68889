"""The ``SessionState`` fold (R-PROJ-2, R-COMPACT-4, R-COMPACT-25, R-RESUME-11, R-RESUME-14a,
R-RESUME-15, R-ROOT-10, R-RUN-16, R-PROJ-4, INV-24)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import (
    CompactionBeginPayload,
    CompactionEndPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    TokenCounts,
    TokenUsagePayload,
    ToolDefinition,
    decode,
)
from eventstore import builders as b
from projections._state import SessionState

REFERENCE = Path(__file__).parents[2].parent / "shared" / "reference-traces"


class Trace:
    """Builds engine-shaped record lists with increasing timestamps and running session counts."""

    def __init__(self) -> None:
        self.records: list[OmniMessage] = []
        self._tick = 0
        self._session = TokenCounts()

    def ts(self) -> str:
        self._tick += 1
        return f"2026-07-18T03:{self._tick // 60000 % 60:02d}:{self._tick // 1000 % 60:02d}.{self._tick % 1000:03d}Z"

    def add(self, *records: OmniMessage) -> Trace:
        self.records.extend(records)
        return self

    def meta(self) -> Trace:
        return self.add(
            b.session_meta(
                session_id="session-2026-07-18-11-10-22-3f8a1c2d",
                provider="scripted",
                model_id="demo",
                model_context_window="unknown",
                system_prompt="sys",
                agent_state="/a/agent_state",
                workspace="/w",
                timestamp="2026-07-18T03:00:00.000Z",
            )
        )

    def tools(self) -> Trace:
        return self.add(
            b.tool_list_ready(
                [ToolDefinition(name="exec_command", description="Run.")],
                timestamp="2026-07-18T03:00:00.001Z",
            )
        )

    def head(self) -> Trace:
        return self.meta().tools()

    def user(self, text: str = "go") -> Trace:
        return self.add(b.user_text(text, timestamp=self.ts()))

    def usage(self, total: int) -> Trace:
        request = TokenCounts(cache_write=total - 1, output=1, total=total)
        self._session = self._session + request
        return self.add(b.token_usage(request, self._session, timestamp=self.ts()))

    def begin(self) -> Trace:
        return self.add(b.request_begin(timestamp=self.ts()))

    def end(self, status: str = "completed", **detail: object) -> Trace:
        return self.add(b.request_end(status, timestamp=self.ts(), **detail))  # type: ignore[arg-type]

    def text(self, body: str, stop_reason: str = "completed") -> Trace:
        return self.add(b.assistant_text(body, stop_reason=stop_reason, timestamp=self.ts()))  # type: ignore[arg-type]

    def call(self, cid: str) -> Trace:
        return self.add(b.tool_call("exec_command", {"cmd": "ls"}, cid, timestamp=self.ts()))

    def output(self, cid: str) -> Trace:
        return self.add(b.tool_call_output(cid, "ok", timestamp=self.ts()))

    def abort(self, reason: str = "aborted by user") -> Trace:
        return self.add(b.abort(reason, timestamp=self.ts()))

    # --- episodes -------------------------------------------------------------------------

    def reply_turn(self, total: int = 100, body: str = "Done.") -> Trace:
        return self.begin().text(body).usage(total).end()

    def tool_turn(self, *cids: str, total: int = 100) -> Trace:
        self.begin().text("Working.")
        for cid in cids:
            self.call(cid).add(b.approval_decision("allow", cid, timestamp=self.ts()))
        self.usage(total).end()
        for cid in cids:
            self.output(cid)
        return self

    def compaction(
        self,
        *,
        mode: str = "summarize",
        status: str = "completed",
        reply: str = "[summary]S[/summary]",
        total: int = 50,
        reason: str = "context",
    ) -> Trace:
        self.add(b.compaction_begin(reason, mode, context=1, turns=1, timestamp=self.ts()))  # type: ignore[arg-type]
        if mode == "summarize":
            self.user("Summarize.").begin().text(reply).usage(total).end()
        attempt = 1 if mode == "summarize" else None
        err = "the response contained no usable summary" if status == "failed" else None
        return self.add(
            b.compaction_end(
                reason,  # type: ignore[arg-type]
                mode,  # type: ignore[arg-type]
                status,  # type: ignore[arg-type]
                attempt=attempt,
                error_message=err,
                timestamp=self.ts(),
            )
        )


def public(state: SessionState) -> dict[str, object]:
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state) if f.compare}


def fold(records: list[OmniMessage]) -> SessionState:
    return SessionState.from_records(records)


# --------------------------------------------------------------------------- basics


def test_empty_state() -> None:
    state = SessionState()
    assert state == SessionState.from_records([])
    assert state.turns_total == 0
    assert state.session_tokens == TokenCounts()
    assert state.last_request_status is None
    assert state.open_compaction is None
    assert not state.open_request
    assert not state.from_compaction
    assert not state.rotation_pending
    assert not state.task_running
    assert (state.files, state.records) == (0, 0)


def test_plain_task_r_proj_2() -> None:
    t = Trace().meta().user("hi").tools().reply_turn(total=120)
    state = fold(t.records)
    assert state.turns_total == 1
    assert state.turns_in_context == 1
    assert state.last_request_total == 120
    assert state.session_tokens.total == 120
    assert state.last_request_status == "completed"
    assert not state.open_request
    assert not state.task_running
    assert state.files == 1
    assert state.records == len(t.records)
    assert not state.from_compaction
    assert not state.rotation_pending


def test_tool_turns_accumulate_tokens_r_resume_11() -> None:
    t = Trace().meta().user().tools().tool_turn("c1", "c2", total=300).reply_turn(total=420)
    state = fold(t.records)
    assert state.turns_total == 2
    assert state.last_request_total == 420
    assert state.session_tokens.total == 720
    assert state.session_tokens.cache_write == 299 + 419


def test_equality_ignores_scratch_inv_24() -> None:
    """Equality is over the public fields: fold scratch never makes live != rebuilt."""
    state = fold(Trace().meta().user().tools().reply_turn().records)
    other = copy.copy(state)
    other._span_texts = ["scratch"]
    other._compaction_texts = ["more"]
    assert other == state
    other.turns_in_context += 1
    assert other != state


# --------------------------------------------------------------------------- task_running


def test_task_running_after_tool_turn_crash_r_proj_2() -> None:
    """A committed turn with tool calls and nothing after it is a crashed, running task."""
    t = Trace().meta().user().tools().tool_turn("c1")
    assert fold(t.records).task_running
    t.abort()
    assert not fold(t.records).task_running


def test_task_running_while_request_open() -> None:
    t = Trace().meta().user().tools().begin()
    state = fold(t.records)
    assert state.open_request
    assert state.task_running


def test_task_ends_with_final_reply() -> None:
    t = Trace().meta().user().tools().tool_turn("c1").reply_turn()
    assert not fold(t.records).task_running


def test_max_turns_notice_ends_task_r_maxt_2() -> None:
    t = Trace().meta().user().tools().tool_turn("c1")
    t.text("[reached max turns (1); stopping]", stop_reason="failed")
    state = fold(t.records)
    assert not state.task_running
    # The notice is outside any span: it is no turn.
    assert state.turns_total == 1


def test_uncommitted_tool_calls_do_not_mark_a_running_task() -> None:
    """Only completed tool_calls count; an interrupted one (R-RUN-12) is a close-out."""
    t = Trace().meta().user().tools().begin()
    t.add(b.tool_call("exec_command", "{", "c1", stop_reason="aborted", timestamp=t.ts()))
    t.usage(10).end()
    assert not fold(t.records).task_running


# --------------------------------------------------------------------------- open spans


def test_dangling_request_with_usage_counts_before_closure_r_resume_14a() -> None:
    """R-RESUME-7a/14a: the closure ``request_end{completed}`` changes no counter."""
    t = Trace().meta().user().tools().begin().text("x").usage(77)
    before = fold(t.records)
    assert before.open_request
    assert before.turns_total == 1
    assert before.turns_in_context == 1
    t.end("completed", attempt=None)
    after = fold(t.records)
    assert not after.open_request
    assert (after.turns_total, after.turns_in_context) == (1, 1)
    assert after.last_request_total == before.last_request_total == 77


def test_dangling_request_without_usage_is_not_a_turn_r_resume_14a() -> None:
    t = Trace().meta().user().tools().begin().text("partial", stop_reason="aborted")
    before = fold(t.records)
    assert before.turns_total == 0
    t.end("aborted", error_message="process exited before the request ended")
    after = fold(t.records)
    assert after.turns_total == 0
    assert after.last_request_status == "aborted"
    assert not after.task_running


def test_usage_in_non_completed_span_is_taken_back_r_run_16() -> None:
    """Reference traces may hold a token_usage in a failed span: its request_end decides."""
    t = Trace().meta().user().tools().begin().usage(40).end("timeout", attempt=1)
    state = fold(t.records)
    assert state.turns_total == 0
    assert state.turns_in_context == 0
    # It is still the last token_usage.
    assert state.last_request_total == 40


def test_request_begin_while_open_drops_the_span_r_resume_5() -> None:
    t = Trace().meta().user().tools().begin().usage(40).begin()
    state = fold(t.records)
    assert state.turns_total == 0
    assert state.open_request
    t.text("ok").usage(50).end()
    assert fold(t.records).turns_total == 1


def test_stray_request_end_counts_nothing() -> None:
    """A request_end whose request_begin was lost commits nothing (as ModelContext)."""
    t = Trace().meta().user().tools().end("completed")
    state = fold(t.records)
    assert state.turns_total == 0
    assert state.last_request_status == "completed"


def test_token_usage_after_request_end_r_run_16() -> None:
    """Readers accept the reference order (request_end, then token_usage)."""
    t = Trace().meta().user().tools().begin().text("a").end().usage(90)
    state = fold(t.records)
    assert state.turns_total == 1
    assert state.last_request_total == 90
    assert state.session_tokens.total == 90


def test_retry_then_success_r_retry_7() -> None:
    t = Trace().meta().user().tools()
    t.begin().text("par", stop_reason="timeout").end("timeout", attempt=1, retry_in_ms=250)
    state = fold(t.records)
    assert state.last_request_status == "timeout"
    assert state.turns_total == 0
    t.begin().text("ok").usage(100).end("completed", attempt=2)
    state = fold(t.records)
    assert state.turns_total == 1
    assert state.last_request_status == "completed"


def test_dangling_compaction_r_resume_14() -> None:
    t = Trace().meta().user().tools().reply_turn()
    t.add(b.compaction_begin("manual", "summarize", context=100, turns=1, timestamp=t.ts()))
    t.user("Summarize.").begin().text("[summary]half")
    state = fold(t.records)
    assert state.open_compaction == ("manual", "summarize")
    assert state.open_request
    t.end("aborted", error_message="process exited before the request ended")
    t.add(b.compaction_end("manual", "summarize", "failed", attempt=1, timestamp=t.ts()))
    state = fold(t.records)
    assert state.open_compaction is None
    assert not state.open_request
    assert state.turns_in_context == 1
    assert not state.from_compaction
    assert not state.rotation_pending


def test_compaction_end_closes_an_open_request() -> None:
    t = Trace().meta().user().tools().reply_turn()
    t.add(b.compaction_begin("manual", "summarize", context=1, turns=1, timestamp=t.ts()))
    t.begin().add(b.compaction_end("manual", "summarize", "failed", timestamp=t.ts()))
    state = fold(t.records)
    assert not state.open_request
    assert state.open_compaction is None


# --------------------------------------------------------------------------- compaction


def test_completed_compaction_resets_context_r_compact_4() -> None:
    t = Trace().meta().user().tools().tool_turn("c1").reply_turn(total=500)
    t.compaction(reply="[summary]all done[/summary]", total=60)
    state = fold(t.records)
    assert state.turns_total == 2  # compaction requests are no turns
    assert state.turns_in_context == 0
    assert state.last_request_total == 0
    assert state.session_tokens.total == 100 + 500 + 60
    assert state.last_request_status == "completed"
    assert state.rotation_pending
    assert state.from_compaction
    assert state.open_compaction is None


def test_failed_compaction_keeps_context_r_compact_22() -> None:
    t = Trace().meta().user().tools().reply_turn(total=500)
    t.compaction(status="failed", reply="no tags here, but failed anyway", total=70)
    state = fold(t.records)
    assert state.turns_in_context == 1
    assert state.last_request_total == 70
    assert not state.rotation_pending
    assert not state.from_compaction


def test_void_closure_resets_nothing_r_resume_15() -> None:
    t = Trace().meta().user().tools().reply_turn(total=500)
    t.compaction(reply="[summary]\n[/summary]", total=70)
    state = fold(t.records)
    assert state.turns_in_context == 1
    assert state.last_request_total == 70
    assert not state.rotation_pending
    assert not state.from_compaction
    # The file goes on: the next turn counts in the same context.
    t.user("more").reply_turn()
    assert fold(t.records).turns_in_context == 2


def test_void_when_no_request_completed_in_span_r_resume_15() -> None:
    """A completed summarize closure whose span holds no completed request has no summary,
    even though a completed turn before the span wrote text."""
    t = Trace().meta().user().tools().reply_turn(body="[summary]not this one[/summary]")
    t.add(b.compaction_begin("context", "summarize", context=1, turns=1, timestamp=t.ts()))
    t.user("Summarize.").begin().text("[summary]cut").end("timeout", attempt=1)
    t.add(b.compaction_end("context", "summarize", "completed", attempt=1, timestamp=t.ts()))
    state = fold(t.records)
    assert state.turns_in_context == 1
    assert not state.rotation_pending


def test_void_check_reads_the_last_completed_span_r_resume_15() -> None:
    t = Trace().meta().user().tools().reply_turn()
    t.add(b.compaction_begin("context", "summarize", context=1, turns=1, timestamp=t.ts()))
    t.user("Summarize.").begin().text("[summary][/summary]").usage(5).end()
    t.user("correct it").begin().text("[summary]").text("good[/summary]").usage(5).end()
    # A later failed attempt does not replace the last completed one.
    t.begin().text("[summary][/summary]").end("timeout")
    t.add(b.compaction_end("context", "summarize", "completed", attempt=3, timestamp=t.ts()))
    state = fold(t.records)
    assert state.rotation_pending
    assert state.turns_in_context == 0


def test_void_check_concatenates_texts_without_separator_r_compact_10() -> None:
    t = Trace().meta().user().tools().reply_turn()
    t.add(b.compaction_begin("context", "summarize", context=1, turns=1, timestamp=t.ts()))
    # Split tags: only the concatenation holds a pair; each piece alone would be void.
    t.user("Summarize.").begin().text("[sum").text("mary][/summary]").usage(5).end()
    t.add(b.compaction_end("context", "summarize", "completed", attempt=1, timestamp=t.ts()))
    assert not fold(t.records).rotation_pending


def test_discard_is_never_void_r_compact_5() -> None:
    t = Trace().meta().user().tools().reply_turn(total=500)
    t.compaction(mode="discard", reason="turns")
    state = fold(t.records)
    assert state.turns_in_context == 0
    assert state.last_request_total == 0
    assert state.rotation_pending
    assert state.from_compaction


def test_compaction_span_requests_are_no_turns_r_compact_4() -> None:
    t = Trace().meta().user().tools().reply_turn()
    t.add(b.compaction_begin("context", "summarize", context=1, turns=1, timestamp=t.ts()))
    t.user("Summarize.").begin().text("x").usage(5)
    # Open compaction request with usage: still not a turn.
    assert fold(t.records).turns_total == 1


# --------------------------------------------------------------------------- files


def rotated_session() -> Trace:
    t = Trace().meta().user().tools().tool_turn("c1").reply_turn()
    t.compaction(reply="[summary]S[/summary]")
    t.head().user("[context_summary]\nS\n[/context_summary]").user("next").reply_turn(total=33)
    return t


def test_rotated_file_starts_new_context_r_proj_2() -> None:
    state = fold(rotated_session().records)
    assert state.files == 2
    assert state.turns_total == 3
    assert state.turns_in_context == 1
    assert state.last_request_total == 33
    assert state.from_compaction  # file index > 1 (R-COMPACT-25)
    assert not state.rotation_pending


def test_trailing_rotation_head_r_root_10() -> None:
    """A head with nothing after it leaves the closed context standing, rotation pending."""
    t = Trace().meta().user().tools().reply_turn().compaction()
    closed = fold(t.records)
    t.meta()
    only_meta = fold(t.records)
    t.tools()
    head = fold(t.records)
    for state in (only_meta, head):
        assert state.rotation_pending
        assert state.from_compaction
        assert state.files == 2
        assert public(state) | {"files": 1, "records": closed.records} == public(closed)


def test_trailing_head_after_void_closure_keeps_counters_r_root_10() -> None:
    t = Trace().meta().user().tools().reply_turn(total=500).compaction(reply="", total=7)
    t.head()
    state = fold(t.records)
    assert state.rotation_pending
    assert state.turns_in_context == 1
    assert state.last_request_total == 7
    # Once something follows, the new file is a new context.
    t.user("hello")
    state = fold(t.records)
    assert not state.rotation_pending
    assert state.turns_in_context == 0
    assert state.last_request_total == 0


def test_session_tokens_span_files_r_resume_11() -> None:
    t = rotated_session()
    state = fold(t.records)
    assert state.session_tokens.total == 100 + 100 + 50 + 33


def test_first_session_meta_is_no_rotation_head() -> None:
    state = fold(Trace().meta().records)
    assert not state.rotation_pending
    assert not state.from_compaction
    assert state.files == 1


# --------------------------------------------------------------------------- R-PROJ-4


def test_origin_tagged_and_partial_messages_are_ignored_r_proj_4() -> None:
    t = Trace().meta().user().tools().tool_turn("c1")
    child = [
        msgspec.structs.replace(r, origin=["session-child"])
        for r in Trace().meta().user().tools().reply_turn().abort().records
    ]
    noisy = [*t.records[:5], *child, b.partial_text("start"), *t.records[5:]]
    assert fold(noisy) == fold(t.records)
    assert fold(noisy).records == len(t.records)


# --------------------------------------------------------------------------- reference traces


def reference_sessions() -> list[tuple[str, list[OmniMessage]]]:
    out = []
    for scenario in sorted(p for p in REFERENCE.glob("*") if p.is_dir()):
        records = [
            decode(line)
            for path in sorted(scenario.glob("*/*.jsonl"))
            for line in path.read_bytes().splitlines()
            if line.strip()
        ]
        out.append((scenario.name, records))
    return out


EXPECTED = {
    "01_plain_text": {"turns_total": 1, "turns_in_context": 1, "last_request_total": 120},
    "02_two_tools_out_of_order": {"turns_total": 2, "turns_in_context": 2, "session": 720},
    "03_tool_denied": {"turns_total": 2, "turns_in_context": 2, "session": 460},
    "06a_compaction_summarize_context": {
        "turns_total": 3,
        "turns_in_context": 1,
        "last_request_total": 180,
        "session": 3060,
        "files": 2,
        "from_compaction": True,
    },
}


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference traces not available")
def test_reference_traces_counters() -> None:
    sessions = dict(reference_sessions())
    assert set(EXPECTED) <= set(sessions)
    for name, expected in EXPECTED.items():
        state = fold(sessions[name])
        for key, value in expected.items():
            actual = state.session_tokens.total if key == "session" else getattr(state, key)
            assert actual == value, (name, key)
        assert state.last_request_status == "completed"
        assert not state.open_request
        assert not state.task_running
        assert not state.rotation_pending


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference traces not available")
def test_reference_06a_first_file_is_closed_r_resume_15() -> None:
    records = dict(reference_sessions())["06a_compaction_summarize_context"]
    first_file_end = next(
        i for i, r in enumerate(records) if isinstance(r.payload, CompactionEndPayload)
    )
    state = fold(records[: first_file_end + 1])
    assert state.rotation_pending
    assert state.from_compaction
    assert state.turns_in_context == 0
    assert state.turns_total == 2


# --------------------------------------------------------------------------- properties

Episode = Callable[[Trace, int], None]


def _ep_reply(t: Trace, n: int) -> None:
    t.user(f"task {n}").reply_turn(total=10 + n)


def _ep_tools(t: Trace, n: int) -> None:
    t.user(f"task {n}").tool_turn(f"c{n}a", f"c{n}b", total=20 + n)


def _ep_retry(t: Trace, n: int) -> None:
    t.user(f"task {n}").begin().text("x", stop_reason="timeout")
    t.end("timeout", attempt=1, retry_in_ms=250).begin().text("ok").usage(30 + n)
    t.end("completed", attempt=2)


def _ep_exhausted(t: Trace, n: int) -> None:
    t.user(f"task {n}").begin().end("malformed", attempt=1).abort(
        "malformed response failed after 0 retries"
    )


def _ep_abort(t: Trace, n: int) -> None:
    t.user(f"task {n}").begin().call(f"c{n}").text("cut", stop_reason="aborted")
    t.end("aborted", attempt=1).abort()


def _ep_compact(t: Trace, n: int) -> None:
    t.compaction(reply=f"[summary]S{n}[/summary]", total=40 + n)
    t.head().user(f"[context_summary]\nS{n}\n[/context_summary]")


def _ep_compact_failed(t: Trace, n: int) -> None:
    t.compaction(status="failed", reply="", total=40 + n)


def _ep_compact_void(t: Trace, n: int) -> None:
    t.compaction(reply="[summary] [/summary]", total=40 + n)


def _ep_discard(t: Trace, n: int) -> None:
    t.compaction(mode="discard", reason="manual")
    t.head()


def _ep_usage_after_end(t: Trace, n: int) -> None:
    t.user(f"task {n}").begin().text("ref order").end().usage(50 + n)


EPISODES: list[Episode] = [
    _ep_reply,
    _ep_tools,
    _ep_retry,
    _ep_exhausted,
    _ep_abort,
    _ep_compact,
    _ep_compact_failed,
    _ep_compact_void,
    _ep_discard,
    _ep_usage_after_end,
]


def build(plan: list[int]) -> list[OmniMessage]:
    t = Trace().meta()
    t.user("first").tools()
    for n, index in enumerate(plan):
        EPISODES[index](t, n)
    return t.records


def closure_records(records: list[OmniMessage]) -> list[OmniMessage]:
    """The R-RESUME-14a / R-RESUME-14 repair records for a trace cut at its end, computed
    independently of the projection."""
    in_request = usage = False
    compaction: CompactionBeginPayload | None = None
    for record in records:
        p = record.payload
        if isinstance(p, RequestBeginPayload):
            in_request, usage = True, False
        elif isinstance(p, RequestEndPayload):
            in_request = False
        elif isinstance(p, TokenUsagePayload) and in_request:
            usage = True
        elif isinstance(p, CompactionBeginPayload):
            compaction = p
        elif isinstance(p, CompactionEndPayload):
            compaction = None
    out = []
    if in_request:
        out.append(b.request_end("completed" if usage else "aborted"))
    if compaction is not None:
        out.append(b.compaction_end(compaction.reason, compaction.mode, "failed"))
    return out


PROPERTY_SETTINGS = settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
PLANS = st.lists(st.integers(0, len(EPISODES) - 1), max_size=8)


@PROPERTY_SETTINGS
@given(plan=PLANS, data=st.data())
def test_prefix_then_rest_equals_whole_inv_24(plan: list[int], data: st.DataObject) -> None:
    """The live state (folded record by record as written) equals the state rebuilt from any
    prefix and continued with the rest."""
    records = build(plan)
    cut = data.draw(st.integers(0, len(records)))
    state = SessionState.from_records(records[:cut])
    for record in records[cut:]:
        state.apply(record)
    assert state == SessionState.from_records(records)


@PROPERTY_SETTINGS
@given(plan=PLANS, data=st.data())
def test_crash_closure_changes_only_span_fields_r_resume_14a(
    plan: list[int], data: st.DataObject
) -> None:
    """Cut a trace anywhere (a crash), append the resume closures: only ``open_request``,
    ``open_compaction``, ``last_request_status`` and ``task_running`` may change."""
    records = build(plan)
    cut = data.draw(st.integers(1, len(records)))
    crashed = records[:cut]
    closure = closure_records(crashed)
    before = public(fold(crashed))
    after = public(fold([*crashed, *closure]))
    assert after.pop("records") == before.pop("records") + len(closure)  # type: ignore[operator]
    for key in ("open_request", "open_compaction", "last_request_status", "task_running"):
        before.pop(key)
        after.pop(key)
    assert after == before
    assert not after.get("open_request")


@PROPERTY_SETTINGS
@given(plan=PLANS)
def test_counters_agree_with_records(plan: list[int]) -> None:
    """turns_total counts committed turns (R-RESUME-11, R-RESUME-18) after every record, and
    the context counter never exceeds it."""
    records = build(plan)
    state = SessionState()
    in_compaction = in_request = usage = False
    committed = 0
    for record in records:
        state.apply(record)
        p = record.payload
        if isinstance(p, CompactionBeginPayload):
            in_compaction = True
        elif isinstance(p, CompactionEndPayload):
            in_compaction = False
        elif isinstance(p, RequestBeginPayload):
            in_request, usage = True, False
        elif isinstance(p, TokenUsagePayload) and in_request:
            usage = True
        elif isinstance(p, RequestEndPayload):
            in_request = False
            if p.status == "completed" and not in_compaction:
                committed += 1
        # R-RESUME-18: an open span whose token_usage was recorded is a committed turn.
        provisional = int(in_request and usage and not in_compaction)
        assert state.turns_total == committed + provisional
        assert 0 <= state.turns_in_context <= state.turns_total
        if state.rotation_pending:
            assert state.turns_in_context == 0 or state.files > 1
