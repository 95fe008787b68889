"""Issue 28 item 2: the trace on disk is spelled once, in ``eventstore``.

Above the store, nothing opens files with raw ``os.open(`` (private writes go through
``write_private`` / ``create_private``, the lock through ``probe_lock``), nothing strips a UTF-8
BOM itself (the reader's line rules live in ``tail``, ``read_trace``, ``complete_lines``,
``not_a_trace``), and nothing spells the lock file's name (``lock_path_of``,
``DataRoot.lock_path``).  import-linter forbids ``fcntl`` above the store (``make lint``)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ABOVE_THE_STORE = ("projections", "engine", "replay", "penguin")

_FORBIDDEN = {
    "os.open(": re.compile(r"\bos\.open\("),
    "a BOM literal": re.compile(
        r"""\\xef\\xbb\\xbf|\\ufeff|\\uFEFF|BOM_UTF8|["']\ufeff"""  # bytes, escapes, codecs, raw
    ),
    '".lock"': re.compile(r"""\.lock["']"""),
}

# Each exception says why it is not about trace files.
ALLOWED = {
    ("engine/llm/_sse.py", "a BOM literal"): "an SSE stream's own BOM rule (WHATWG), not a trace",
    ("projections/markers.py", "a BOM literal"): "JavaScript's trim set includes U+FEFF",
    ("engine/_sandbox.py", "os.open("): "an O_PATH descriptor naming a Landlock rule's path",
}


def offences(root: Path, packages: tuple[str, ...]) -> list[str]:
    found: list[str] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            text = path.read_text(encoding="utf-8")
            for what, pattern in _FORBIDDEN.items():
                if (rel, what) in ALLOWED:
                    continue
                for match in pattern.finditer(text):
                    line = text.count("\n", 0, match.start()) + 1
                    found.append(f"{rel}:{line}: {what}")
    return found


def test_no_trace_rule_is_spelled_above_the_store() -> None:
    assert offences(REPO, ABOVE_THE_STORE) == []


def test_every_allowed_exception_is_still_needed() -> None:
    """An exception whose file no longer has the literal must go, so the list cannot go stale."""
    for rel, what in ALLOWED:
        text = (REPO / rel).read_text(encoding="utf-8")
        assert _FORBIDDEN[what].search(text), f"{rel}: {what} no longer there"


def test_the_guard_sees_each_spelling(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    samples = [
        "fd = os.open(path, os.O_RDONLY)",
        'if raw.startswith(b"\\xef\\xbb\\xbf"): pass',
        "head = head[len(codecs.BOM_UTF8):]",
        'lock = directory / f"{sid}.lock"',
        "lock = name + '.lock'",
    ]
    (pkg / "m.py").write_text("\n".join(samples) + "\n", encoding="utf-8")
    assert [o.split(": ", 1)[1] for o in offences(tmp_path, ("pkg",))] == [
        "os.open(",
        "a BOM literal",
        "a BOM literal",
        '".lock"',
        '".lock"',
    ]
