"""A missing ../shared input skips locally and fails under CI=true (issue 14, item 7)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sharedkit import check_shared


def test_a_missing_shared_input_fails_under_ci(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        check_shared(tmp_path / "absent", ci=True)


def test_a_missing_shared_input_skips_outside_ci(tmp_path: Path) -> None:
    with pytest.raises(pytest.skip.Exception):
        check_shared(tmp_path / "absent", ci=False)


def test_a_present_shared_input_runs_the_test(tmp_path: Path) -> None:
    check_shared(tmp_path, ci=True)
