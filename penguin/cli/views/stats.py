"""``penguin stats``: the ``Usage`` projection of one session or of every session (R-CLI-7).

Owns: folding ``Usage`` over a session's files, its JSON shape (summary, per-request rows, error
rows) and its rich tables, and the cross-session totals of ``--all``.  Does not: price tokens or
take locks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec
from rich.console import Console
from rich.table import Table
from rich.text import Text

from eventstore import TokenCounts, iter_trace
from penguin.cli.terminal.safe import preview, safe
from penguin.cli.views.labels import request_label
from projections import Usage

__all__ = ["add_summaries", "render_all", "render_usage", "usage_of", "usage_summary"]

_TOKEN_KEYS = ("cache_read", "cache_write", "output", "total")


def usage_of(files: Sequence[Path]) -> Usage:
    """The Usage fold over a session's files (a trailing crash-residue file is skipped)."""
    usage = Usage()
    source: Path | list[Path] = list(files) if len(files) > 1 else files[0]
    for record in iter_trace(source, report=False):
        usage.apply(record)
    return usage


def _counts(c: TokenCounts) -> dict[str, int]:
    return {k: int(getattr(c, k)) for k in _TOKEN_KEYS}


def usage_summary(usage: Usage) -> dict[str, Any]:
    """Requests by kind and status, retries, compactions, token totals, error count."""
    by = usage.requests_by()
    return {
        "requests": [
            {"kind": kind, "status": status, "count": n}
            for (kind, status), n in sorted(by.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))
        ],
        "requests_total": len(usage.rows),
        "retries": usage.retries,
        "compactions": {
            "completed": usage.compactions_completed,
            "failed": usage.compactions_failed,
            "aborted": usage.compactions_aborted,
        },
        "tokens": _counts(usage.totals),
        "tokens_by_kind": {k: _counts(v) for k, v in usage.tokens_by_kind().items()},
        "errors_total": len(usage.errors),
    }


def usage_json(usage: Usage) -> dict[str, Any]:
    out = usage_summary(usage)
    out["rows"] = [msgspec.to_builtins(row) for row in usage.rows]
    out["errors"] = [msgspec.to_builtins(row) for row in usage.errors]
    return out


def add_summaries(total: dict[str, Any], one: dict[str, Any]) -> None:
    """Accumulate ``one`` (a ``usage_summary``) into ``total`` in place."""
    for key in ("requests_total", "retries", "errors_total"):
        total[key] = total.get(key, 0) + one[key]
    comp = total.setdefault("compactions", {"completed": 0, "failed": 0, "aborted": 0})
    for key, n in one["compactions"].items():
        comp[key] += n
    tokens = total.setdefault("tokens", dict.fromkeys(_TOKEN_KEYS, 0))
    for key, n in one["tokens"].items():
        tokens[key] += n
    by_kind = total.setdefault("tokens_by_kind", {})
    for kind, counts in one["tokens_by_kind"].items():
        acc = by_kind.setdefault(kind, dict.fromkeys(_TOKEN_KEYS, 0))
        for key, n in counts.items():
            acc[key] += n
    reqs = total.setdefault("_requests", {})
    for row in one["requests"]:
        pair = (row["kind"], row["status"])
        reqs[pair] = reqs.get(pair, 0) + row["count"]


def finish_totals(total: dict[str, Any]) -> dict[str, Any]:
    reqs = total.pop("_requests", {})
    total["requests"] = [
        {"kind": kind, "status": status, "count": n}
        for (kind, status), n in sorted(reqs.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))
    ]
    return total


def _t(text: str, style: str = "") -> Text:
    return Text(text, style=style)


def _requests_table(summary: dict[str, Any]) -> Table:
    table = Table(title="Requests", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("kind", "status", "count"):
        table.add_column(col, justify="right" if col == "count" else "left")
    for row in summary["requests"]:
        table.add_row(_t(row["kind"]), _t(row["status"] or "open"), _t(str(row["count"])))
    return table


# The one wording of token counts (see ``views.inspect.token_words``).
_TOKEN_COLUMNS: Final = ("input", "cached", "output", "total")


def _token_cells(counts: dict[str, int]) -> list[str]:
    read, write = counts["cache_read"], counts["cache_write"]
    return [str(read + write), str(read), str(counts["output"]), str(counts["total"])]


def _tokens_table(summary: dict[str, Any]) -> Table:
    table = Table(title="Tokens", title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("")
    for key in _TOKEN_COLUMNS:
        table.add_column(key, justify="right")
    for label, counts in (("total", summary["tokens"]), *summary["tokens_by_kind"].items()):
        table.add_row(_t(label), *(_t(cell) for cell in _token_cells(counts)))
    return table


def _status_label(kind: str, status: str | None, error_message: str | None) -> str:
    """A failed request's status named for what happened (``server error 500``, not the
    recorded ``timeout``); other rows keep theirs."""
    if status is None:
        return ""
    return request_label(status, error_message) if kind in ("turn", "compaction") else status


def render_usage(console: Console, session_id: str, usage: Usage) -> None:
    summary = usage_summary(usage)
    comp = summary["compactions"]
    console.print(_t(f"Session {safe(session_id, keep_newlines=False)}", "bold"))
    console.print(
        _t(
            f"  requests {summary['requests_total']}, retries {summary['retries']}, "
            f"compactions completed {comp['completed']} / failed {comp['failed']} / "
            f"aborted {comp['aborted']}, errors {summary['errors_total']}"
        )
    )
    console.print()
    console.print(_requests_table(summary))
    console.print()
    console.print(_tokens_table(summary))
    if usage.errors:
        console.print()
        table = Table(title="Errors", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("file", "kind", "time", "status", "attempt", "message"):
            table.add_column(col, overflow="fold")
        for e in usage.errors:
            message = e.reason if e.kind == "abort" else e.error_message
            table.add_row(
                _t(str(e.file_index)),
                _t(e.kind),
                _t(safe(e.timestamp, keep_newlines=False)),
                _t(_status_label(e.kind, e.status, e.error_message)),
                _t("" if e.attempt is None else str(e.attempt)),
                _t(preview(message or "", 100)),
            )
        console.print(table)


def render_all(console: Console, rows: list[dict[str, Any]], total: dict[str, Any]) -> None:
    table = Table(title="Usage by session", title_justify="left", show_edge=False, pad_edge=False)
    for col in (
        "session",
        "project/agent",
        "requests",
        "retries",
        "compactions",
        "errors",
        "tokens",
    ):
        table.add_column(
            col, justify="left" if col in ("session", "project/agent") else "right", overflow="fold"
        )
    for row in rows:
        if "error" in row:
            table.add_row(
                _t(safe(row["session_id"], keep_newlines=False)),
                _t(safe(f"{row['project']}/{row['agent']}", keep_newlines=False)),
                _t("unreadable: " + preview(row["error"], 60), "red"),
                *[_t("")] * 4,
            )
            continue
        comp = row["compactions"]
        table.add_row(
            _t(safe(row["session_id"], keep_newlines=False)),
            _t(safe(f"{row['project']}/{row['agent']}", keep_newlines=False)),
            _t(str(row["requests_total"])),
            _t(str(row["retries"])),
            _t(f"{comp['completed']}/{comp['failed']}/{comp['aborted']}"),
            _t(str(row["errors_total"])),
            _t(str(row["tokens"]["total"])),
        )
    console.print(table)
    # ``total`` is ``finish_totals``'s: never empty; without a readable session it holds only
    # the (empty) request rows, hence the defaults.
    console.print()
    console.print(_t(f"All sessions: {len(rows)}", "bold"))
    comp = total.get("compactions", {"completed": 0, "failed": 0, "aborted": 0})
    console.print(
        _t(
            f"  requests {total.get('requests_total', 0)}, retries "
            f"{total.get('retries', 0)}, compactions completed {comp['completed']} / "
            f"failed {comp['failed']} / aborted {comp['aborted']}, errors "
            f"{total.get('errors_total', 0)}"
        )
    )
    if "tokens" in total:
        console.print()
        console.print(_requests_table(total))
        console.print()
        console.print(_tokens_table(total))
