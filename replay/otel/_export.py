"""Sending sessions as OpenTelemetry spans over OTLP/HTTP, with the official SDK and exporter.

Owns: ``export_otlp`` (a finished session, sent at once, every span acknowledged or an
``OtelExportError``) and ``LiveExport`` (sessions as they run: each span queued for the SDK's
``BatchSpanProcessor`` when its end record is written, sent from its thread; a failing
endpoint is logged once and never blocks or fails a session; ``shutdown`` flushes).  Does
not: map records to spans (``_spans``).  The SDK is imported on first use (the ``otel``
extra); without it ``OtelUnavailable`` says what to install.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from eventstore import OmniMessage, read_trace

from ._spans import SessionSpans, SubagentFiles

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "LiveExport",
    "OtelError",
    "OtelExportError",
    "OtelUnavailable",
    "export_otlp",
    "traces_url",
]

log = logging.getLogger("penguin.otel")

INSTALL_HINT: Final = "pip install 'penguin-engine[otel]'"
#: Seconds an OTLP request may take (the SDK retries within it).
DEFAULT_TIMEOUT_S: Final = 10.0
_SDK_LOGGERS: Final = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http",
    "opentelemetry.sdk.trace.export",
)


class OtelError(Exception):
    """The root of this package's errors."""


class OtelUnavailable(OtelError):
    """The OpenTelemetry SDK or its OTLP exporter is not installed."""

    def __init__(self) -> None:
        super().__init__(f"OpenTelemetry export needs the otel extra: {INSTALL_HINT}")


class OtelExportError(OtelError):
    """The endpoint did not accept the spans."""

    def __init__(self, message: str, *, endpoint: str) -> None:
        super().__init__(message)
        self.endpoint = endpoint


def traces_url(endpoint: str) -> str:
    """``endpoint`` as the OTLP/HTTP traces URL: a base URL (as ``OTEL_EXPORTER_OTLP_ENDPOINT``)
    gets ``/v1/traces``; a URL already ending in it is kept."""
    url = endpoint.rstrip("/")
    return url if url.endswith("/v1/traces") else f"{url}/v1/traces"


def _sdk() -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace import export as sdk_export
    except ImportError:
        raise OtelUnavailable() from None
    return OTLPSpanExporter, Resource, TracerProvider, sdk_export


def _provider(resource_attributes: Mapping[str, str] | None) -> TracerProvider:
    _, resource, tracer_provider, _ = _sdk()
    attributes = {"service.name": "penguin", **(resource_attributes or {})}
    provider: TracerProvider = tracer_provider(resource=resource.create(attributes))
    return provider


def siblings_or(fallback: SubagentFiles | None, directory: Path) -> SubagentFiles:
    """A subagent's files beside its parent's (``<dir>/<id>_NNN.jsonl``), else ``fallback``."""
    from eventstore import parse_trace_name

    def find(session_id: str) -> Sequence[Path]:
        here = sorted(
            p
            for p in directory.glob("*.jsonl")
            if (parsed := parse_trace_name(p.name)) is not None and parsed[0] == session_id
        )
        if here:
            return here
        return fallback(session_id) if fallback is not None else []

    return find


def export_otlp(
    files: Sequence[str | Path],
    *,
    endpoint: str,
    headers: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    subagent_files: SubagentFiles | None = None,
    resource_attributes: Mapping[str, str] | None = None,
) -> int:
    """Send one session (its trace ``files``) to the OTLP/HTTP ``endpoint`` as spans; its
    subagents' sessions are nested under the tool calls that ran them (found beside its files,
    else by ``subagent_files``).  Returns the number of spans the endpoint accepted; raises
    ``OtelExportError`` when it refused them or could not be reached."""
    exporter_cls, _, _, sdk_export = _sdk()
    provider = _provider(resource_attributes)
    collected: list[ReadableSpan] = []

    class _Collect(sdk_export.SpanExporter):  # type: ignore[misc,name-defined]
        def export(self, spans: Sequence[ReadableSpan]) -> Any:
            collected.extend(spans)
            return sdk_export.SpanExportResult.SUCCESS

    provider.add_span_processor(sdk_export.SimpleSpanProcessor(_Collect()))
    paths = [Path(f) for f in files]
    finder = siblings_or(subagent_files, paths[0].parent) if paths else subagent_files
    spans = SessionSpans(provider.get_tracer("penguin"), subagent_files=finder)
    for record in read_trace(paths, report=False).records:
        spans.feed(record)
    spans.close()
    provider.shutdown()
    url = traces_url(endpoint)
    exporter = exporter_cls(endpoint=url, headers=dict(headers or {}), timeout=timeout)
    try:
        with _quiet_sdk():
            result = exporter.export(collected)
    finally:
        exporter.shutdown()
    if result != sdk_export.SpanExportResult.SUCCESS:
        raise OtelExportError(
            f"{url} did not accept the {len(collected)} span(s) (unreachable, or it refused "
            "them; see the log)",
            endpoint=url,
        )
    return len(collected)


class _quiet_sdk:
    """The SDK exporter logs each failure itself; ours say it once, so silence it meanwhile."""

    def __enter__(self) -> None:
        self._levels = {name: logging.getLogger(name).level for name in _SDK_LOGGERS}
        for name in _SDK_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)

    def __exit__(self, *exc: object) -> None:
        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)


class _OnceFilter(logging.Filter):
    """Drops the SDK's own export failure messages: ``LiveExport`` logs its own, once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING


def _once_exporter(inner: SpanExporter, endpoint: str) -> SpanExporter:
    _, _, _, sdk_export = _sdk()

    class _Once(sdk_export.SpanExporter):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            self.failed = False
            self.sent = 0

        def export(self, spans: Sequence[ReadableSpan]) -> Any:
            try:
                result = inner.export(spans)
            except Exception as exc:
                result, why = sdk_export.SpanExportResult.FAILURE, repr(exc)
            else:
                why = "refused or unreachable"
            if result == sdk_export.SpanExportResult.SUCCESS:
                self.sent += len(spans)
            elif not self.failed:
                self.failed = True
                log.warning(
                    "OpenTelemetry export to %s failed (%s); spans are dropped, sessions go on "
                    "(said once)",
                    endpoint,
                    why,
                )
            return result

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    exporter: SpanExporter = _Once()
    return exporter


class LiveExport:
    """Spans of the sessions a host runs, sent as their records are written.

    ``listener(session_id)`` gives a record listener (``Session.add_record_listener``) for one
    session; ``end(session_id)`` ends what it left open when the host lets it go; ``shutdown``
    ends every session's spans and flushes (the SDK's ``BatchSpanProcessor`` sends from its own
    thread: a slow or unreachable endpoint never blocks a session).  Subagents are nested by
    ``subagent_files`` (the host's data root)."""

    def __init__(
        self,
        endpoint: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        subagent_files: SubagentFiles | None = None,
        schedule_delay_ms: int = 1000,
        resource_attributes: Mapping[str, str] | None = None,
    ) -> None:
        exporter_cls, _, _, sdk_export = _sdk()
        self.endpoint = traces_url(endpoint)
        self._provider = _provider(resource_attributes)
        exporter = exporter_cls(
            endpoint=self.endpoint, headers=dict(headers or {}), timeout=timeout
        )
        self._exporter = _once_exporter(exporter, self.endpoint)
        self._filter = _OnceFilter()
        for name in _SDK_LOGGERS:
            logging.getLogger(name).addFilter(self._filter)
        self._provider.add_span_processor(
            sdk_export.BatchSpanProcessor(self._exporter, schedule_delay_millis=schedule_delay_ms)
        )
        self._tracer = self._provider.get_tracer("penguin")
        self._subagent_files = subagent_files
        self._sessions: dict[str, SessionSpans] = {}
        self._lock = threading.Lock()
        self._broken = False

    @property
    def sent(self) -> int:
        """Spans the endpoint accepted so far."""
        return int(getattr(self._exporter, "sent", 0))

    def listener(self, session_id: str) -> Callable[[OmniMessage, Path], None]:
        def on_record(record: OmniMessage, file: Path) -> None:
            try:
                with self._lock:
                    spans = self._sessions.get(session_id)
                    if spans is None:
                        finder = siblings_or(self._subagent_files, Path(file).parent)
                        spans = SessionSpans(self._tracer, subagent_files=finder)
                        self._sessions[session_id] = spans
                    spans.feed(record)
            except Exception:
                if not self._broken:
                    self._broken = True
                    log.exception("OpenTelemetry: a record could not become spans (said once)")

        return on_record

    def end(self, session_id: str) -> None:
        with self._lock:
            spans = self._sessions.pop(session_id, None)
            if spans is not None:
                spans.close()

    def shutdown(self) -> None:
        """End every open span and send what is queued (blocks up to the exporter's timeout)."""
        with self._lock:
            for spans in self._sessions.values():
                spans.close()
            self._sessions.clear()
        self._provider.shutdown()
        for name in _SDK_LOGGERS:
            logging.getLogger(name).removeFilter(self._filter)
