"""Owns: what a text says — an assistant text has no sender (V-19); only the new context's first
input is a ``[context_summary]`` (V-6 [ours]); steering blocks are exact (V-16); synthesized
``[turn_aborted]``/``[turn_retried]`` blocks are never written (V-15).  Does not: parse the
blocks (``projections.markers`` holds their one spelling)."""

from __future__ import annotations

from typing import Any, ClassVar, Final

from eventstore import TextPayload
from projections import markers as mk

from ._core import CheckGroup, Handler

# A text that opens like a steering block but does not parse as one is reported (V-16).
_STEERING_PREFIXES: Final = (f"[{mk.TAG_USER_STEERING}]", f"<{mk.TAG_USER_STEERING}>")


class TextChecks(CheckGroup):
    name = "texts"

    def _on_text(self, line: int, payload: TextPayload) -> None:
        facts, body = self.facts, payload.text
        if payload.role == "assistant":
            if payload.sender is not None:
                facts.error(line, "V-19", "assistant text with a sender")
            return
        if not body.startswith(("[", "<")):
            return
        if mk.is_context_summary(body):
            # V-6 [ours]: only the new context's first input may be a summary.
            if facts.first_model_seen:
                facts.warn(line, "V-6", "[context_summary] is not the file's first model message")
            elif facts.index is not None and facts.index < 2:
                facts.warn(line, "V-6", "[context_summary] in a file with index 1")
        elif body.startswith(_STEERING_PREFIXES):
            if not mk.is_steering(body):
                facts.warn(line, "V-16", "steering text does not match R-STEER-9 exactly")
        elif mk.unwrap_synthetic_block(body) is not None:
            facts.warn(line, "V-15", "synthesized [turn_aborted]/[turn_retried] block written")

    handlers: ClassVar[dict[type[Any], Handler]] = {TextPayload: _on_text}
