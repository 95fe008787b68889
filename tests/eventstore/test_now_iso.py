"""``now_iso`` (R-MSG-2): the current UTC time to the millisecond, formatted once per millisecond."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from eventstore import builders


@pytest.mark.parametrize(
    "ns",
    [0, 1_752_808_222_531_999_999, 1_752_808_222_999_000_000, 4_102_444_800_001_000_000],
)
def test_now_iso_is_utc_to_the_millisecond(ns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builders.time, "time_ns", lambda: ns)
    expected = datetime.fromtimestamp(ns // 1_000_000 / 1000, UTC)
    assert builders.now_iso() == expected.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def test_now_iso_formats_once_per_millisecond(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([5_000_000_123_400_000, 5_000_000_123_900_000, 5_000_000_124_000_000])
    monkeypatch.setattr(builders.time, "time_ns", lambda: next(clock))
    first, same, later = builders.now_iso(), builders.now_iso(), builders.now_iso()
    assert first is same  # one string for the whole millisecond
    assert first.endswith(".123Z") and later.endswith(".124Z")
