"""Shared fixtures of the reliability suites: the tier switch and the figures file.

Every suite records what it tried (kills survived, crash states checked, faults injected, hostile
inputs) in ``build/reliability.json`` (CI tier, ``make test``) or
``build/reliability-extended.json`` (``make test-extended``, ``PENGUIN_EXTENDED=1``), so that the
README's Reliability table can be reproduced."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

EXTENDED = bool(os.environ.get("PENGUIN_EXTENDED"))
# One file per tier, so that a CI run never overwrites the figures of an extended one.
FIGURES = (
    Path(__file__).resolve().parents[2]
    / "build"
    / ("reliability-extended.json" if EXTENDED else "reliability.json")
)


def _record(section: str, values: dict[str, Any]) -> None:
    FIGURES.parent.mkdir(exist_ok=True)
    try:
        data = json.loads(FIGURES.read_text())
    except (FileNotFoundError, ValueError):
        data = {}
    data[section] = {
        **values,
        "tier": "extended" if EXTENDED else "ci",
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "python": platform.python_version(),
    }
    tmp = FIGURES.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, FIGURES)


@pytest.fixture(scope="session")
def figures() -> Callable[[str, dict[str, Any]], None]:
    """``figures(section, values)`` merges one suite's figures into build/reliability.json."""
    return _record
