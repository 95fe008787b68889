"""One record <-> one JSON line.

Owns: ``encode`` (the only place a record becomes bytes) and ``decode`` (the only place a line
becomes a record).  Does not: split files into lines, repair or report (``_reader``).

Decoding takes a fast path for ordinary records (typed msgspec decoders straight from the bytes)
and a slow path, through plain JSON objects, for everything the fast path refuses: unknown keys
(kept as ``extra``), unknown payload types and payloads that do not fit their schema (kept whole
as ``UnknownPayload``).  Nothing that parses as an envelope is lost (R-MSG-7, R-READ-4).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ._exceptions import TraceDecodeError
from ._schema import (
    EVENT_PAYLOAD_TAGS,
    EVENT_PAYLOAD_TYPES,
    EXTRA_WIRE_NAME,
    MODEL_PAYLOAD_TAGS,
    MODEL_PAYLOAD_TYPES,
    EventPayload,
    ModelPayload,
    OmniMessage,
    Payload,
    SessionMetaPayload,
    UnknownPayload,
)

__all__ = ["decode", "encode", "encode_line"]


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    timestamp: str
    type: str
    payload: msgspec.Raw
    origin: list[str] | None = None


class _ModelLine(msgspec.Struct, tag_field="type", tag="model_msg", forbid_unknown_fields=True):
    timestamp: str
    payload: ModelPayload
    origin: list[str] | None = None


class _EventLine(msgspec.Struct, tag_field="type", tag="event_msg", forbid_unknown_fields=True):
    timestamp: str
    payload: EventPayload
    origin: list[str] | None = None


class _MetaLine(msgspec.Struct, tag_field="type", tag="session_meta", forbid_unknown_fields=True):
    timestamp: str
    payload: SessionMetaPayload
    origin: list[str] | None = None


# One pass for ordinary lines: the envelope ``type`` selects the payload union directly.
_line_decoder: Final = msgspec.json.Decoder(_ModelLine | _EventLine | _MetaLine)
_LINE_TYPES: Final[dict[type[Any], str]] = {
    _ModelLine: "model_msg",
    _EventLine: "event_msg",
    _MetaLine: "session_meta",
}
# The reader's hot loop calls these two directly (one Python call per line fewer than
# ``decode``) and hands every line the fast path refuses to ``decode``.
_decode_typed_line: Final = _line_decoder.decode
_envelope_decoder: Final = msgspec.json.Decoder(_Envelope)
_model_decoder: Final = msgspec.json.Decoder(ModelPayload)
_event_decoder: Final = msgspec.json.Decoder(EventPayload)
_meta_decoder: Final = msgspec.json.Decoder(SessionMetaPayload)
_any_decoder: Final = msgspec.json.Decoder()
_encoder: Final = msgspec.json.Encoder()

_TAGGED: Final[dict[str, dict[str, type[Any]]]] = {
    "model_msg": MODEL_PAYLOAD_TAGS,
    "event_msg": EVENT_PAYLOAD_TAGS,
}
_ENVELOPE_KEYS: Final = ("timestamp", "type", "payload", "origin")


def _wire_fields(cls: type[Any]) -> frozenset[str]:
    return frozenset(cls.__struct_encode_fields__) - {EXTRA_WIRE_NAME}


_TYPED: Final[tuple[type[Any], ...]] = (
    *MODEL_PAYLOAD_TYPES,
    *EVENT_PAYLOAD_TYPES,
    SessionMetaPayload,
)
_FIELDS: Final[dict[type[Any], frozenset[str]]] = {cls: _wire_fields(cls) for cls in _TYPED}


# --------------------------------------------------------------------------- decode


def decode(line: bytes | bytearray | memoryview | str) -> OmniMessage:
    """Decode one JSON line into an ``OmniMessage``.

    Raises ``TraceDecodeError`` when the line is not JSON or not an envelope (an object with a
    string ``timestamp``, a string ``type`` and an object ``payload``).
    """
    try:
        typed = _line_decoder.decode(line)
    except (msgspec.DecodeError, RecursionError):
        pass
    else:
        if typed.payload.extra is None:
            return OmniMessage(
                typed.timestamp, _LINE_TYPES[type(typed)], typed.payload, typed.origin or None
            )
    try:
        env = _envelope_decoder.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return _decode_slow(line)
    payload = _decode_payload_fast(env.type, env.payload)
    origin = env.origin or None
    if payload is None:
        try:
            obj = _any_decoder.decode(env.payload)
        except (
            msgspec.DecodeError,
            RecursionError,
        ) as exc:  # pragma: no cover - parsed once already
            raise TraceDecodeError(f"payload is not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise TraceDecodeError("payload is not a JSON object")
        payload = _payload_from_object(env.type, obj)
    return OmniMessage(env.timestamp, env.type, payload, origin)


def _decode_payload_fast(kind: str, raw: msgspec.Raw) -> Payload | None:
    decoder: msgspec.json.Decoder[Any]
    if kind == "model_msg":
        decoder = _model_decoder
    elif kind == "event_msg":
        decoder = _event_decoder
    elif kind == "session_meta":
        decoder = _meta_decoder
    else:
        return None
    try:
        payload: Payload = decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    # A literal "$extra" key on the wire lands in the side field: redo it the slow way.
    return None if payload.extra is not None else payload


def _decode_slow(line: bytes | bytearray | memoryview | str) -> OmniMessage:
    try:
        obj = _any_decoder.decode(line)
    except msgspec.DecodeError as exc:
        raise TraceDecodeError(f"not JSON: {exc}") from None
    except RecursionError:
        raise TraceDecodeError("not JSON: nesting too deep") from None
    if not isinstance(obj, dict):
        raise TraceDecodeError(f"not an envelope: a JSON {type(obj).__name__}, not an object")
    timestamp, kind, payload_obj = obj.get("timestamp"), obj.get("type"), obj.get("payload")
    if not isinstance(timestamp, str):
        raise TraceDecodeError("not an envelope: `timestamp` missing or not a string")
    if not isinstance(kind, str):
        raise TraceDecodeError("not an envelope: `type` missing or not a string")
    if not isinstance(payload_obj, dict):
        raise TraceDecodeError("not an envelope: `payload` missing or not an object")
    origin = obj.get("origin")
    if origin is not None and not (
        isinstance(origin, list) and all(isinstance(o, str) for o in origin)
    ):
        raise TraceDecodeError("not an envelope: `origin` is not a list of strings")
    extra = {k: v for k, v in obj.items() if k not in _ENVELOPE_KEYS}
    payload = _payload_from_object(kind, payload_obj)
    return OmniMessage(timestamp, kind, payload, origin or None, extra or None)


def _payload_from_object(kind: str, obj: dict[str, Any]) -> Payload:
    cls: type[Any] | None
    if kind == "session_meta":
        cls = SessionMetaPayload
    else:
        tag = obj.get("type")
        cls = _TAGGED.get(kind, {}).get(tag) if isinstance(tag, str) else None
    if cls is None:
        return UnknownPayload(obj)
    fields = _FIELDS[cls]
    known = {k: v for k, v in obj.items() if k in fields or k == "type"}
    extra = {k: v for k, v in obj.items() if k not in known}
    try:
        payload = msgspec.convert(known, cls)
    except (msgspec.ValidationError, RecursionError):
        # Known type, wrong shape: keep it whole; the validator reports it (V-19).
        return UnknownPayload(obj)
    if extra:
        msgspec.structs.force_setattr(payload, "extra", extra)
    result: Payload = payload
    return result


# --------------------------------------------------------------------------- encode


def encode(msg: OmniMessage) -> bytes:
    """Encode one record as compact JSON, keys in SPEC order, no trailing newline."""
    payload = msg.payload
    if msg.extra is None and payload.extra is None and type(payload) is not UnknownPayload:
        return _encoder.encode(msg)
    return _encoder.encode(_to_object(msg))


def encode_line(msg: OmniMessage) -> bytes | bytearray:
    """``encode(msg) + b"\\n"``, built in one buffer (the writer's hot path)."""
    payload = msg.payload
    if msg.extra is None and payload.extra is None and type(payload) is not UnknownPayload:
        buf = bytearray()
        _encoder.encode_into(msg, buf)
        buf += b"\n"
        return buf
    return _encoder.encode(_to_object(msg)) + b"\n"


def _to_object(msg: OmniMessage) -> dict[str, Any]:
    payload = msg.payload
    if isinstance(payload, UnknownPayload):
        payload_obj: dict[str, Any] = payload.raw
    else:
        payload_obj = msgspec.to_builtins(payload)
        payload_obj.pop(EXTRA_WIRE_NAME, None)
        if payload.extra:
            payload_obj.update(payload.extra)
    obj: dict[str, Any] = {"timestamp": msg.timestamp, "type": msg.type, "payload": payload_obj}
    if msg.origin:
        obj["origin"] = msg.origin
    if msg.extra:
        obj.update(msg.extra)
    return obj
