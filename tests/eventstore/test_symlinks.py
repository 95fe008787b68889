"""One symlink rule for finding trace files (issue 28, R-ROOT-9), through every discovery path:
``DataRoot``'s lookups and listings, ``eventstore.find_trace_files`` and what uses it
(``replay.validate_paths``, the CLI's directory arguments).  A link to a trace file or to a
session's directory is followed when it resolves inside the base; one that resolves outside is
refused by a lookup and left out of a listing or a search with an ``OutsideRootWarning``."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from clikit import invoke, meta, turn, write_records

from eventstore import DataRoot, OutsideRootWarning, find_trace_files
from eventstore import builders as b
from replay import validate_paths

DATE, LINKED_DATE = "2026-07-18", "2026-07-19"


def sid(n: int) -> str:
    return f"session-2026-07-18-11-10-2{n}-3f8a1c2d"


def _trace(path: Path, n: int) -> Path:
    """A session's first file; a blank last line gives every file one finding (V-1)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_records(path, [meta(sid(n)), b.user_text("hi"), *turn("ok")], raw=b"\n")


def _traces(home: Path) -> Path:
    return home / "default_project" / "agents" / "default_agent" / "traces"


def _discovered(home: Path) -> dict[str, Any]:
    """What each discovery path finds under ``home``, with the warnings it gave."""
    root = DataRoot(home)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found: dict[str, Any] = {
            "sessions": sorted(s.session_id for s in root.sessions()),
            "listing": sorted(
                s.session_id for e in root.listing() if (s := root.session_info(e)) is not None
            ),
            "latest": root.latest_session(),
            "search": find_trace_files(home),
            "validate": sorted({f.path for f in validate_paths([home])}),
        }
    found["warned"] = sorted(
        str(w.message).split(":")[0] for w in caught if issubclass(w.category, OutsideRootWarning)
    )
    return found


def test_links_that_stay_inside_are_followed_everywhere(tmp_path: Path) -> None:
    home = tmp_path / "home"
    traces = _traces(home)
    plain = _trace(traces / DATE / f"{sid(1)}_001.jsonl", 1)
    # A trace file linked into the layout from elsewhere under the root.
    stored = _trace(home / "store" / "kept.jsonl", 2)
    file_link = traces / DATE / f"{sid(2)}_001.jsonl"
    file_link.symlink_to(stored)
    # A session's (date) directory linked into the layout.
    moved = _trace(home / "archive" / LINKED_DATE / f"{sid(3)}_001.jsonl", 3)
    (traces / LINKED_DATE).symlink_to(moved.parent, target_is_directory=True)
    via_dir = traces / LINKED_DATE / moved.name

    root = DataRoot(home)
    assert root.trace_files(sid(2)) == [file_link]
    assert root.trace_files(sid(3)) == [via_dir]
    assert root.locate(sid(3)).date == LINKED_DATE
    assert root.session_files(sid(2)) == ([file_link], file_link)

    found = _discovered(home)
    assert found["sessions"] == found["listing"] == [sid(1), sid(2), sid(3)]
    assert found["latest"] == sid(3)
    # The search from the root meets each file once, by its first path in sorted order: the
    # linked directory repeats archive/, the linked file repeats store/.
    assert found["search"] == [moved, plain, file_link]
    assert found["validate"] == found["search"]
    assert found["warned"] == []

    # The CLI: a directory argument that is itself a link, and the listing.
    assert invoke("validate", traces / LINKED_DATE).exit_code == 0
    inspected = json.loads(invoke("inspect", traces / LINKED_DATE, "--json").stdout)
    assert inspected["session_id"] == sid(3)
    listed = json.loads(invoke("--home", home, "sessions", "--json").stdout)
    assert sorted(r["session_id"] for r in listed) == [sid(1), sid(2), sid(3)]


def test_links_that_lead_outside_are_refused_everywhere(tmp_path: Path) -> None:
    home = tmp_path / "home"
    traces = _traces(home)
    _trace(traces / DATE / f"{sid(1)}_001.jsonl", 1)
    secret = _trace(tmp_path / "outside" / "secret.jsonl", 4)
    file_link = traces / DATE / f"{sid(4)}_001.jsonl"
    file_link.symlink_to(secret)
    elsewhere = _trace(tmp_path / "elsewhere" / LINKED_DATE / f"{sid(5)}_001.jsonl", 5)
    dir_link = traces / LINKED_DATE
    dir_link.symlink_to(elsewhere.parent, target_is_directory=True)

    root = DataRoot(home)
    for n in (4, 5):  # a lookup refuses, naming the link
        with pytest.raises(ValueError, match="outside the data root"):
            root.trace_files(sid(n))

    found = _discovered(home)
    assert found["sessions"] == found["listing"] == [sid(1)] and found["latest"] == sid(1)
    assert [p.name for p in found["search"]] == [f"{sid(1)}_001.jsonl"]
    assert found["validate"] == found["search"]
    # Each path says which link it left out.
    expected = sorted({f"skipped {dir_link}", f"skipped {file_link}"})
    assert sorted(set(found["warned"])) == expected

    # The CLI says so on stderr, once per link, and reads nothing through it.
    result = invoke("validate", home)
    assert result.exit_code == 0, result.output
    assert result.stderr.count("skipped") == 2 and "1 file(s)" in result.stderr
    listing = invoke("--home", home, "sessions", "--json")
    assert [r["session_id"] for r in json.loads(listing.stdout)] == [sid(1)]
    assert listing.stderr.count("outside the data root") == 2
