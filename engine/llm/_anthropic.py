"""``Anthropic``: the Messages API, streaming, over httpx.

Owns: the mapping of a model context to a Messages request body (system, content blocks, tool
use and results, thinking sent back with its signature, prompt-cache breakpoints, thinking
budgets), and of the event stream back to partials and complete messages (SPEC §3).  Does not:
send or read HTTP (``_sse.run_sse``), classify errors (``_errors``) or retry.

Decisions:
- ``thinking_delta`` text becomes a ``thinking`` message whose ``fidelity.signature`` is the
  concatenated ``signature_delta`` text, verbatim; it is sent back as
  ``{"type":"thinking","thinking":…,"signature":…}`` with both strings unchanged.  A
  ``redacted_thinking`` block becomes a ``thinking`` message with empty text and
  ``fidelity.redacted_thinking`` = its ``data``, sent back as that block.  Thinking without a
  signature (another provider's, or an interrupted one) is not sent: the API would reject it.
- A block is settled (its ``stop`` and complete message emitted) when the next block starts or at
  ``message_delta``, which carries the stop reason: a ``stop_reason`` other than ``end_turn``,
  ``tool_use`` or ``stop_sequence`` (``max_tokens``, ``refusal``, …) is recorded as
  ``fidelity.stop_reason`` on the last block and the request still completes.  A ``tool_use``
  cut by ``max_tokens`` has arguments that are not JSON: the call closes ``malformed`` and so does
  the request.
- Unknown event types and unknown content-block / delta types are skipped (Anthropic adds them
  over time; server-tool blocks have no OmniMessage form); a known event with a wrong shape is
  ``malformed``.
- Usage: ``cache_read`` = ``cache_read_input_tokens``; ``cache_write`` = ``input_tokens`` +
  ``cache_creation_input_tokens`` (all uncached input); ``output`` = ``output_tokens``; counts
  from ``message_start`` are overridden by the cumulative ones of ``message_delta``.
- Thinking levels → ``budget_tokens``: ``minimal`` 1024, ``low`` 2048, ``medium`` 8192, ``high``
  16384; ``none``/``off`` send no thinking.  The budget is added to ``max_tokens`` so the answer
  keeps its own room (the API requires ``budget_tokens < max_tokens``).  Another level is a
  permanent ``failed`` outcome.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

import httpx
import msgspec

from engine._protocols import LLMOutcome, LLMRequest
from eventstore import (
    ImageUrlPayload,
    InlineDataPayload,
    OmniMessage,
    StopReason,
    TextPayload,
    ThinkingPayload,
    TokenCounts,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolDefinition,
)
from eventstore.builders import token_usage
from eventstore.partials import SegmentWriter

from ._errors import excerpt, stream_error_outcome
from ._http import HttpProvider
from ._ids import ToolCallIds, strip_suffix
from ._sse import (
    DONE,
    ServerSentEvent,
    arguments_problem,
    stamp,
)

__all__ = [
    "THINKING_BUDGETS",
    "Anthropic",
    "AnthropicStreamParser",
    "anthropic_body",
    "anthropic_messages",
]

ANTHROPIC_BASE_URL: Final = "https://api.anthropic.com"
ANTHROPIC_VERSION: Final = "2023-06-01"
DEFAULT_MAX_TOKENS: Final = 8192

THINKING_BUDGETS: Final[Mapping[str, int | None]] = {
    "none": None,
    "off": None,
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
}

_NORMAL_STOPS: Final = frozenset({"end_turn", "tool_use", "stop_sequence"})
_KNOWN_EVENTS: Final = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
    }
)
_KNOWN_BLOCKS: Final = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})
_KNOWN_DELTAS: Final = frozenset(
    {"text_delta", "thinking_delta", "signature_delta", "input_json_delta"}
)
_CACHE: Final = {"type": "ephemeral"}
_CACHEABLE: Final = frozenset({"text", "image", "document", "tool_result", "tool_use"})


# --------------------------------------------------------------------------- wire events


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _Message(msgspec.Struct):
    usage: _Usage | None = None


class _TextBlock(msgspec.Struct, tag_field="type", tag="text"):
    text: str = ""


class _ThinkingBlock(msgspec.Struct, tag_field="type", tag="thinking"):
    thinking: str = ""
    signature: str = ""


class _RedactedBlock(msgspec.Struct, tag_field="type", tag="redacted_thinking"):
    data: str


class _ToolUseBlock(msgspec.Struct, tag_field="type", tag="tool_use"):
    id: str
    name: str
    input: Any = None


class _TextDelta(msgspec.Struct, tag_field="type", tag="text_delta"):
    text: str


class _ThinkingDelta(msgspec.Struct, tag_field="type", tag="thinking_delta"):
    thinking: str


class _SignatureDelta(msgspec.Struct, tag_field="type", tag="signature_delta"):
    signature: str


class _JsonDelta(msgspec.Struct, tag_field="type", tag="input_json_delta"):
    partial_json: str


class _MessageStart(msgspec.Struct, tag_field="type", tag="message_start"):
    message: _Message


class _BlockStart(msgspec.Struct, tag_field="type", tag="content_block_start"):
    index: int
    content_block: _TextBlock | _ThinkingBlock | _RedactedBlock | _ToolUseBlock


class _BlockDelta(msgspec.Struct, tag_field="type", tag="content_block_delta"):
    index: int
    delta: _TextDelta | _ThinkingDelta | _SignatureDelta | _JsonDelta


class _BlockStop(msgspec.Struct, tag_field="type", tag="content_block_stop"):
    index: int


class _StopInfo(msgspec.Struct):
    stop_reason: str | None = None


class _MessageDelta(msgspec.Struct, tag_field="type", tag="message_delta"):
    delta: _StopInfo | None = None
    usage: _Usage | None = None


class _MessageStop(msgspec.Struct, tag_field="type", tag="message_stop"):
    pass


class _Ping(msgspec.Struct, tag_field="type", tag="ping"):
    pass


class _ErrorBody(msgspec.Struct):
    type: str | None = None
    message: str | None = None


class _Error(msgspec.Struct, tag_field="type", tag="error"):
    error: _ErrorBody | None = None


_Event = (
    _MessageStart
    | _BlockStart
    | _BlockDelta
    | _BlockStop
    | _MessageDelta
    | _MessageStop
    | _Ping
    | _Error
)
_decode_event = msgspec.json.Decoder(_Event).decode


class _Malformed(Exception):
    pass


def _skippable(data: str) -> tuple[bool, int | None]:
    """After a shape error: is this an event (or block, or delta) type we do not know?

    Returns ``(skip, index_to_ignore)``; ``index_to_ignore`` is set for an unknown block type,
    whose later deltas and stop are skipped too.
    """
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return False, None
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        return False, None
    kind = raw["type"]
    if kind not in _KNOWN_EVENTS:
        return True, None
    index = raw.get("index")
    if not isinstance(index, int):
        return False, None
    if kind == "content_block_start":
        tag = _type_of(raw.get("content_block"))
        if tag is not None and tag not in _KNOWN_BLOCKS:
            return True, index
    if kind == "content_block_delta":
        tag = _type_of(raw.get("delta"))
        if tag is not None and tag not in _KNOWN_DELTAS:
            return True, None
    return False, None


def _type_of(value: Any) -> str | None:
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return str(value["type"])
    return None


# --------------------------------------------------------------------------- the parser


class AnthropicStreamParser:
    """Messages stream events in, OmniMessages out (``_sse.EventParser``)."""

    terminator = "message_stop"

    def __init__(self, *, provider: str, ids: ToolCallIds) -> None:
        self.out: list[OmniMessage] = []
        self.provider = provider
        self._ids = ids
        self._block: SegmentWriter | None = None
        self._index = -1
        self._signature: list[str] = []
        self._initial_input: Any = None
        self._held: SegmentWriter | None = None
        self._ignored: set[int] = set()
        self._usage = _Usage()
        self._stop_reason: str | None = None

    # ----------------------------------------------------------------- EventParser

    def feed(self, event: ServerSentEvent) -> LLMOutcome | bool | None:
        data = event.data
        try:
            ev = _decode_event(data)
        except msgspec.DecodeError as exc:
            if isinstance(exc, msgspec.ValidationError):
                skip, ignore = _skippable(data)
                if skip:
                    if ignore is not None:
                        self._settle("completed")
                        self._ignored.add(ignore)
                    return None
                if event.event == "error":
                    return self._error(None, data)
                return self._fail(f"unexpected event shape ({exc}): {excerpt(data)}")
            if event.event == "error":
                return self._error(None, data)
            return self._fail(f"invalid JSON: {excerpt(data)}")
        try:
            return self._event(ev)
        except _Malformed as exc:
            self.close("malformed")
            return LLMOutcome("malformed", f"{self.provider}: {exc}")

    def close(self, status: StopReason) -> None:
        if self._held is not None:
            self.out.extend(self._held.stop(status))
            self._held = None
        if self._block is not None:
            self.out.extend(self._block.stop(status))
            self._block = None

    def finish(self) -> LLMOutcome:
        try:
            if self._block is not None:
                self._stop_block()
            self._settle("completed", fidelity=self._stop_fidelity())
        except _Malformed as exc:
            self.close("malformed")
            return LLMOutcome("malformed", f"{self.provider}: {exc}")
        u = self._usage
        cache_read = u.cache_read_input_tokens or 0
        uncached = (u.input_tokens or 0) + (u.cache_creation_input_tokens or 0)
        output = u.output_tokens or 0
        total = cache_read + uncached + output
        self.out.append(token_usage(TokenCounts(cache_read, uncached, output, total)))
        return LLMOutcome("completed")

    # ----------------------------------------------------------------- events

    def _event(self, ev: Any) -> LLMOutcome | bool | None:
        if isinstance(ev, _BlockDelta):
            self._delta(ev)
        elif isinstance(ev, _BlockStart):
            self._start(ev)
        elif isinstance(ev, _BlockStop):
            if ev.index in self._ignored:
                return None
            if self._block is None or ev.index != self._index:
                raise _Malformed(
                    f"malformed stream: content_block_stop for block {ev.index}, which is not open"
                )
            self._stop_block()
        elif isinstance(ev, _MessageStart):
            if ev.message.usage is not None:
                self._merge_usage(ev.message.usage)
        elif isinstance(ev, _MessageDelta):
            if ev.usage is not None:
                self._merge_usage(ev.usage)
            if ev.delta is not None and ev.delta.stop_reason is not None:
                self._stop_reason = ev.delta.stop_reason
            self._settle("completed", fidelity=self._stop_fidelity())
        elif isinstance(ev, _MessageStop):
            return DONE
        elif isinstance(ev, _Error):
            body = ev.error or _ErrorBody()
            outcome = stream_error_outcome(self.provider, body.type, body.message, secret=None)
            self.close(outcome.status)
            return outcome
        return None  # ping

    def _fail(self, detail: str) -> LLMOutcome:
        self.close("malformed")
        return LLMOutcome("malformed", f"{self.provider}: malformed stream: {detail}")

    def _error(self, kind: str | None, data: str) -> LLMOutcome:
        outcome = stream_error_outcome(self.provider, kind, excerpt(data), secret=None)
        self.close(outcome.status)
        return outcome

    def _merge_usage(self, u: _Usage) -> None:
        cur = self._usage
        self._usage = _Usage(
            input_tokens=u.input_tokens if u.input_tokens is not None else cur.input_tokens,
            output_tokens=u.output_tokens if u.output_tokens is not None else cur.output_tokens,
            cache_creation_input_tokens=(
                u.cache_creation_input_tokens
                if u.cache_creation_input_tokens is not None
                else cur.cache_creation_input_tokens
            ),
            cache_read_input_tokens=(
                u.cache_read_input_tokens
                if u.cache_read_input_tokens is not None
                else cur.cache_read_input_tokens
            ),
        )

    def _stop_fidelity(self) -> dict[str, Any] | None:
        reason = self._stop_reason
        if reason is None or reason in _NORMAL_STOPS:
            return None
        return {"stop_reason": reason}

    def _settle(self, stop: StopReason, *, fidelity: dict[str, Any] | None = None) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self.out.extend(held.stop(stop, fidelity=fidelity))

    def _start(self, ev: _BlockStart) -> None:
        self._settle("completed")
        if self._block is not None:
            self._stop_block()  # a block that never got its stop: settle it before the next
            self._settle("completed")
        block = ev.content_block
        self._index = ev.index
        self._signature = []
        self._initial_input = None
        out = self.out
        if isinstance(block, _TextBlock):
            seg = SegmentWriter("text", clock=stamp)
            out.append(seg.start())
            if block.text:
                out.append(seg.delta(block.text))
        elif isinstance(block, _ThinkingBlock):
            seg = SegmentWriter("thinking", clock=stamp)
            out.append(seg.start())
            if block.thinking:
                out.append(seg.delta(block.thinking))
            if block.signature:
                self._signature.append(block.signature)
        elif isinstance(block, _RedactedBlock):
            seg = SegmentWriter("thinking", fidelity={"redacted_thinking": block.data}, clock=stamp)
            out.append(seg.start())
        else:
            seg = SegmentWriter(
                "tool_call", name=block.name, tool_call_id=self._ids.allocate(block.id), clock=stamp
            )
            out.append(seg.start())
            self._initial_input = block.input
        self._block = seg

    def _delta(self, ev: _BlockDelta) -> None:
        seg = self._block
        if seg is None or ev.index != self._index:
            if ev.index in self._ignored:
                return
            raise _Malformed(
                f"malformed stream: content_block_delta for block {ev.index}, which is not open"
            )
        delta = ev.delta
        if isinstance(delta, _TextDelta):
            expected = "text"
            piece = delta.text
        elif isinstance(delta, _ThinkingDelta):
            expected = "thinking"
            piece = delta.thinking
        elif isinstance(delta, _SignatureDelta):
            if seg.kind != "thinking":
                raise _Malformed(f"malformed stream: signature_delta in a {seg.kind} block")
            self._signature.append(delta.signature)
            return
        else:
            expected = "tool_call"
            piece = delta.partial_json
        if seg.kind != expected:
            raise _Malformed(f"malformed stream: {expected} delta in a {seg.kind} block")
        if piece:
            self.out.append(seg.delta(piece))

    def _stop_block(self) -> None:
        seg = self._block
        assert seg is not None
        self._block = None
        if seg.kind == "thinking" and self._signature:
            seg.fidelity = {**(seg.fidelity or {}), "signature": "".join(self._signature)}
        elif seg.kind == "tool_call":
            if not seg.has_deltas:
                initial = self._initial_input if self._initial_input is not None else {}
                self.out.append(seg.delta(msgspec.json.encode(initial).decode()))
            problem = arguments_problem(seg.body)
            if problem is not None:
                self.out.extend(seg.stop("malformed"))
                raise _Malformed(
                    f"tool call {seg.name} ({seg.tool_call_id}) arguments are not valid JSON "
                    f"({problem}): {excerpt(seg.body)}"
                )
        self._held = seg


# --------------------------------------------------------------------------- request body


def _image_source(url: str) -> dict[str, Any]:
    if url.startswith("data:") and ";base64," in url:
        head, data = url[5:].split(";base64,", 1)
        return {"type": "base64", "media_type": head, "data": data}
    return {"type": "url", "url": url}


def _tool_def(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.parameters or {"type": "object", "properties": {}},
    }


def _tool_input(arguments: str) -> Any:
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _block_of(msg: OmniMessage) -> tuple[str, dict[str, Any]] | None:
    p = msg.payload
    if isinstance(p, TextPayload):
        if not p.text.strip():
            return None  # the API rejects blank text blocks
        return p.role, {"type": "text", "text": p.text}
    if isinstance(p, ImageUrlPayload):
        return "user", {"type": "image", "source": _image_source(p.image_url)}
    if isinstance(p, InlineDataPayload):
        source = {"type": "base64", "media_type": p.mime_type, "data": p.data}
        if p.mime_type.startswith("image/"):
            return p.role, {"type": "image", "source": source}
        if p.mime_type == "application/pdf":
            return p.role, {"type": "document", "source": source}
        return p.role, {"type": "text", "text": f"[attached {p.mime_type} data not sent]"}
    if isinstance(p, ThinkingPayload):
        fidelity = p.fidelity or {}
        redacted = fidelity.get("redacted_thinking")
        if isinstance(redacted, str):
            return "assistant", {"type": "redacted_thinking", "data": redacted}
        signature = fidelity.get("signature")
        if isinstance(signature, str) and signature:
            block = {"type": "thinking", "thinking": p.thinking, "signature": signature}
            return "assistant", block
        return None
    if isinstance(p, ToolCallPayload):
        if (p.stop_reason or "completed") != "completed":
            return None
        return "assistant", {
            "type": "tool_use",
            "id": strip_suffix(p.tool_call_id),
            "name": p.name,
            "input": _tool_input(p.arguments),
        }
    if isinstance(p, ToolCallOutputPayload):
        content: Any = p.output
        if p.images:
            content = [{"type": "text", "text": p.output}] if p.output else []
            content.extend({"type": "image", "source": _image_source(u)} for u in p.images)
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": strip_suffix(p.tool_call_id),
            "content": content,
        }
        if (p.stop_reason or "completed") != "completed":
            result["is_error"] = True
        return "user", result
    return None


def anthropic_messages(
    messages: list[OmniMessage], *, prompt_cache: bool = True
) -> list[dict[str, Any]]:
    """The ``messages`` array: consecutive blocks of one role merged into one message, tool
    results first in their user message (the API requires it)."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        found = _block_of(msg)
        if found is None:
            continue
        role, block = found
        if out and out[-1]["role"] == role:
            out[-1]["content"].append(block)
        else:
            out.append({"role": role, "content": [block]})
    for message in out:
        if message["role"] == "user":
            blocks = message["content"]
            results = [b for b in blocks if b["type"] == "tool_result"]
            if results and len(results) != len(blocks):
                message["content"] = results + [b for b in blocks if b["type"] != "tool_result"]
    if prompt_cache and out:
        last = out[-1]["content"][-1]
        if last["type"] in _CACHEABLE:
            out[-1]["content"][-1] = {**last, "cache_control": _CACHE}
    return out


def anthropic_body(
    request: LLMRequest,
    *,
    model: str,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    prompt_cache: bool = True,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body sent for ``request``.  Raises ``ValueError`` for an unknown thinking
    level (the adapter reports it as a permanent ``failed`` outcome)."""
    budget: int | None = None
    level = request.thinking_level
    if level is not None:
        if level not in THINKING_BUDGETS:
            known = ", ".join(THINKING_BUDGETS)
            raise ValueError(f"unknown thinking level {level!r} (known: {known})")
        budget = THINKING_BUDGETS[level]
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens + (budget or 0),
        "messages": anthropic_messages(request.messages, prompt_cache=prompt_cache),
        "stream": True,
    }
    if request.system_prompt:
        if prompt_cache:
            body["system"] = [
                {"type": "text", "text": request.system_prompt, "cache_control": _CACHE}
            ]
        else:
            body["system"] = request.system_prompt
    if request.tools:
        body["tools"] = [_tool_def(tool) for tool in request.tools]
    if budget is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if extra_body:
        body.update(extra_body)
    return body


# --------------------------------------------------------------------------- the LLM


class Anthropic(HttpProvider):
    """An ``LLM`` speaking the Messages API with ``stream: true`` (API.md).

    ``api_key`` goes in ``x-api-key``; when omitted and ``base_url`` is Anthropic's own,
    ``ANTHROPIC_API_KEY`` is used.  The key never appears in a repr, an outcome message or a
    trace.  ``prompt_cache`` puts cache breakpoints on the system prompt and on the last block of
    the request, so a tool loop re-reads its prefix from the cache.  Client handling as in
    ``OpenAICompatible``.
    """

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        *,
        base_url: str = ANTHROPIC_BASE_URL,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        client: httpx.AsyncClient | None = None,
        context_window: int | None = None,
        timeout: httpx.Timeout | float | None = None,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        prompt_cache: bool = True,
        vision: bool = True,
        provider: str = "anthropic",
    ) -> None:
        if api_key is None and base_url.rstrip("/") == ANTHROPIC_BASE_URL:
            api_key = os.environ.get("ANTHROPIC_API_KEY") or None
        super().__init__(
            model=model,
            base_url=base_url,
            api_key=api_key,
            client=client,
            context_window=context_window,
            timeout=timeout,
            extra_body=extra_body,
            headers=headers,
            vision=vision,
            provider=provider,
        )
        self.max_tokens = max_tokens
        self.prompt_cache = prompt_cache

    @property
    def url(self) -> str:
        base = self.base_url
        return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"

    @property
    def _url(self) -> str:
        return self.url

    def _protocol_headers(self) -> dict[str, str]:
        return {"anthropic-version": ANTHROPIC_VERSION}

    def _key_headers(self) -> dict[str, str]:
        return {"x-api-key": self._api_key or ""}

    def _parser(self) -> AnthropicStreamParser:
        return AnthropicStreamParser(provider=self.provider, ids=self._ids)

    def body(self, request: LLMRequest) -> dict[str, Any]:
        """The JSON body this adapter sends for ``request``."""
        return anthropic_body(
            request,
            model=self.model_id,
            max_tokens=self.max_tokens,
            prompt_cache=self.prompt_cache,
            extra_body=self.extra_body,
        )
