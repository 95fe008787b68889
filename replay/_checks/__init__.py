"""The trace validator's per-file checks, one check group per concept (SPEC §16.1).

Owns: ``FileChecker`` (one file's pass, composed of the groups) and the groups themselves —
``time`` (V-19 times, V-20), ``compaction`` (V-5, V-6 closure, its V-12), ``shape`` (V-3, V-19),
``spans`` (V-4, V-11, V-14), ``retries`` (V-12, V-13), ``pairing`` (V-7 … V-10), ``texts`` (V-6
summaries, V-15, V-16), ``head`` (V-2, V-17).  Does not: read files or compare the files of a
session (``replay._validate`` does both and is the public face).
"""

from __future__ import annotations

from ._checker import GROUP_NAMES, GROUPS, FileChecker, FileSummary
from ._core import CheckGroup, FileFacts, Finding, Severity

__all__ = [
    "GROUPS",
    "GROUP_NAMES",
    "CheckGroup",
    "FileChecker",
    "FileFacts",
    "FileSummary",
    "Finding",
    "Severity",
]
