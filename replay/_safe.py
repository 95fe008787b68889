"""Terminal safety for untrusted trace content.

Owns: neutralising control characters, escape sequences and bidi overrides in strings that come
from traces or models before they reach a terminal.  Does not: style or print anything.

Rich's ``Text`` passes escape sequences through unchanged, so every untrusted string goes
through ``safe()`` first: ESC, BEL, other C0/C1 controls, DEL and the Unicode bidi controls are
shown as visible ``\\xNN`` / ``\\u202e`` escapes; newlines and tabs are kept (``keep_newlines``).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["safe"]

_BIDI: Final = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_UNSAFE: Final = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
_UNSAFE_NO_NL: Final = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` with every control or bidi character replaced by a visible escape."""
    pattern = _UNSAFE if keep_newlines else _UNSAFE_NO_NL
    return pattern.sub(_escape, text)
