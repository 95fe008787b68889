"""What the index takes from a record, before any fold: the caps on indexed text and why a
record of a known type was not understood.

Owns: ``OUTPUT_CHARS``/``TEXT_CHARS``/``PROMPT_CHARS`` and ``wrong_type``.  Imports nothing of
the projections (``penguin sessions`` and the diagnostics printer load it on every listing).
Does not: fold (``_fold``).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from eventstore import (
    EVENT_PAYLOAD_TAGS,
    MODEL_PAYLOAD_TAGS,
    OmniMessage,
    SessionMetaPayload,
    UnknownPayload,
)

__all__ = ["OUTPUT_CHARS", "PROMPT_CHARS", "TEXT_CHARS", "wrong_type"]

PROMPT_CHARS: Final = 200
#: A tool output is indexed up to this many characters (the head says what it is; a 5 MB log
#: would make the index as large as the traces).
OUTPUT_CHARS: Final = 4096
#: A text or tool call is indexed up to this many characters.
TEXT_CHARS: Final = 32768

_TAGS: Final[dict[str, dict[str, type[Any]]]] = {
    "model_msg": dict(MODEL_PAYLOAD_TAGS),
    "event_msg": dict(EVENT_PAYLOAD_TAGS),
}


def wrong_type(record: OmniMessage) -> str | None:
    """Why a record of a known type was not understood (a field of the wrong type or a missing
    one), else None — also for an unknown type of a newer writer, which is not damage."""
    p = record.payload
    if not isinstance(p, UnknownPayload):
        return None
    cls: type[Any] | None
    if record.type == "session_meta":
        cls, tag = SessionMetaPayload, "session_meta"
    else:
        tag = str(p.raw.get("type"))
        cls = _TAGS.get(record.type, {}).get(tag)
    if cls is None:
        return None
    fields = set(cls.__struct_encode_fields__)
    try:
        msgspec.convert({k: v for k, v in p.raw.items() if k in fields}, cls)
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        return f"{tag} record skipped: {exc}"
    return f"{tag} record skipped: it does not match the schema"
