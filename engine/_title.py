"""Session titles: one out-of-band request, never recorded (SPEC §12).

Owns: capturing the title material (R-TITLE-2), its sanitizing and the title request.  Does
not: touch history, the trace or the counters (R-TITLE-1).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from contextlib import aclosing

from eventstore import OmniMessage, TextPayload, TokenCounts, TokenUsagePayload
from eventstore.builders import user_text
from projections import markers as mk

from ._protocols import LLM, LLMOutcome, LLMRequest
from ._signal import AbortSignal

__all__ = ["TitleCapture", "generate_title", "sanitize_title"]

_USER_LIMIT = 2000
_ASSISTANT_LIMIT = 1000
_TITLE_LIMIT = 30
_EDGE = re.compile(
    r"^[\s\"'`“”‘’«»()\[\]{}<>「」『』【】]+|[\s\"'`“”‘’«»()\[\]{}<>「」『』【】]+\Z"
)
_TRAILING_PUNCT = re.compile(r"[\s.,;:!?。，；：！？、…]+\Z")


class TitleCapture:
    """R-TITLE-2: the user text of the first task that had some, and the assistant's texts in
    answer to it; frozen once that task has ended."""

    def __init__(self) -> None:
        self.user: list[str] = []
        self.assistant: list[str] = []
        self._frozen = False
        self._capturing = False

    def prompt(self, prompt: list[OmniMessage]) -> None:
        if self._frozen:
            return
        texts = [
            m.payload.text
            for m in prompt
            if isinstance(m.payload, TextPayload) and m.payload.role == "user"
        ]
        if texts:
            self.user = texts
            self.assistant = []
            self._capturing = True

    def assistant_text(self, text: str) -> None:
        if self._capturing:
            self.assistant.append(text)

    def task_ended(self) -> None:
        self._capturing = False
        if self.user:
            self._frozen = True


def _strip_markers(text: str) -> str:
    for tag in mk.TITLE_MARKER_TAGS:
        text = mk.strip_marker_blocks(text, tag)
    return text


def _material(parts: list[str], limit: int) -> str:
    return _strip_markers("\n".join(parts)).strip()[:limit]


def sanitize_title(raw: str) -> str:
    """R-TITLE-3: strip markers, collapse whitespace, peel quotes, brackets and trailing
    punctuation until stable, cut to 30 characters."""
    text = " ".join(_strip_markers(raw).split())
    while True:
        peeled = _TRAILING_PUNCT.sub("", _EDGE.sub("", text))
        if peeled == text:
            break
        text = peeled
    return text[:_TITLE_LIMIT].strip()


async def generate_title(
    llm: LLM, user: list[str], assistant: list[str]
) -> tuple[str | None, TokenCounts | None]:
    """The title (``None`` when there is no user text or the request failed) and the request's
    token usage (``None`` when it reported none)."""
    user_material = _material(user, _USER_LIMIT)
    if not user_material:
        return None, None
    prompt = mk.title_prompt(user_material, _material(assistant, _ASSISTANT_LIMIT))
    request = LLMRequest(
        system_prompt="",
        tools=[],
        messages=[user_text(prompt)],
        new_messages=1,
        thinking_level="none",
        signal=AbortSignal(),
    )
    texts: list[str] = []
    usage: TokenCounts | None = None
    outcome: LLMOutcome | None = None
    try:
        async with aclosing(_agen(llm, request)) as stream:
            async for item in stream:
                if isinstance(item, LLMOutcome):
                    outcome = item
                    break
                p = item.payload
                if isinstance(p, TextPayload) and p.role == "assistant" and not item.is_partial:
                    texts.append(p.text)
                elif isinstance(p, TokenUsagePayload):
                    usage = p.request
    except Exception:
        return None, usage
    if outcome is None or outcome.status != "completed":
        return None, usage
    title = sanitize_title("".join(texts))
    return title or None, usage


async def _agen(llm: LLM, request: LLMRequest) -> AsyncGenerator[OmniMessage | LLMOutcome, None]:
    async for item in llm.stream(request):
        yield item
