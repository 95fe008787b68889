"""Semantic diff of two traces (SPEC R-TOOL-2): by runs, turns and tool calls, not by line.

Owns: reading each side into its structure — runs (a Prompt and what followed it), turns (a
request span and its retries), tool calls (name, arguments, approval, output), compactions and
run endings — aligning the two (runs by their Prompt, turns and calls by order) and reporting
every difference, the first one, and a summary.  Ignored: timestamps, call ids (calls are
matched by position), session ids, workspace, scratchpad and ``agent_state`` paths (replaced by
placeholders, as golden files do) and durations.  Does not: print (the CLI does).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from eventstore import (
    AbortPayload,
    ApprovalDecisionPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    ImageUrlPayload,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    SettingsPayload,
    TextPayload,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolListReadyPayload,
)
from projections import markers as mk

from ._replay_llm import Located, TraceSource, load_located

__all__ = ["Difference", "TraceDiff", "diff_traces"]


@dataclass
class _Call:
    name: str
    arguments: str
    status: str
    at: str
    cid: str = ""
    approval: str | None = None
    output: str | None = None
    output_status: str | None = None
    out_at: str | None = None


@dataclass
class _Turn:
    at: str
    attempts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    reply: str = ""
    calls: list[_Call] = field(default_factory=list)
    tokens: int = 0


@dataclass
class _Run:
    at: str
    prompt: list[str] = field(default_factory=list)
    turns: list[_Turn] = field(default_factory=list)
    compactions: list[str] = field(default_factory=list)
    steering: list[str] = field(default_factory=list)
    end: str | None = None
    # The settings the run ran under (SPEC §23), as canonical JSON; None: none recorded.
    settings: str | None = None


@dataclass
class _Side:
    system_prompt: str | None = None
    tools: str | None = None
    runs: list[_Run] = field(default_factory=list)
    compaction_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Difference:
    """One difference: ``where`` names the run/turn/call (1-based), ``what`` the field;
    ``a``/``b`` are the two values (``None`` when that side has nothing there) and
    ``a_at``/``b_at`` the ``file:line`` they were read from."""

    where: str
    what: str
    a: str | None
    b: str | None
    a_at: str | None
    b_at: str | None

    def __str__(self) -> str:
        head = f"{self.where}: {self.what}" if self.where else self.what
        a = "(nothing)" if self.a is None else _clip(self.a)
        b = "(nothing)" if self.b is None else _clip(self.b)
        return f"{head}\n  A {self.a_at or ''}: {a}\n  B {self.b_at or ''}: {b}"


@dataclass(frozen=True)
class TraceDiff:
    """What ``diff_traces`` found: ``equal`` when no difference; ``first`` the first one in
    run, turn, call order; ``summary`` counts (see ``summary_line``)."""

    equal: bool
    differences: list[Difference]
    summary: dict[str, Any]

    @property
    def first(self) -> Difference | None:
        return self.differences[0] if self.differences else None

    def summary_line(self) -> str:
        s = self.summary
        delta = s["tokens_b"] - s["tokens_a"]
        return (
            f"runs {s['runs_a']} / {s['runs_b']}, turns {s['turns_a']} / {s['turns_b']} "
            f"({s['turns_added']} added, {s['turns_removed']} removed), tool calls whose "
            f"arguments differ: {s['calls_arguments_differ']}, outputs differ: "
            f"{s['calls_outputs_differ']}, status changes: {s['status_changes']}, tokens "
            f"{s['tokens_a']} -> {s['tokens_b']} ({delta:+d})"
        )

    def __str__(self) -> str:
        if self.equal:
            return "equal: " + self.summary_line()
        return f"first divergence: {self.first}\n{self.summary_line()}"

    def as_json(self) -> dict[str, Any]:
        def row(d: Difference) -> dict[str, Any]:
            return {
                "where": d.where,
                "what": d.what,
                "a": d.a,
                "b": d.b,
                "a_at": d.a_at,
                "b_at": d.b_at,
            }

        return {
            "equal": self.equal,
            "first": row(self.first) if self.first else None,
            "differences": [row(d) for d in self.differences],
            "summary": self.summary,
        }


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- reading


def _placeholders(located: list[Located]) -> list[tuple[str, str]]:
    pairs: dict[str, str] = {}
    for loc in located:
        p = loc.record.payload
        if isinstance(p, SessionMetaPayload):
            if p.agent_state:
                pairs[p.agent_state.rsplit("/", 1)[0] + f"/scratchpad/{p.session_id}"] = (
                    "<scratchpad>"
                )
                pairs[p.agent_state] = "<agent_state>"
            pairs[p.workspace] = "<workspace>"
            pairs[p.session_id] = "<session_id>"
    return sorted(((k, v) for k, v in pairs.items() if k), key=lambda kv: -len(kv[0]))


class _Reader:
    """One pass over a side's records, building its structure."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.pairs = pairs
        self.side = _Side()
        self.run: _Run | None = None
        self.turn: _Turn | None = None
        self.in_request = False
        self.compacting: str | None = None
        self.last_status: str | None = None
        self.calls: dict[str, _Call] = {}
        self.settings: str | None = None

    def norm(self, text: str) -> str:
        for old, new in self.pairs:
            if old in text:
                text = text.replace(old, new)
        return text

    def current_run(self, at: str) -> _Run:
        if self.run is None:
            self.run = _Run(at, settings=self.settings)
            self.side.runs.append(self.run)
        return self.run

    def feed(self, loc: Located) -> None:
        p = loc.record.payload
        at = loc.where
        if isinstance(p, SessionMetaPayload):
            if self.side.system_prompt is None:
                self.side.system_prompt = self.norm(p.system_prompt)
        elif isinstance(p, ToolListReadyPayload):
            if self.side.tools is None:
                self.side.tools = self.norm(msgspec.json.encode(p.tools).decode())
        elif isinstance(p, SettingsPayload):
            raw = msgspec.to_builtins(p)
            self.settings = self.norm(json.dumps(raw, sort_keys=True, ensure_ascii=False))
        elif isinstance(p, CompactionBeginPayload):
            self.compacting = f"{p.reason} {p.mode}"
        elif isinstance(p, CompactionEndPayload):
            self.current_run(at).compactions.append(f"{p.reason} {p.mode}: {p.status}")
            self.compacting = None
        elif self.compacting is not None:
            if isinstance(p, TokenUsagePayload):  # what the compaction cost, for the summary
                self.side.compaction_tokens += p.request.total
            return  # the compaction's own requests: its outcome is what is compared
        elif isinstance(p, RequestBeginPayload):
            self.begin(at)
        elif isinstance(p, RequestEndPayload):
            self.in_request = False
            self.last_status = p.status
            if self.turn is not None:
                self.turn.attempts.append(p.status)
                if p.error_message:
                    self.turn.errors.append(self.norm(p.error_message))
        elif isinstance(p, AbortPayload) and loc.record.origin is None:
            self.current_run(at).end = f"abort: {self.norm(p.reason or '')}"
        else:
            self.content(loc, at)

    def begin(self, at: str) -> None:
        run = self.current_run(at)
        ongoing = bool(run.turns) and run.turns[-1] is self.turn
        if not ongoing or self.last_status == "completed":
            self.turn = _Turn(at)
            run.turns.append(self.turn)
        self.in_request = True

    def content(self, loc: Located, at: str) -> None:
        p = loc.record.payload
        if loc.record.origin is not None:
            return
        if isinstance(p, TextPayload | ImageUrlPayload) and p.role == "user":
            if self.in_request:
                return
            text = self.norm(p.text if isinstance(p, TextPayload) else p.image_url)
            if isinstance(p, TextPayload) and mk.is_steering(p.text):
                self.current_run(at).steering.append(text)
            elif mk.is_task_starting(loc.record):
                if self.run is None or self.run.turns or self.run.end is not None:
                    self.run = None
                self.current_run(at).prompt.append(text)
        elif isinstance(p, TextPayload) and self.turn is not None and self.in_request:
            self.turn.reply += self.norm(p.text)
        elif isinstance(p, TextPayload) and p.role == "assistant":
            self.current_run(at).end = f"notice: {self.norm(p.text)}"  # e.g. max turns
        elif isinstance(p, ToolCallPayload) and self.turn is not None:
            call = _Call(p.name, _canonical(self.norm(p.arguments)), p.stop_reason or "", at)
            call.cid = p.tool_call_id
            self.turn.calls.append(call)
            self.calls[p.tool_call_id] = call
        elif isinstance(p, ApprovalDecisionPayload) and p.tool_call_id in self.calls:
            self.calls[p.tool_call_id].approval = p.decision
        elif isinstance(p, ToolCallOutputPayload) and p.tool_call_id in self.calls:
            call = self.calls[p.tool_call_id]
            call.output = self.norm(p.output)
            call.output_status = p.stop_reason
            call.out_at = at
        elif isinstance(p, TokenUsagePayload) and self.turn is not None:
            self.turn.tokens += p.request.total


def _canonical(arguments: str) -> str:
    """Arguments as canonical JSON (key order and spacing ignored) when they parse."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, ensure_ascii=False)
    except (ValueError, RecursionError):
        return arguments


def _read(located: list[Located], pairs: list[tuple[str, str]]) -> _Side:
    reader = _Reader(pairs)
    for loc in located:
        reader.feed(loc)
    return reader.side


# --------------------------------------------------------------------------- comparing


@dataclass
class _Diffs:
    out: list[Difference] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def add(self, where: str, what: str, a: Any, b: Any, a_at: Any, b_at: Any) -> None:
        self.out.append(Difference(where, what, a, b, a_at, b_at))

    def count(self, key: str, n: int = 1) -> None:
        self.summary[key] = self.summary.get(key, 0) + n


def _compare_calls(d: _Diffs, where: str, a: _Call, b: _Call) -> None:
    for what, x, y in (
        ("tool name", a.name, b.name),
        ("call status", a.status, b.status),
        ("arguments", a.arguments, b.arguments),
        ("approval", a.approval, b.approval),
        ("output", a.output, b.output),
        ("output status", a.output_status, b.output_status),
    ):
        if x != y:
            output = what.startswith("output")
            a_at, b_at = (a.out_at, b.out_at) if output else (a.at, b.at)
            d.add(where, what, x, y, a_at or a.at, b_at or b.at)
            if what == "arguments":
                d.count("calls_arguments_differ")
            elif what == "output":
                d.count("calls_outputs_differ")
            elif what in ("call status", "output status"):
                # Every difference whose name says "status" is counted as one (issue 30).
                d.count("status_changes")


def _compare_turns(d: _Diffs, where: str, a: _Turn, b: _Turn) -> None:
    if a.attempts != b.attempts:
        d.add(where, "request status", " ".join(a.attempts), " ".join(b.attempts), a.at, b.at)
        d.count("status_changes")
    if a.errors != b.errors:
        d.add(where, "request errors", "; ".join(a.errors), "; ".join(b.errors), a.at, b.at)
    if a.reply != b.reply:
        d.add(where, "assistant text", a.reply, b.reply, a.at, b.at)
    for n, (x, y) in enumerate(zip(a.calls, b.calls, strict=False), start=1):
        _compare_calls(d, f"{where}, call {n} ({x.name})", x, y)
    for n in range(len(b.calls), len(a.calls)):
        c = a.calls[n]
        d.add(
            f"{where}, call {n + 1} ({c.name})", "tool call removed", c.arguments, None, c.at, None
        )
    for n in range(len(a.calls), len(b.calls)):
        c = b.calls[n]
        d.add(f"{where}, call {n + 1} ({c.name})", "tool call added", None, c.arguments, None, c.at)
    if a.tokens != b.tokens:
        d.add(where, "tokens", str(a.tokens), str(b.tokens), a.at, b.at)


def _compare_runs(d: _Diffs, where: str, a: _Run, b: _Run) -> None:
    if a.prompt != b.prompt:
        d.add(where, "prompt", "\n".join(a.prompt), "\n".join(b.prompt), a.at, b.at)
    for n, (x, y) in enumerate(zip(a.turns, b.turns, strict=False), start=1):
        _compare_turns(d, f"{where}, turn {n}", x, y)
    for n in range(len(b.turns), len(a.turns)):
        t = a.turns[n]
        d.add(f"{where}, turn {n + 1}", "turn removed", t.reply, None, t.at, None)
        d.count("turns_removed")
    for n in range(len(a.turns), len(b.turns)):
        t = b.turns[n]
        d.add(f"{where}, turn {n + 1}", "turn added", None, t.reply, None, t.at)
        d.count("turns_added")
    for what, xs, ys in (
        ("steering", a.steering, b.steering),
        ("compactions", a.compactions, b.compactions),
    ):
        if xs != ys:
            d.add(where, what, "\n".join(xs), "\n".join(ys), a.at, b.at)
    if a.end != b.end:
        d.add(where, "run ending", a.end, b.end, a.at, b.at)
        d.count("status_changes")
    # Settings are compared where both sides recorded them (a reference trace has none).
    if a.settings is not None and b.settings is not None and a.settings != b.settings:
        d.add(where, "settings", a.settings, b.settings, a.at, b.at)
        d.count("settings_changes")


def _pairs(a: list[_Run], b: list[_Run]) -> Iterator[tuple[int | None, int | None]]:
    """Runs aligned by their Prompt; unmatched stretches paired by position."""
    keys_a = ["\n".join(r.prompt) for r in a]
    keys_b = ["\n".join(r.prompt) for r in b]
    matcher = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    for _tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for k in range(max(i2 - i1, j2 - j1)):
            yield (i1 + k if i1 + k < i2 else None, j1 + k if j1 + k < j2 else None)


def diff_traces(a: TraceSource, b: TraceSource) -> TraceDiff:
    """Compare two sessions by structure (SPEC R-TOOL-2).  ``a`` and ``b`` are each a trace
    file, a session's files, their directory, or a list of records."""
    la, lb = load_located(a), load_located(b)
    pairs = _placeholders([*la, *lb])
    sa, sb = _read(la, pairs), _read(lb, pairs)
    d = _Diffs()
    for what, x, y in (
        ("system prompt", sa.system_prompt, sb.system_prompt),
        ("tools", sa.tools, sb.tools),
    ):
        if x != y:
            d.add("session", what, x, y, None, None)
    for i, j in _pairs(sa.runs, sb.runs):
        if i is not None and j is not None:
            _compare_runs(d, f"run {i + 1}", sa.runs[i], sb.runs[j])
        elif i is not None:
            r = sa.runs[i]
            d.add(f"run {i + 1}", "run removed", "\n".join(r.prompt), None, r.at, None)
            d.count("turns_removed", len(r.turns))
        elif j is not None:
            r = sb.runs[j]
            d.add(f"run {j + 1}", "run added", None, "\n".join(r.prompt), None, r.at)
            d.count("turns_added", len(r.turns))
    turns_a = sum(len(r.turns) for r in sa.runs)
    turns_b = sum(len(r.turns) for r in sb.runs)
    summary = {
        "runs_a": len(sa.runs),
        "runs_b": len(sb.runs),
        "turns_a": turns_a,
        "turns_b": turns_b,
        "turns_added": 0,
        "turns_removed": 0,
        "calls_arguments_differ": 0,
        "calls_outputs_differ": 0,
        "status_changes": 0,
        "settings_changes": 0,
        "tokens_a": sum(t.tokens for r in sa.runs for t in r.turns) + sa.compaction_tokens,
        "tokens_b": sum(t.tokens for r in sb.runs for t in r.turns) + sb.compaction_tokens,
    }
    summary.update(d.summary)
    summary["differences"] = len(d.out)
    return TraceDiff(equal=not d.out, differences=d.out, summary=summary)
