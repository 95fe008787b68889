"""Owns: the file's head — one ``session_meta``, first (V-2), naming the session of the file name
(V-17); crash residue (R-ROOT-10); whether the file lists its tools.  Does not: compare files
(the session checks do, from what ``summary`` keeps)."""

from __future__ import annotations

from typing import Any, ClassVar

from eventstore import SessionMetaPayload, ToolListReadyPayload

from ._core import CheckGroup, Handler


class HeadChecks(CheckGroup):
    name = "head"

    meta_line: int = 0
    meta: SessionMetaPayload | None = None
    has_tool_list: bool = False
    residue: bool = False

    def _on_meta(self, line: int, meta: SessionMetaPayload) -> None:
        facts = self.facts
        if self.meta is not None:
            facts.error(line, "V-2", f"second session_meta (the first is at line {self.meta_line})")
            return
        self.meta, self.meta_line = meta, line
        if facts.name_id is not None and meta.session_id != facts.name_id:
            facts.error(
                line,
                "V-17",
                f"session_id {meta.session_id!r} differs from the file name's {facts.name_id!r}",
            )

    def _on_tool_list(self, line: int, payload: ToolListReadyPayload) -> None:
        self.has_tool_list = True

    handlers: ClassVar[dict[type[Any], Handler]] = {
        SessionMetaPayload: _on_meta,
        ToolListReadyPayload: _on_tool_list,
    }

    def finish(self) -> None:
        facts = self.facts
        if self.meta is None:
            if facts.is_highest and facts.index is not None:
                self.residue = True
                facts.warn(
                    0,
                    "V-2",
                    "crash residue: highest-index file without a session_meta, ignored by "
                    "readers (R-ROOT-10)",
                )
            elif facts.first_kind is None:
                facts.error(0, "V-2", "no record, so no session_meta")
            else:
                facts.error(
                    facts.first_line, "V-2", f"first record is {facts.first_kind}, not session_meta"
                )
        elif facts.first_kind != "session_meta":
            facts.error(
                facts.first_line, "V-2", f"first record is {facts.first_kind}, not session_meta"
            )
        elif facts.is_highest and facts.only_head and facts.index is not None and facts.index > 1:
            self.residue = True
            facts.warn(
                0,
                "V-2",
                "crash residue: highest-index file holding only its rotation head, ignored by "
                "readers (R-ROOT-10)",
            )
