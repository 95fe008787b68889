"""The application layer's entry points (API.md "Additions"): console script, ``python -m``,
and the old ``replay._cli:main`` path kept for one release."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_python_dash_m_penguin_prints_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "penguin", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: " in done.stdout and "penguin" in done.stdout


def test_old_entry_point_forwards_with_a_deprecation_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from replay import _cli

    monkeypatch.setattr(sys, "argv", ["penguin", "--help"])
    with (
        pytest.warns(DeprecationWarning, match=r"penguin\.cli:main"),
        pytest.raises(SystemExit) as exc,
    ):
        _cli.main()
    assert exc.value.code == 0
