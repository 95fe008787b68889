"""Trace file names have one spelling (R-ROOT-4), used by the writer, reader, layout and tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore import DataRoot, file_index, parse_trace_name, trace_file_name


@pytest.mark.parametrize("index", [1, 7, 999, 1000, 123456])
def test_r_root_4_names_parse_back_to_session_and_index(index: int) -> None:
    name = trace_file_name("session-x_y", index)
    assert parse_trace_name(name) == ("session-x_y", index)
    assert parse_trace_name(Path("/d") / name) == ("session-x_y", index)
    assert file_index(name) == index


@pytest.mark.parametrize("name", ["s_1.jsonl", "s_001.json", "s001.jsonl", "s_001.jsonl.bak", "_"])
def test_r_root_4_other_names_are_no_trace_files(name: str) -> None:
    assert parse_trace_name(name) is None


def test_the_layout_writes_the_names_it_parses(tmp_path: Path) -> None:
    path = DataRoot(tmp_path).trace_path("session-a", 3, date="2026-01-01")
    assert path.name == trace_file_name("session-a", 3)
