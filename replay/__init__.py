"""Resume, replay, golden files and validation: the library under the ``penguin`` application."""

from __future__ import annotations

from . import golden
from ._fork import fork_session
from ._replay_llm import ReplayEnvironment, ReplayLLM, recorded_approve
from ._resume import load_session, resume_session
from ._validate import Finding, validate_file, validate_paths, validate_session

__all__ = [
    "Finding",
    "ReplayEnvironment",
    "ReplayLLM",
    "fork_session",
    "golden",
    "load_session",
    "recorded_approve",
    "resume_session",
    "validate_file",
    "validate_paths",
    "validate_session",
]
