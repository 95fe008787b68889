"""Terminal safety for untrusted trace content.

Owns: neutralising control characters, escape sequences, bidi overrides and lone surrogates in
strings that come from traces or models before they reach a terminal, in text (``safe``,
``preview``) and in JSON (``safe_json``, ``safe_json_bytes``).  Does not: style or print anything.

Rich's ``Text`` passes escape sequences through unchanged, so every untrusted string goes
through ``safe()`` first: ESC, BEL, other C0/C1 controls, DEL and the Unicode bidi controls are
shown as visible ``\\xNN`` / ``\\u202e`` escapes; newlines and tabs are kept (``keep_newlines``).

JSON encoders escape C0 controls but leave C1 controls (U+0080–U+009F, which some terminals read
as CSI/OSC introducers), DEL and bidi overrides raw when they do not escape all non-ASCII text;
``safe_json`` escapes exactly those as ``\\uXXXX``, which is the same JSON value.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["preview", "safe", "safe_json", "safe_json_bytes"]

_BIDI: Final = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_SURROGATES: Final = "\ud800-\udfff"
_UNSAFE: Final = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}{_SURROGATES}]")
_UNSAFE_NO_NL: Final = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}{_SURROGATES}]")
# Raw characters a JSON encoder with ensure_ascii=False may leave in its output: all of them
# can only occur inside strings, where ``\uXXXX`` denotes the same character.
_JSON_UNSAFE: Final = re.compile(f"[\x7f-\x9f{_BIDI}{_SURROGATES}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group(0)):04x}"


def safe(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` with every control or bidi character replaced by a visible escape."""
    pattern = _UNSAFE if keep_newlines else _UNSAFE_NO_NL
    return pattern.sub(_escape, text)


def preview(text: str, limit: int = 120) -> str:
    """One safe line of at most about ``limit`` characters (newlines shown as ``⏎``)."""
    flat = safe(text.replace("\r\n", "\n").replace("\n", "⏎"), keep_newlines=False)
    if len(flat) > limit:
        return flat[: max(limit - 1, 1)] + "…"
    return flat


def safe_json(value: Any) -> str:
    """``value`` as compact-ish JSON text that is safe to write to a terminal."""
    return _JSON_UNSAFE.sub(_json_escape, json.dumps(value, ensure_ascii=False))


def safe_json_bytes(data: bytes) -> bytes:
    """An encoded JSON document (e.g. ``eventstore.encode``) made safe for a terminal."""
    text = data.decode("utf-8", errors="surrogateescape")
    escaped = _JSON_UNSAFE.sub(_json_escape, text)
    return escaped.encode("utf-8", errors="surrogateescape")
