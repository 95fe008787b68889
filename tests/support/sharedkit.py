"""Inputs from ``../shared`` (SPEC, API.md, reference traces): absent means skip on a developer's
machine, but fail under ``CI=true``, so a missing input can never turn into a green run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def check_shared(path: Path, *, ci: bool) -> None:
    """Return when ``path`` exists; otherwise fail (``ci``) or skip."""
    if path.exists():
        return
    if ci:
        pytest.fail(
            f"test input {path} is missing: under CI=true a ../shared input may not be skipped",
            pytrace=False,
        )
    pytest.skip(f"{path} is absent (../shared is not beside the checkout)")
