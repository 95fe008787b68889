"""Deterministic test doubles: ``ScriptedLLM`` and ``ScriptedEnvironment`` (SPEC §15.1).

Owns: parsing and validating the script format (R-SCRIPT-2/3), replaying responses with the
streaming discipline (R-SCRIPT-4..7, R-STREAM-1/2/4), the request log (R-SCRIPT-9) and serving
scripted tool results with the environment close-out rules (R-SCRIPT-8, R-TOOL-1..4).  Does not:
run real tools, truncate tool output, restamp ``token_usage.session`` (the engine does, R-RUN-10)
or decide what the engine does with an outcome.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal, Protocol, TypeAlias, cast, get_args

import anyio
import msgspec

from engine._protocols import ApproveFn, LLMOutcome, LLMRequest
from engine._sandbox import SandboxPolicy
from engine._signal import AbortSignal
from eventstore import (
    OmniMessage,
    StopReason,
    TextPayload,
    TokenCounts,
    ToolCallPayload,
    ToolDefinition,
)
from eventstore.builders import (
    token_usage,
    user_text,
)
from eventstore.partials import SegmentWriter
from projections import markers as mk
from projections.markers import parse_goal_file

__all__ = [
    "DEFAULT_SCRIPT",
    "GOAL_FILE_PLACEHOLDER",
    "Script",
    "ScriptedEnvironment",
    "ScriptedLLM",
    "load_script",
]

DEFAULT_SCRIPT: Final[Path] = Path(__file__).with_name("default_script.json")
"""The embedded demo script (``make demo``, ``penguin run`` without a model)."""

ScriptSource: TypeAlias = "Script | Mapping[str, Any] | Sequence[Any] | str | os.PathLike[str]"

_STOP_REASONS: Final[frozenset[str]] = frozenset(get_args(StopReason))
_FAIL_STATUSES: Final[frozenset[str]] = _STOP_REASONS - {"completed"}
_ABORT_NOTE: Final = mk.PLACEHOLDER_ABORTED
_NO_OUTPUT: Final = mk.NO_OUTPUT

# Top-level keys with a meaning; any other top-level key (``description``, ``comment``, …) is
# documentation and is kept in ``Script.extra``.
_TOP_KEYS: Final = frozenset(
    {"responses", "tools", "provider", "model_id", "vision", "context_window"}
)


# --------------------------------------------------------------------------- parsed form


@dataclass(frozen=True, slots=True)
class _Segment:
    """A text or thinking item; ``stop_reason`` already carries R-SCRIPT-5 stamping."""

    kind: Literal["text", "thinking"]
    deltas: tuple[str, ...]
    stop_reason: StopReason
    fidelity: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class _ToolResult:
    chunks: tuple[str, ...]
    status: StopReason
    delay_ms: int
    images: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _ToolCall:
    name: str
    arguments: str
    tool_call_id: str
    stop_reason: StopReason
    fidelity: dict[str, Any] | None
    result: _ToolResult | None


@dataclass(frozen=True, slots=True)
class _Usage:
    cache_read: int
    cache_write: int
    output: int

    def counts(self) -> TokenCounts:
        total = self.cache_read + self.cache_write + self.output
        return TokenCounts(self.cache_read, self.cache_write, self.output, total)


@dataclass(frozen=True, slots=True)
class _Sleep:
    ms: int


@dataclass(frozen=True, slots=True)
class _Steer:
    text: str


@dataclass(frozen=True, slots=True)
class _Fail:
    status: StopReason
    message: str | None
    permanent: bool
    retry_after_s: float | None


_Item: TypeAlias = "_Segment | _ToolCall | _Usage | _Sleep | _Steer"


@dataclass(frozen=True, slots=True)
class _Response:
    items: tuple[_Item, ...]
    fail: _Fail | None
    # What to emit after the last item of a completed response: R-SCRIPT-6's default counts,
    # an explicit response-level usage object, or nothing (usage item present or ``false``).
    final_usage: _Usage | Literal["default"] | None


@dataclass(frozen=True)
class Script:
    """A validated, normalized script (``load_script``).  Immutable; share it freely."""

    responses: tuple[_Response, ...]
    tools: tuple[ToolDefinition, ...] = ()
    provider: str = "scripted"
    model_id: str = "script"
    vision: bool = True
    context_window: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def tool_results(self) -> dict[str, _ToolResult]:
        """Scripted results by ``tool_call_id``; the first call with a result wins."""
        index: dict[str, _ToolResult] = {}
        for response in self.responses:
            for item in response.items:
                if isinstance(item, _ToolCall) and item.result is not None:
                    index.setdefault(item.tool_call_id, item.result)
        return index


# --------------------------------------------------------------------------- validation


def _bad(where: str, what: str) -> ValueError:
    return ValueError(f"invalid script: {where}: {what}")


def _int(value: Any, where: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _bad(where, f"expected an integer >= {minimum}, got {value!r}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _bad(where, f"expected a string, got {value!r}")
    return value


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(where, f"expected a list of strings, got {value!r}")
    return tuple(value)


def _stop_reason(value: Any, where: str, *, allowed: frozenset[str] = _STOP_REASONS) -> StopReason:
    if value not in allowed:
        raise _bad(where, f"expected one of {sorted(allowed)}, got {value!r}")
    return cast(StopReason, value)


def _object(value: Any, where: str, keys: frozenset[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(where, f"expected an object, got {value!r}")
    unknown = sorted(set(value) - keys)
    if unknown:
        raise _bad(where, f"unknown key {unknown[0]!r} (allowed: {sorted(keys)})")
    return value


def _fidelity(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad(where, f"fidelity must be an object, got {value!r}")
    return dict(value) or None


def _split(body: str, chunks: int) -> tuple[str, ...]:
    """``chunks`` equal parts; the last part takes the remainder (R-SCRIPT-4)."""
    size = len(body) // chunks
    parts = [body[i * size : (i + 1) * size] for i in range(chunks - 1)]
    parts.append(body[(chunks - 1) * size :])
    return tuple(parts)


_SEGMENT_KEYS: Final = {
    "text": frozenset({"text", "chunks", "fidelity", "stop_reason"}),
    "thinking": frozenset({"thinking", "chunks", "fidelity", "stop_reason"}),
}
_ITEM_KINDS: Final = ("text", "thinking", "tool_call", "usage", "sleep_ms", "steer", "fail")


def _parse_segment(
    kind: Literal["text", "thinking"], raw: dict[str, Any], where: str
) -> tuple[tuple[str, ...], StopReason | None, dict[str, Any] | None]:
    _object(raw, where, _SEGMENT_KEYS[kind])
    body = raw[kind]
    if isinstance(body, list):
        if "chunks" in raw:
            raise _bad(where, f"'chunks' cannot be combined with an explicit list of {kind} deltas")
        deltas = _str_list(body, f"{where}.{kind}")
    else:
        body = _str(body, f"{where}.{kind}")
        deltas = _split(body, _int(raw.get("chunks", 1), f"{where}.chunks", minimum=1))
    explicit = (
        _stop_reason(raw["stop_reason"], f"{where}.stop_reason") if "stop_reason" in raw else None
    )
    return deltas, explicit, _fidelity(raw.get("fidelity"), f"{where}.fidelity")


def _parse_result(raw: Any, where: str) -> _ToolResult:
    obj = _object(raw, where, frozenset({"output", "status", "delay_ms", "chunks", "images"}))
    output = _str(obj["output"], f"{where}.output") if "output" in obj else None
    if "chunks" in obj:
        chunks = _str_list(obj["chunks"], f"{where}.chunks")
        if output is not None and output != "".join(chunks):
            raise _bad(
                where, "'output' and 'chunks' disagree (output must equal the joined chunks)"
            )
    else:
        chunks = (output,) if output else ()
    return _ToolResult(
        chunks=chunks,
        status=_stop_reason(obj.get("status", "completed"), f"{where}.status"),
        delay_ms=_int(obj.get("delay_ms", 0), f"{where}.delay_ms", minimum=0),
        images=_str_list(obj.get("images", []), f"{where}.images"),
    )


def _parse_tool_call(raw: Any, where: str, default_id: str) -> _ToolCall:
    keys = frozenset({"name", "arguments", "id", "stop_reason", "fidelity", "result"})
    obj = _object(raw, where, keys)
    if "name" not in obj:
        raise _bad(where, "a tool_call needs a 'name'")
    arguments = obj.get("arguments", {})
    if isinstance(arguments, dict):
        serialized = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
    elif isinstance(arguments, str):
        serialized = arguments  # verbatim: lets a script send malformed JSON
    else:
        raise _bad(f"{where}.arguments", f"expected an object or a string, got {arguments!r}")
    call_id = _str(obj.get("id", default_id), f"{where}.id")
    if not call_id:
        raise _bad(f"{where}.id", "a tool_call id must not be empty")
    return _ToolCall(
        name=_str(obj["name"], f"{where}.name"),
        arguments=serialized,
        tool_call_id=call_id,
        stop_reason=_stop_reason(obj.get("stop_reason", "completed"), f"{where}.stop_reason"),
        fidelity=_fidelity(obj.get("fidelity"), f"{where}.fidelity"),
        result=_parse_result(obj["result"], f"{where}.result") if "result" in obj else None,
    )


def _parse_usage(raw: Any, where: str) -> _Usage:
    obj = _object(raw, where, frozenset({"cache_read", "cache_write", "output"}))
    return _Usage(
        cache_read=_int(obj.get("cache_read", 0), f"{where}.cache_read", minimum=0),
        cache_write=_int(obj.get("cache_write", 0), f"{where}.cache_write", minimum=0),
        output=_int(obj.get("output", 0), f"{where}.output", minimum=0),
    )


def _parse_fail(raw: Any, where: str) -> _Fail:
    obj = _object(raw, where, frozenset({"status", "message", "permanent", "retry_after_s"}))
    if "status" not in obj:
        raise _bad(where, "a fail item needs a 'status'")
    permanent = obj.get("permanent", False)
    if not isinstance(permanent, bool):
        raise _bad(f"{where}.permanent", f"expected a boolean, got {permanent!r}")
    retry_after = obj.get("retry_after_s")
    if retry_after is not None and (
        isinstance(retry_after, bool) or not isinstance(retry_after, int | float) or retry_after < 0
    ):
        raise _bad(f"{where}.retry_after_s", f"expected a number >= 0, got {retry_after!r}")
    message = obj.get("message")
    return _Fail(
        status=_stop_reason(obj["status"], f"{where}.status", allowed=_FAIL_STATUSES),
        message=None if message is None else _str(message, f"{where}.message"),
        permanent=permanent,
        retry_after_s=None if retry_after is None else float(retry_after),
    )


def _parse_response(raw: Any, r: int) -> _Response:
    where = f"responses[{r}]"
    usage_option: Any = None
    if isinstance(raw, dict):
        obj = _object(raw, where, frozenset({"items", "usage"}))
        if "items" not in obj:
            raise _bad(where, "a response object needs 'items'")
        raw_items = obj["items"]
        usage_option = obj.get("usage")
        if usage_option is True or not (
            usage_option is None or usage_option is False or isinstance(usage_option, dict)
        ):
            raise _bad(f"{where}.usage", f"expected an object or false, got {usage_option!r}")
    else:
        raw_items = raw
    if not isinstance(raw_items, list):
        raise _bad(where, f"expected a list of items, got {raw_items!r}")

    # Pass 1: shape of every item, and where the failure (if any) sits.
    kinds = _item_kinds(raw_items, where)
    fail: _Fail | None = None
    if "fail" in kinds:
        at = kinds.index("fail")
        if at != len(kinds) - 1:
            raise _bad(f"{where}[{at}]", "'fail' must be the last item of its response")
        fail = _parse_fail(
            _object(raw_items[at], f"{where}[{at}]", frozenset({"fail"}))["fail"],
            f"{where}[{at}].fail",
        )
        if "usage" in kinds:
            raise _bad(
                f"{where}[{kinds.index('usage')}]",
                "a failing response never emits usage (R-SCRIPT-6)",
            )
        if isinstance(usage_option, dict):
            raise _bad(f"{where}.usage", "a failing response never emits usage (R-SCRIPT-6)")
    elif isinstance(usage_option, dict) and "usage" in kinds:
        raise _bad(f"{where}.usage", "give usage either per response or as items, not both")

    # Pass 2: the items themselves.
    items: list[_Item] = []
    calls = 0
    body_len = len(kinds) - (1 if fail else 0)
    for n in range(body_len):
        item, kind, item_where = raw_items[n], kinds[n], f"{where}[{n}]"
        if kind in ("text", "thinking"):
            seg_kind = cast(Literal["text", "thinking"], kind)
            deltas, explicit, fid = _parse_segment(seg_kind, item, item_where)
            stop: StopReason = explicit or "completed"
            # R-SCRIPT-5: the segment right before ``fail`` is the interrupted one.
            if explicit is None and fail is not None and n == body_len - 1:
                stop = fail.status
            items.append(_Segment(seg_kind, deltas, stop, fid))
        else:
            if kind == "tool_call":
                calls += 1
            items.append(_parse_item(item, kind, item_where, f"call_{r + 1}_{calls}"))

    final: _Usage | Literal["default"] | None
    if fail is not None or usage_option is False or "usage" in kinds:
        final = None
    elif isinstance(usage_option, dict):
        final = _parse_usage(usage_option, f"{where}.usage")
    else:
        final = "default"
    return _Response(tuple(items), fail, final)


def _item_kinds(raw_items: list[Any], where: str) -> list[str]:
    """The kind of every item (exactly one kind key each)."""
    kinds: list[str] = []
    for n, item in enumerate(raw_items):
        item_where = f"{where}[{n}]"
        if not isinstance(item, dict):
            raise _bad(item_where, f"expected an item object, got {item!r}")
        found = [k for k in _ITEM_KINDS if k in item]
        if len(found) != 1:
            what = "no item kind" if not found else f"several item kinds {found}"
            raise _bad(item_where, f"{what} (expected exactly one of {list(_ITEM_KINDS)})")
        kinds.append(found[0])
    return kinds


def _parse_item(item: Any, kind: str, where: str, default_call_id: str) -> _Item:
    """A ``tool_call``, ``usage``, ``sleep_ms`` or ``steer`` item."""
    _object(item, where, frozenset({kind}))
    value = item[kind]
    if kind == "tool_call":
        return _parse_tool_call(value, f"{where}.tool_call", default_call_id)
    if kind == "usage":
        return _parse_usage(value, f"{where}.usage")
    if kind == "sleep_ms":
        return _Sleep(_int(value, f"{where}.sleep_ms", minimum=0))
    return _Steer(_str(value, f"{where}.steer"))


def _parse_tools(raw: Any) -> tuple[ToolDefinition, ...]:
    if not isinstance(raw, list):
        raise _bad("tools", f"expected a list of tool definitions, got {raw!r}")
    tools: list[ToolDefinition] = []
    for i, entry in enumerate(raw):
        try:
            tools.append(msgspec.convert(entry, ToolDefinition))
        except msgspec.ValidationError as exc:
            raise _bad(f"tools[{i}]", str(exc)) from None
    return tuple(tools)


def _parse(raw: Any) -> Script:
    if isinstance(raw, list):
        raw = {"responses": raw}
    if not isinstance(raw, dict):
        raise _bad("script", f"expected an object or a list of responses, got {type(raw).__name__}")
    if "responses" not in raw:
        raise _bad("script", "missing 'responses'")
    responses = raw["responses"]
    if not isinstance(responses, list):
        raise _bad("responses", f"expected a list, got {responses!r}")
    provider = _str(raw.get("provider", "scripted"), "provider")
    model_id = _str(raw.get("model_id", "script"), "model_id")
    vision = raw.get("vision", True)
    if not isinstance(vision, bool):
        raise _bad("vision", f"expected a boolean, got {vision!r}")
    window = raw.get("context_window")
    return Script(
        responses=tuple(_parse_response(resp, r) for r, resp in enumerate(responses)),
        tools=_parse_tools(raw.get("tools", [])),
        provider=provider,
        model_id=model_id,
        vision=vision,
        context_window=None if window is None else _int(window, "context_window", minimum=1),
        extra={k: v for k, v in raw.items() if k not in _TOP_KEYS},
    )


def load_script(source: ScriptSource) -> Script:
    """Parse and validate a script: an object, a bare list of responses, a ``Script`` (returned
    as is) or a path to a ``.json`` file.  Raises ``ValueError`` naming the offending place."""
    if isinstance(source, Script):
        return source
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        text = path.read_text(encoding="utf-8")
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid script: {path}: not valid JSON ({exc})") from None
        try:
            return _parse(raw)
        except ValueError as exc:
            raise ValueError(f"{exc} (in {path})") from None
    if isinstance(source, Mapping):
        return _parse(dict(source))
    return _parse(list(source))


# --------------------------------------------------------------------------- shared helpers


async def _pause(ms: int, signal: AbortSignal) -> bool:
    """Wait ``ms`` unless the signal fires first; True when aborted.  Nothing yields in here."""
    if not signal.aborted and ms > 0:
        with anyio.move_on_after(ms / 1000):
            await signal.wait()
    return signal.aborted


class _Steerable(Protocol):
    def steer(self, input: list[OmniMessage], /) -> bool: ...


@dataclass
class _Progress:
    aborted: bool = False
    completes: int = 0


def _emit_segment(
    item: _Segment, signal: AbortSignal, progress: _Progress
) -> Iterator[OmniMessage]:
    # A plain generator driven lazily by ``stream``: each check runs when the consumer asks for
    # the next message, i.e. after whatever it did with the previous one.
    seg = SegmentWriter(item.kind, fidelity=item.fidelity)
    yield seg.start()
    for delta in item.deltas:
        if signal.aborted:
            progress.aborted = True
            progress.completes += 1
            yield from seg.stop("aborted")
            return
        yield seg.delta(delta)
    progress.completes += 1
    yield from seg.stop(item.stop_reason)


def _emit_tool_call(
    item: _ToolCall, signal: AbortSignal, progress: _Progress, call_id: str
) -> Iterator[OmniMessage]:
    seg = SegmentWriter("tool_call", tool_call_id=call_id, name=item.name, fidelity=item.fidelity)
    yield seg.start()
    stop = item.stop_reason
    if signal.aborted:
        progress.aborted = True
        stop = "aborted"
    else:
        yield seg.delta(item.arguments)
    progress.completes += 1
    yield from seg.stop(stop)


# --------------------------------------------------------------------------- goal file

GOAL_FILE_PLACEHOLDER: Final = "${GOAL_FILE}"
"""In a tool call's arguments, replaced by the goal file named in the request's latest goal
block (SPEC §18), so that a script can drive a goal run whose scratchpad path it cannot know."""


def _with_goal_file(item: _ToolCall, request: LLMRequest) -> _ToolCall:
    for msg in reversed(request.messages):
        p = msg.payload
        if not (isinstance(p, TextPayload) and p.role == "user"):
            continue
        path = parse_goal_file(p.text)
        if path is None:
            continue
        # JSON-escaped: the placeholder sits inside a JSON string of the arguments.
        escaped = json.dumps(path, ensure_ascii=False)[1:-1]
        return replace(item, arguments=item.arguments.replace(GOAL_FILE_PLACEHOLDER, escaped))
    return item


# --------------------------------------------------------------------------- tool-call ids

_SUFFIX = re.compile(r"#\d+\Z")


class _UsedIds:
    """The tool-call ids in a request's history, scanned incrementally: consecutive requests of
    one context share their prefix (the same message objects), so only the new tail is read and
    the cost per request does not grow with the history.

    The history alone misses the calls of an attempt its context dropped: a request span a
    crash left open is closed ``aborted`` on resume (R-RESUME-14a), so a call approved (or
    answered) in it is in the trace but not in any later request.  ``seed`` adds the ids a
    resumed session's trace records, kept across context resets (R-RUN-20: seeded on resume,
    through ``SeedsToolCallIds``)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._seeded: frozenset[str] = frozenset()
        self._first: OmniMessage | None = None
        self._scanned = 0

    def seed(self, ids: Set[str]) -> None:
        self._seeded = self._seeded | ids
        self._ids |= ids

    def of(self, messages: list[OmniMessage]) -> set[str]:
        start = self._scanned
        if not messages or messages[0] is not self._first or len(messages) < start:
            self._ids, start = set(self._seeded), 0
        for m in messages[start:]:
            if isinstance(m.payload, ToolCallPayload):
                self._ids.add(m.payload.tool_call_id)
        self._first = messages[0] if messages else None
        self._scanned = len(messages)
        return self._ids


def _fresh_id(call_id: str, used: set[str]) -> str:
    """R-RUN-20: an id the session already used gets the smallest free ``#<n>`` (n ≥ 2).

    A script replayed on a resumed session restarts its default ``call_<r>_<n>`` ids; the
    history it is sent shows which of them are taken.
    """
    fresh = call_id
    n = 2
    while fresh in used:
        fresh = f"{call_id}#{n}"
        n += 1
    used.add(fresh)
    return fresh


def base_call_id(call_id: str) -> str:
    """The scripted id behind ``<id>#<n>``."""
    return _SUFFIX.sub("", call_id)


# --------------------------------------------------------------------------- the LLM


class ScriptedLLM:
    """An LLM that answers the k-th request with the script's k-th response (R-SCRIPT-1).

    ``requests`` records every ``LLMRequest`` received, in call order (R-SCRIPT-9).
    """

    def __init__(self, script: ScriptSource) -> None:
        self.script: Script = load_script(script)
        self._used = _UsedIds()
        self.provider: str = self.script.provider
        self.model_id: str = self.script.model_id
        self.vision: bool = self.script.vision
        self.tools: list[ToolDefinition] = list(self.script.tools)
        self.requests: list[LLMRequest] = []
        self._session: _Steerable | None = None

    def __repr__(self) -> str:
        return (
            f"ScriptedLLM(model_id={self.model_id!r}, responses={len(self.script.responses)}, "
            f"requests={len(self.requests)})"
        )

    @property
    def context_window(self) -> int:
        """Only present when the script sets it (R-SCRIPT-10): ``getattr(llm, ..., None)``."""
        if self.script.context_window is None:
            raise AttributeError("this script declares no context_window")
        return self.script.context_window

    def bind(self, session: _Steerable | None) -> None:
        """Give ``{"steer": …}`` items the session whose ``steer`` they call (R-SCRIPT-3)."""
        self._session = session

    def seed_tool_call_ids(self, ids: Set[str]) -> None:
        """``SeedsToolCallIds`` (R-RUN-20): a script replayed on a resumed session renames its
        default ids past every call its trace records, not only those of its history."""
        self._used.seed(ids)

    def stream(self, request: LLMRequest) -> AsyncIterator[OmniMessage | LLMOutcome]:
        # The response is chosen when ``stream`` is called, not when iteration starts, so that
        # concurrent callers are answered in call order (R-SCRIPT-1).
        index = len(self.requests)
        self.requests.append(request)
        return self._respond(index, request)

    async def _respond(
        self, index: int, request: LLMRequest
    ) -> AsyncIterator[OmniMessage | LLMOutcome]:
        if index >= len(self.script.responses):
            yield LLMOutcome(
                "failed", f"scripted: no response for request {index + 1}", permanent=True
            )
            return
        response = self.script.responses[index]
        signal = request.signal
        progress = _Progress()
        used = self._used.of(request.messages)
        for item in response.items:
            if signal.aborted:
                yield LLMOutcome("aborted")
                return
            if isinstance(item, _ToolCall) and GOAL_FILE_PLACEHOLDER in item.arguments:
                item = _with_goal_file(item, request)
            if isinstance(item, _Segment | _ToolCall):
                messages = (
                    _emit_segment(item, signal, progress)
                    if isinstance(item, _Segment)
                    else _emit_tool_call(item, signal, progress, _fresh_id(item.tool_call_id, used))
                )
                for message in messages:
                    yield message
                if progress.aborted:
                    yield LLMOutcome("aborted")
                    return
            elif isinstance(item, _Usage):
                yield token_usage(item.counts())
            elif isinstance(item, _Sleep):
                if await _pause(item.ms, signal):
                    yield LLMOutcome("aborted")
                    return
            else:
                failure = self._steer(item)
                if failure is not None:
                    yield failure
                    return
        # R-SCRIPT-7: a fully delivered response ends with its scripted outcome.
        if response.fail is not None:
            fail = response.fail
            yield LLMOutcome(fail.status, fail.message, fail.permanent, fail.retry_after_s)
            return
        if response.final_usage == "default":
            cache_write = len(request.messages)
            yield token_usage(
                TokenCounts(0, cache_write, progress.completes, cache_write + progress.completes)
            )
        elif response.final_usage is not None:
            yield token_usage(response.final_usage.counts())
        yield LLMOutcome("completed")

    def _steer(self, item: _Steer) -> LLMOutcome | None:
        # Failures become outcomes: an LLM never raises into the engine (R-MSG-24).
        if self._session is None:
            return LLMOutcome(
                "failed", "scripted: a steer item needs llm.bind(session)", permanent=True
            )
        try:
            self._session.steer([user_text(item.text)])
        except Exception as exc:
            return LLMOutcome("failed", f"scripted: steer raised: {exc}", permanent=True)
        return None


# --------------------------------------------------------------------------- the environment


class ScriptedEnvironment:
    """Serves the ``result`` of each scripted tool call by ``tool_call_id`` (R-SCRIPT-8).

    It runs no process, so it takes any sandbox (SPEC §25) and keeps it for the session to
    record: there is nothing to confine."""

    def __init__(self, script: ScriptSource) -> None:
        self.script: Script = load_script(script)
        self._results = self.script.tool_results()
        self._names = frozenset(tool.name for tool in self.script.tools)
        self._sandbox = SandboxPolicy()

    @property
    def sandbox(self) -> SandboxPolicy:
        return self._sandbox

    def set_sandbox(self, policy: SandboxPolicy) -> None:
        self._sandbox = policy

    def bind_session(self, *, data_root: Path, own_files: Callable[[], Sequence[Path]]) -> None:
        return None

    @classmethod
    def from_llm(cls, llm: ScriptedLLM) -> ScriptedEnvironment:
        """The environment for the same (already parsed) script as ``llm``."""
        return cls(llm.script)

    async def list_tools(self) -> list[ToolDefinition]:
        return list(self.script.tools)

    def tool_permission(self, name: str) -> Literal["r", "rw"] | None:
        return "rw" if name in self._names else None

    async def aclose(self) -> None:
        return None

    async def execute(
        self, call: OmniMessage, *, signal: AbortSignal, approve: ApproveFn | None
    ) -> AsyncIterator[OmniMessage]:
        payload = call.payload
        if not isinstance(payload, ToolCallPayload):
            raise TypeError(f"execute expects a tool_call message, got {type(payload).__name__}")
        call_id = payload.tool_call_id
        result = self._results.get(call_id) or self._results.get(base_call_id(call_id))
        if result is None:
            result = _ToolResult(chunks=(), status="completed", delay_ms=0, images=())

        aborted = await _pause(result.delay_ms, signal)
        seg = SegmentWriter("tool_call_output", tool_call_id=call_id)
        yield seg.start()
        # Images are never incremental (R-MSG-16): they ride on the last content delta.
        deltas = result.chunks or (("",) if result.images else ())
        for n, chunk in enumerate(deltas):
            if aborted or signal.aborted:
                aborted = True
                break
            last = n == len(deltas) - 1
            yield seg.delta(chunk, images=result.images if last else None)

        # R-TOOL-2/3/4 close-out: a user abort outranks the tool's own status; notes follow the
        # content on their own line; an output is never empty.  The added text goes out as a
        # final delta so the fragments still add up to the output (R-STREAM-2).
        content = seg.body
        status: StopReason = "aborted" if aborted else result.status
        if aborted:
            tail = f"\n{_ABORT_NOTE}" if content else _ABORT_NOTE
        else:
            tail = "" if content else _NO_OUTPUT
        if tail:
            yield seg.delta(tail)
        for msg in seg.stop(status):
            yield msg
