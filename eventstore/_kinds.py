"""Owns: what a record is, for every reader — its kind in one word (``record_kind``) and, for a
record whose payload this version could not read, what it is and why (``unrecognised``): a
newer writer's type (kept, not damage, R-MSG-7, R-READ-4) or a known type that does not fit
its schema or sits in the other envelope (damage, V-19).  Does not: decide what a reader does
with it — the validator reports damage as V-19, the CLI and the server as a diagnostic, the
folds skip the record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import msgspec

from ._schema import (
    EVENT_PAYLOAD_TAGS,
    EXTRA_WIRE_NAME,
    MODEL_PAYLOAD_TAGS,
    PAYLOAD_TAG_OF,
    OmniMessage,
    SessionMetaPayload,
    UnknownPayload,
)

__all__ = ["Unrecognised", "record_kind", "unrecognised"]

_TAGGED: Final[dict[str, dict[str, type[Any]]]] = {
    "model_msg": MODEL_PAYLOAD_TAGS,
    "event_msg": EVENT_PAYLOAD_TAGS,
}


def record_kind(msg: OmniMessage) -> str:
    """``session_meta`` for a session's head, the payload's ``type`` otherwise (its wire tag,
    known or not), or the envelope's ``type`` when the payload names none."""
    if msg.type == "session_meta":
        return "session_meta"
    payload = msg.payload
    if isinstance(payload, UnknownPayload):
        return payload.type or msg.type
    return PAYLOAD_TAG_OF.get(type(payload), msg.type)


@dataclass(frozen=True, slots=True)
class Unrecognised:
    """A record whose payload this version could not read.  ``damaged``: a known type that does
    not fit its schema, has no ``type``, or sits in the other envelope; otherwise a newer
    writer's type, kept and written back unchanged."""

    kind: str
    damaged: bool
    detail: str

    def __str__(self) -> str:
        if self.damaged:
            return f"{self.kind} record skipped: {self.detail}"
        return f"{self.kind} record kept unread: {self.detail}"


def unrecognised(msg: OmniMessage) -> Unrecognised | None:
    """What ``msg`` is when its payload decoded to ``UnknownPayload``; ``None`` otherwise."""
    payload = msg.payload
    if not isinstance(payload, UnknownPayload):
        return None
    kind, raw = record_kind(msg), payload.raw
    if msg.type == "session_meta":
        return Unrecognised(kind, True, _shape_error(SessionMetaPayload, raw))
    own = _TAGGED.get(msg.type)
    if own is None:
        return Unrecognised(kind, False, f"{msg.type} record of a newer version")
    if payload.type is None:
        return Unrecognised(kind, True, "payload without a string type")
    cls = own.get(payload.type)
    if cls is not None:
        return Unrecognised(kind, True, _shape_error(cls, raw))
    for envelope, tags in _TAGGED.items():
        if envelope != msg.type and payload.type in tags:
            return Unrecognised(kind, True, f"{envelope} payload in a {msg.type} envelope")
    return Unrecognised(kind, False, f"{msg.type} payload type of a newer version")


def _shape_error(cls: type[Any], raw: dict[str, Any]) -> str:
    """Why ``raw`` does not convert to ``cls`` (the codec's own test, its extra keys aside)."""
    fields = set(cls.__struct_encode_fields__) - {EXTRA_WIRE_NAME}
    try:
        msgspec.convert({k: v for k, v in raw.items() if k in fields}, cls)
    except msgspec.ValidationError as exc:
        return str(exc)
    except RecursionError:
        return "nesting too deep"
    return "does not fit its schema"  # pragma: no cover - the codec refused it for a reason
