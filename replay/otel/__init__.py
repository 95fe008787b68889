"""OpenTelemetry export: sessions as spans over OTLP/HTTP (the ``otel`` extra).

``export_otlp(files, endpoint=URL)`` sends a finished session; ``LiveExport(URL)`` gives record
listeners that send a running session's spans as its records are written (``penguin serve
--otlp``).  Spans follow the GenAI semantic conventions: ``invoke_agent`` per run, ``chat
{model}`` per model request (tokens, provider, model), ``execute_tool {name}`` per tool call,
subagents nested under the call that ran them; every time is a record's timestamp.  The SDK is
imported on first use: importing this module works without it (``OtelUnavailable`` then says
how to install it).
"""

from __future__ import annotations

from ._export import (
    LiveExport,
    OtelError,
    OtelExportError,
    OtelUnavailable,
    export_otlp,
    traces_url,
)
from ._spans import SessionSpans, timestamp_ns

__all__ = [
    "LiveExport",
    "OtelError",
    "OtelExportError",
    "OtelUnavailable",
    "SessionSpans",
    "export_otlp",
    "timestamp_ns",
    "traces_url",
]
