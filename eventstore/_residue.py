"""Crash residue (SPEC R-ROOT-10): the one statement of the rule.

Owns: deciding, from a file's records in order, whether the file is a real trace file or what a
crash left behind — no decodable ``session_meta``, or (index > 1) nothing but the rotation head
(``session_meta``, ``tool_list_ready``, ``settings``: copies of earlier records).  Does not: read files (the
reader and the layout feed it) or delete anything.
"""

from __future__ import annotations

from ._schema import HEAD_EVENT_TYPES, OmniMessage

__all__ = ["ResidueCheck", "is_rotation_head"]


def is_rotation_head(record: OmniMessage) -> bool:
    """Whether ``record`` is one a rotation copies to the head of the next file."""
    return record.type == "session_meta" or isinstance(record.payload, HEAD_EVENT_TYPES)


class ResidueCheck:
    """Feed a file's records in order; ``feed`` turns true once the file is known not to be
    residue, and stays so.  ``detail`` says why a file never got there."""

    __slots__ = ("_beyond_head", "_has_meta", "_index", "settled")

    def __init__(self, index: int) -> None:
        self._index = index
        self._has_meta = False
        self._beyond_head = False
        self.settled = False

    def feed(self, record: OmniMessage) -> bool:
        if not self.settled:
            if record.type == "session_meta":
                self._has_meta = True
            elif not isinstance(record.payload, HEAD_EVENT_TYPES):
                self._beyond_head = True
            self.settled = self._has_meta and (self._index == 1 or self._beyond_head)
        return self.settled

    @property
    def detail(self) -> str:
        if self._has_meta:
            return "holds nothing but its rotation head; ignored as crash residue (R-ROOT-10)"
        return "holds no decodable session_meta; ignored as crash residue (R-ROOT-10)"
