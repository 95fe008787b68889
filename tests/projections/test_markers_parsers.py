"""One spelling per marker: every parser reads back what its formatter writes (issue 14)."""

from __future__ import annotations

import pytest

from projections import markers as mk


@pytest.mark.parametrize("turns", [1, 100, 12345])
def test_r_maxt_2_the_notice_parses_back_to_its_turns(turns: int) -> None:
    assert mk.parse_max_turns_notice(mk.max_turns_notice(turns)) == turns
    assert mk.parse_max_turns_notice(mk.max_turns_notice(turns) + "\n") is None
    assert mk.parse_max_turns_notice("reached max turns") is None


@pytest.mark.parametrize(
    "reason",
    [mk.abort_reconnect_failed(5), mk.abort_malformed_failed(5), mk.abort_llm_failed(5, "boom")],
)
def test_r_retry_10_every_exhaustion_reason_parses_back_to_its_budget(reason: str) -> None:
    assert mk.parse_retries_exhausted(reason) == 5


def test_r_retry_10_other_abort_reasons_state_no_budget() -> None:
    assert mk.parse_retries_exhausted(mk.ABORT_BY_USER) is None


@pytest.mark.parametrize("kind", ["image", "file"])
def test_attachment_lines_parse_back_to_kind_and_target(kind: str) -> None:
    line = mk.attached_line(kind, "/ws/a b.png")  # type: ignore[arg-type]
    assert line == (mk.attached_image_line if kind == "image" else mk.attached_file_line)(
        "/ws/a b.png"
    )
    assert mk.parse_attached_line(line) == (kind, "/ws/a b.png")
    assert mk.parse_attached_line(line + "\nmore") is None
