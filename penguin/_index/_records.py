"""What the index takes from a record, before any fold: the caps on indexed text and why a
record of a known type was not understood.

Owns: ``OUTPUT_CHARS``/``TEXT_CHARS``/``PROMPT_CHARS`` and ``wrong_type``.  Imports nothing of
the projections (``penguin sessions`` and the diagnostics printer load it on every listing).
Does not: fold (``_fold``).
"""

from __future__ import annotations

from typing import Final

from eventstore import OmniMessage, unrecognised

__all__ = ["OUTPUT_CHARS", "PROMPT_CHARS", "TEXT_CHARS", "wrong_type"]

PROMPT_CHARS: Final = 200
#: A tool output is indexed up to this many characters (the head says what it is; a 5 MB log
#: would make the index as large as the traces).
OUTPUT_CHARS: Final = 4096
#: A text or tool call is indexed up to this many characters.
TEXT_CHARS: Final = 32768


def wrong_type(record: OmniMessage) -> str | None:
    """Why a record was skipped as damage — a known type whose fields do not fit, with no
    ``type``, or in the other envelope — else None, also for a newer writer's type, which is
    kept and is not damage (``eventstore.unrecognised``: every reader's one decision)."""
    found = unrecognised(record)
    return str(found) if found is not None and found.damaged else None
