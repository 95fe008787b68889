"""The application layer's entry points (API.md "Additions"): console script and ``python -m``."""

from __future__ import annotations

import subprocess
import sys
from importlib import import_module

import pytest


def test_python_dash_m_penguin_prints_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "penguin", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: " in done.stdout and "penguin" in done.stdout


def test_the_old_entry_point_is_gone() -> None:
    """Issue 28: ``replay._cli:main`` was kept for one release; the CLI is ``penguin.cli:main``."""
    with pytest.raises(ModuleNotFoundError):
        import_module("replay._cli")
