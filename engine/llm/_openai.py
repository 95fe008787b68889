"""``OpenAICompatible``: Chat Completions streaming over httpx (OpenAI, vLLM, llama.cpp, Ollama).

Owns: the mapping of a model context to a Chat Completions request body, and of its SSE chunks
back to partials and complete messages (SPEC §3): text, reasoning (``reasoning_content``,
``reasoning`` or inline ``<think>…</think>``), tool calls accumulated by index, usage, ``[DONE]``.
Does not: send or read HTTP (``_sse.run_sse``), classify errors (``_errors``) or retry.

Decisions:
- Thinking goes to the trace with ``fidelity.reasoning_field`` = ``reasoning_content``,
  ``reasoning`` or ``think_tag`` (where it came from).  It is not sent back by default (OpenAI
  rejects the field; some servers reject it in input); ``send_reasoning=True`` sends thinking
  that came from a field back under that same field, for servers that want it in tool loops.
- A tool call closes when the next call (a new index) starts, when text or reasoning follows it
  or at ``[DONE]``, so the engine can start a call while the model still streams the next one.
  Closing checks the arguments: empty becomes ``{}``; text that is not JSON (a truncated
  arguments string) closes the call ``malformed`` and ends the request ``malformed``.
- Open segments close at ``[DONE]``, not at ``finish_reason``: a stream cut between the two is a
  failed request whose tool calls are not dispatched.  A ``finish_reason`` other than ``stop`` /
  ``tool_calls`` (``length``, ``content_filter``) is recorded as ``fidelity.finish_reason`` on the
  last segment; the request still completes.
- Usage: ``cache_read`` = ``prompt_tokens_details.cached_tokens``, ``cache_write`` = prompt
  tokens minus those, ``output`` = completion tokens (reasoning included), ``total`` = the sum.
  ``token_usage`` is yielded only after ``[DONE]`` (R-RUN-16), and only when the server sent one.
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
from eventstore.partials import SegmentKind, SegmentWriter

from ._errors import excerpt, stream_error_outcome
from ._http import HttpProvider
from ._ids import ToolCallIds, strip_suffix
from ._sse import (
    DONE,
    ServerSentEvent,
    arguments_problem,
    stamp,
)

__all__ = ["OpenAICompatible", "OpenAIStreamParser", "openai_body", "openai_messages"]

OPENAI_BASE_URL: Final = "https://api.openai.com/v1"

_NORMAL_FINISH: Final = frozenset({"stop", "tool_calls", "function_call", "eos"})
_REASONING_FIELDS: Final = frozenset({"reasoning_content", "reasoning"})


# --------------------------------------------------------------------------- wire chunks


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None


class _StreamError(msgspec.Struct):
    message: str | None = None
    type: str | None = None
    code: str | int | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: _StreamError | str | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


class _Malformed(Exception):
    pass


# --------------------------------------------------------------------------- <think> tags


class _ThinkTags:
    """Splits content into thinking and text around a leading ``<think>…</think>`` block.

    Only a block that opens the content (after whitespace) counts, so a model that mentions the
    tag later in its answer is not misread.  Tags may be split across deltas.
    """

    OPEN: Final = "<think>"
    CLOSE: Final = "</think>"
    __slots__ = ("_buf", "_state")

    _START, _INSIDE, _AFTER, _PLAIN = range(4)

    def __init__(self) -> None:
        self._state = self._START
        self._buf = ""

    def feed(self, text: str) -> list[tuple[bool, str]]:
        state = self._state
        if state == self._PLAIN:
            return [(False, text)]
        if state == self._INSIDE:
            return self._inside(text)
        if state == self._AFTER:
            rest = text.lstrip()
            if not rest:
                return []
            self._state = self._PLAIN
            return [(False, rest)]
        self._buf += text
        head = self._buf.lstrip()
        if not head:
            return []
        if head.startswith(self.OPEN):
            self._state = self._INSIDE
            self._buf = ""
            return self._inside(head[len(self.OPEN) :])
        if self.OPEN.startswith(head):
            return []
        self._state = self._PLAIN
        out, self._buf = self._buf, ""
        return [(False, out)]

    def _inside(self, text: str) -> list[tuple[bool, str]]:
        data = self._buf + text
        self._buf = ""
        at = data.find(self.CLOSE)
        if at >= 0:
            out: list[tuple[bool, str]] = [(True, data[:at])] if at else []
            self._state = self._AFTER
            rest = data[at + len(self.CLOSE) :]
            return out + (self.feed(rest) if rest else [])
        keep = 0
        if "<" in data[-len(self.CLOSE) :]:
            for k in range(min(len(self.CLOSE) - 1, len(data)), 0, -1):
                if data.endswith(self.CLOSE[:k]):
                    keep = k
                    break
        if keep:
            self._buf = data[-keep:]
            data = data[:-keep]
        return [(True, data)] if data else []

    def flush(self) -> list[tuple[bool, str]]:
        buf, self._buf = self._buf, ""
        if not buf:
            return []
        return [(self._state == self._INSIDE, buf)]


# --------------------------------------------------------------------------- the parser


class OpenAIStreamParser:
    """Chat Completions chunks in, OmniMessages out (``_sse.EventParser``)."""

    terminator = "[DONE]"

    def __init__(self, *, provider: str, ids: ToolCallIds, think_tags: bool = True) -> None:
        self.out: list[OmniMessage] = []
        self.provider = provider
        self._ids = ids
        self._seg: SegmentWriter | None = None
        self._call: SegmentWriter | None = None
        self._call_index = -1
        self._call_pid: str | None = None
        self._closed: dict[int, str | None] = {}
        self._next_index = 0
        self._usage: _Usage | None = None
        self._finish: str | None = None
        self._tags = _ThinkTags() if think_tags else None

    # ----------------------------------------------------------------- EventParser

    def feed(self, event: ServerSentEvent) -> LLMOutcome | bool | None:
        data = event.data
        if data[:1] == "[" and data.strip() == "[DONE]":
            return DONE
        try:
            chunk = _decode_chunk(data)
        except msgspec.DecodeError as exc:  # ValidationError (a wrong shape) included
            if event.event == "error":
                return self._error(None, data)
            if isinstance(exc, msgspec.ValidationError):
                return self._fail(f"unexpected chunk shape ({exc}): {excerpt(data)}")
            return self._fail(f"invalid JSON: {excerpt(data)}")
        if chunk.error is not None or event.event == "error":
            return self._error(chunk.error, data)
        if chunk.usage is not None:
            self._usage = chunk.usage
        if not chunk.choices:
            return None
        try:
            for choice in chunk.choices:
                if choice.index != 0:
                    continue  # n > 1 is never requested; ignore stray choices
                delta = choice.delta
                if delta is not None:
                    self._delta(delta)
                if choice.finish_reason:
                    self._finish = choice.finish_reason
        except _Malformed as exc:
            self.close("malformed")
            return LLMOutcome("malformed", f"{self.provider}: {exc}")
        return None

    def close(self, status: StopReason) -> None:
        if self._seg is not None:
            self.out.extend(self._seg.stop(status))
            self._seg = None
        if self._call is not None:
            self.out.extend(self._call.stop(status))
            self._call = None

    def finish(self) -> LLMOutcome:
        extra = None
        if self._finish is not None and self._finish not in _NORMAL_FINISH:
            extra = {"finish_reason": self._finish}
        try:
            if self._tags is not None:
                for is_thinking, piece in self._tags.flush():
                    self._piece(is_thinking, piece, "think_tag")
            if self._seg is not None:
                self.out.extend(self._seg.stop("completed", fidelity=extra))
                self._seg = None
            if self._call is not None:
                self._close_call(fidelity=extra)
        except _Malformed as exc:
            self.close("malformed")
            return LLMOutcome("malformed", f"{self.provider}: {exc}")
        usage = self._usage
        if usage is not None:
            prompt = usage.prompt_tokens or 0
            details = usage.prompt_tokens_details
            cached = min(prompt, (details.cached_tokens or 0) if details else 0)
            output = usage.completion_tokens or 0
            uncached = prompt - cached
            self.out.append(token_usage(TokenCounts(cached, uncached, output, prompt + output)))
        return LLMOutcome("completed")

    # ----------------------------------------------------------------- deltas

    def _fail(self, detail: str) -> LLMOutcome:
        self.close("malformed")
        return LLMOutcome("malformed", f"{self.provider}: malformed stream: {detail}")

    def _error(self, error: _StreamError | str | None, data: str) -> LLMOutcome:
        if isinstance(error, _StreamError):
            code = error.code if error.code is not None else error.type
            kind = str(code) if code is not None else None
            message = error.message
        else:
            kind, message = None, error if isinstance(error, str) else excerpt(data)
        outcome = stream_error_outcome(self.provider, kind, message, secret=None)
        self.close(outcome.status)
        return outcome

    def _delta(self, delta: _Delta) -> None:
        # One field per delta: servers in transition send the same text as both names.
        if delta.reasoning_content:
            self._piece(True, delta.reasoning_content, "reasoning_content")
        elif delta.reasoning:
            self._piece(True, delta.reasoning, "reasoning")
        if delta.content:
            if self._tags is None:
                self._piece(False, delta.content, "")
            else:
                for is_thinking, piece in self._tags.feed(delta.content):
                    self._piece(is_thinking, piece, "think_tag")
        if delta.tool_calls:
            for tc in delta.tool_calls:
                self._tool(tc)

    def _piece(self, is_thinking: bool, piece: str, field: str) -> None:
        if not piece:
            return
        if self._call is not None:
            self._close_call()
        kind: SegmentKind = "thinking" if is_thinking else "text"
        seg = self._seg
        if seg is None or seg.kind != kind:
            if seg is not None:
                self.out.extend(seg.stop("completed"))
            fidelity = {"reasoning_field": field} if is_thinking else None
            seg = self._seg = SegmentWriter(kind, fidelity=fidelity, clock=stamp)
            self.out.append(seg.start())
        self.out.append(seg.delta(piece))

    def _tool(self, tc: _ToolCallDelta) -> None:
        fn = tc.function
        name = fn.name if fn is not None and fn.name else ""
        arguments = fn.arguments if fn is not None and fn.arguments else ""
        call = self._call
        index = tc.index
        if index is None:
            same = call is not None and (tc.id is None or tc.id == self._call_pid)
            index = self._call_index if same else self._next_index
        else:
            same = (
                call is not None
                and index == self._call_index
                and (tc.id is None or self._call_pid is None or tc.id == self._call_pid)
            )
        if not same:
            if index in self._closed and (tc.id is None or tc.id == self._closed[index]):
                raise _Malformed(
                    f"malformed stream: tool call fragment for index {index} after the call ended"
                )
            if call is not None:
                self._close_call()
            if self._seg is not None:
                self.out.extend(self._seg.stop("completed"))
                self._seg = None
            provider_id = tc.id or name or f"call_{index}"
            call = self._call = SegmentWriter(
                "tool_call", name=name, tool_call_id=self._ids.allocate(provider_id), clock=stamp
            )
            self._call_index = index
            self._call_pid = tc.id
            self._next_index = max(self._next_index, index + 1)
            self.out.append(call.start())
            if arguments:
                self.out.append(call.delta(arguments))
            return
        assert call is not None
        if tc.id is not None and self._call_pid is None:
            self._call_pid = tc.id
        learned = name if name and not call.name else ""
        if learned:
            call.name = learned
        if arguments or learned:
            self.out.append(call.delta(arguments, name=learned))

    def _close_call(self, *, fidelity: dict[str, Any] | None = None) -> None:
        call = self._call
        assert call is not None
        self._call = None
        self._closed[self._call_index] = self._call_pid
        if not call.body.strip():
            self.out.append(call.delta("{}"))
        problem = arguments_problem(call.body)
        if problem is None and call.name:
            self.out.extend(call.stop("completed", fidelity=fidelity))
            return
        self.out.extend(call.stop("malformed", fidelity=fidelity))
        if not call.name:
            raise _Malformed(
                f"malformed stream: tool call {call.tool_call_id} arrived without a function name"
            )
        raise _Malformed(
            f"tool call {call.name} ({call.tool_call_id}) arguments are not valid JSON "
            f"({problem}): {excerpt(call.body)}"
        )


# --------------------------------------------------------------------------- request body


def _image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_def(tool: ToolDefinition) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "description": tool.description}
    function["parameters"] = tool.parameters or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


class _Builder:
    """Accumulates OpenAI messages: consecutive user content becomes one user message,
    consecutive assistant output one assistant message, tool outputs one ``tool`` message each."""

    def __init__(self, *, vision: bool) -> None:
        self.messages: list[dict[str, Any]] = []
        self._vision = vision
        self._user: list[dict[str, Any]] = []
        self._texts: list[str] = []
        self._calls: list[dict[str, Any]] = []
        self._reasoning: dict[str, list[str]] = {}
        self._tool_images: list[dict[str, Any]] = []

    def user(self, part: dict[str, Any]) -> None:
        self.flush_assistant()
        self.flush_tool_images()
        self._user.append(part)

    def assistant_text(self, text: str) -> None:
        self.flush_user()
        self._texts.append(text)

    def reasoning(self, field: str, text: str) -> None:
        self.flush_user()
        self._reasoning.setdefault(field, []).append(text)

    def call(self, p: ToolCallPayload) -> None:
        self.flush_user()
        self._calls.append(
            {
                "id": strip_suffix(p.tool_call_id),
                "type": "function",
                "function": {"name": p.name, "arguments": p.arguments},
            }
        )

    def output(self, p: ToolCallOutputPayload) -> None:
        if self._user:  # tool images still pending stay pending: tool messages stay contiguous
            self.flush_user()
        self.flush_assistant()
        cid = strip_suffix(p.tool_call_id)
        self.messages.append({"role": "tool", "tool_call_id": cid, "content": p.output})
        if p.images:
            # Tool messages carry text only: images follow in one user message after the run
            # of tool messages, which must stay contiguous after their assistant message.
            if self._vision:
                self._tool_images.append(
                    {"type": "text", "text": f"[images returned by tool call {cid}]"}
                )
                self._tool_images.extend(_image_part(url) for url in p.images)
            else:
                note = f"[tool call {cid} returned {len(p.images)} image(s); not sent: no vision]"
                self._tool_images.append({"type": "text", "text": note})

    def flush_tool_images(self) -> None:
        if self._tool_images:
            parts, self._tool_images = self._tool_images, []
            self._user.extend(parts)

    def flush_user(self) -> None:
        self.flush_tool_images()
        if not self._user:
            return
        parts, self._user = self._user, []
        if all(part["type"] == "text" for part in parts):
            content: Any = "\n\n".join(part["text"] for part in parts)
        else:
            content = parts
        self.messages.append({"role": "user", "content": content})

    def flush_assistant(self) -> None:
        if not (self._texts or self._calls or self._reasoning):
            return
        text = "".join(self._texts)
        msg: dict[str, Any] = {"role": "assistant", "content": text or None}
        for field, pieces in self._reasoning.items():
            msg[field] = "".join(pieces)
        if self._calls:
            msg["tool_calls"] = self._calls
        self._texts, self._calls, self._reasoning = [], [], {}
        if text or "tool_calls" in msg:
            self.messages.append(msg)

    def finish(self) -> list[dict[str, Any]]:
        self.flush_assistant()
        self.flush_user()
        return self.messages


def openai_messages(
    system_prompt: str,
    messages: list[OmniMessage],
    *,
    vision: bool = True,
    send_reasoning: bool = False,
) -> list[dict[str, Any]]:
    """The ``messages`` array of a Chat Completions request for a model context."""
    out = _Builder(vision=vision)
    if system_prompt:
        out.messages.append({"role": "system", "content": system_prompt})
    for msg in messages:
        p = msg.payload
        if isinstance(p, TextPayload):
            if p.role == "user":
                out.user({"type": "text", "text": p.text})
            else:
                out.assistant_text(p.text)
        elif isinstance(p, ImageUrlPayload):
            out.user(_image_part(p.image_url))
        elif isinstance(p, InlineDataPayload):
            if p.mime_type.startswith("image/") and p.role == "user":
                out.user(_image_part(f"data:{p.mime_type};base64,{p.data}"))
            elif p.role == "user":
                out.user({"type": "text", "text": f"[attached {p.mime_type} data not sent]"})
        elif isinstance(p, ThinkingPayload):
            field = (p.fidelity or {}).get("reasoning_field")
            if send_reasoning and field in _REASONING_FIELDS:
                out.reasoning(str(field), p.thinking)
        elif isinstance(p, ToolCallPayload):
            if (p.stop_reason or "completed") == "completed":
                out.call(p)
        elif isinstance(p, ToolCallOutputPayload):
            out.output(p)
        # inline_thinking, events and unknown payloads have no Chat Completions form.
    return out.finish()


def openai_body(
    request: LLMRequest,
    *,
    model: str,
    vision: bool = True,
    send_reasoning: bool = False,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body sent for ``request`` (exposed for tests and debugging)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": openai_messages(
            request.system_prompt,
            request.messages,
            vision=vision,
            send_reasoning=send_reasoning,
        ),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [_tool_def(tool) for tool in request.tools]
    if request.thinking_level is not None:
        body["reasoning_effort"] = request.thinking_level
    if extra_body:
        body.update(extra_body)
    return body


# --------------------------------------------------------------------------- the LLM


class OpenAICompatible(HttpProvider):
    """An ``LLM`` speaking Chat Completions with ``stream: true`` (API.md).

    ``api_key`` is sent as ``Authorization: Bearer …`` when set; when omitted and ``base_url`` is
    OpenAI's own, ``OPENAI_API_KEY`` is used (a local server gets no key it was not given).  The
    key never appears in a repr, an outcome message or a trace.  Without ``client`` the adapter
    opens one shared ``httpx.AsyncClient`` on first use (HTTP/2 when ``h2`` is installed) and
    closes it in ``aclose()`` / ``async with``.  ``thinking_level`` is sent as
    ``reasoning_effort`` verbatim (``none``, ``minimal``, ``low``, ``medium``, ``high``).
    """

    def __init__(
        self,
        model: str,
        base_url: str = OPENAI_BASE_URL,
        api_key: str | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        context_window: int | None = None,
        timeout: httpx.Timeout | float | None = None,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        vision: bool = True,
        send_reasoning: bool = False,
        think_tags: bool = True,
        provider: str = "openai",
    ) -> None:
        if api_key is None and base_url.rstrip("/") == OPENAI_BASE_URL:
            api_key = os.environ.get("OPENAI_API_KEY") or None
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
        self.send_reasoning = send_reasoning
        self.think_tags = think_tags

    @property
    def _url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _key_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._api_key}"}

    def _parser(self) -> OpenAIStreamParser:
        return OpenAIStreamParser(provider=self.provider, ids=self._ids, think_tags=self.think_tags)

    def body(self, request: LLMRequest) -> dict[str, Any]:
        """The JSON body this adapter sends for ``request``."""
        return openai_body(
            request,
            model=self.model_id,
            vision=self.vision,
            send_reasoning=self.send_reasoning,
            extra_body=self.extra_body,
        )
