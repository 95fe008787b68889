"""Resume: a Session continued from its trace (SPEC §13).

Owns: locating the session, taking its lock before reading, the fold of its files (earlier
files through their summaries in the sidecar, R-TRACE-19, built and stored when missing; the
latest file record by record, for the context and the counters), the closure of
a dangling request or compaction (R-RESUME-14a, R-RESUME-14), the tool-call ids the trace
records handed to an LLM that ``SeedsToolCallIds`` (R-RUN-20), and handing an ordinary
``Session`` that appends to the same file.  Does not: rebuild the context itself — the
projections do, exactly as they do for the live session (R-RESUME-18).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import anyio
import msgspec

from engine import LLM, Environment, SeedsToolCallIds, Session, check_workspace, recorded_options
from eventstore import (
    DataRoot,
    OmniMessage,
    SessionMetaPayload,
    SummaryCache,
    ToolCallPayload,
    ToolDefinition,
    ToolListReadyPayload,
    TraceWriter,
    UnknownPayload,
    iter_trace,
)
from projections import FileSummary, ModelContext, SessionState, summarize_file

__all__ = ["folded_state", "load_session", "resume_session"]


def _meta_of(record: OmniMessage) -> OmniMessage | None:
    """The session_meta record, minus a ``source`` this version does not know (R-RESUME-2)."""
    if record.type != "session_meta":
        return None
    p = record.payload
    if isinstance(p, SessionMetaPayload):
        return record
    if isinstance(p, UnknownPayload):
        raw = {k: v for k, v in p.raw.items() if k != "source"}
        try:
            payload = msgspec.convert(raw, SessionMetaPayload)
        except msgspec.ValidationError:
            return None
        return OmniMessage(record.timestamp, record.type, payload)
    return None


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a trace is folded.

    The fold keeps every record of the latest file alive (the history), and each record is a
    few tracked objects: with the collector running, its generation-2 passes walk that growing
    heap again and again, which costs about a third of a resume of a large file.  The fold
    creates no reference cycles worth collecting, and the collector runs again right after,
    with what the fold allocated already in its oldest generation.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            # Hand what the fold allocated straight to the oldest generation: re-enabled as it
            # is, the collector would first walk every record in a young collection and again
            # in a middle one before they settle there (a tenth of a large resume each).
            # Skipped when the program froze objects itself: unfreeze would release them too.
            gc.freeze()
            gc.unfreeze()
        gc.enable()


def load_session(
    root: DataRoot,
    session_id: str,
    *,
    project: str | None = None,
    agent: str | None = None,
    store_summaries: bool = False,
) -> tuple[list[Path], Path, ModelContext, SessionState, OmniMessage]:
    """Fold a session's files without taking its lock (read-only inspection and resume).

    Returns ``(files, latest, context, state, session_meta)``.  The context folds the latest
    file only; the state folds every file up to it (R-PROJ-1, R-RESUME-11), the earlier ones
    through their summaries (R-TRACE-19: a missing or stale one is built from its file, and
    with ``store_summaries`` stored, best effort, in the sidecar — ``resume_session`` does,
    under the session's lock; read-only inspection changes no file).
    """
    return _load(
        root, session_id, project=project, agent=agent, store=store_summaries, call_ids=None
    )


def _recorded_tools(path: Path) -> list[ToolDefinition]:
    """The tools of the last ``tool_list_ready`` in ``path`` (every file head holds one)."""
    tools: list[ToolDefinition] = []
    for record in iter_trace(path):
        payload = record.payload
        if type(payload) is ToolListReadyPayload:
            tools = list(payload.tools)
    return tools


def _load(
    root: DataRoot,
    session_id: str,
    *,
    project: str | None,
    agent: str | None,
    store: bool,
    call_ids: set[str] | None,
) -> tuple[list[Path], Path, ModelContext, SessionState, OmniMessage]:
    """``load_session``; with ``call_ids``, also every tool-call id the files record (R-RUN-20:
    the earlier files' from their summaries, the latest's from its fold)."""
    files, latest = root.session_files(session_id, project=project, agent=agent)
    used = files[: files.index(latest) + 1]
    state = SessionState()
    ctx = ModelContext()
    meta: OmniMessage | None = None
    apply_ctx, apply_state = ctx.apply, state.apply
    with _gc_paused():
        _fold_earlier(state, used[:-1], sidecar=latest, store=store, call_ids=call_ids)
        records = iter_trace(latest)
        for record in records:
            meta = _meta_of(record)
            apply_ctx(record)
            apply_state(record)
            if meta is not None:
                break
        # The same records, once the session_meta is found (the hot loop of a resume).
        if call_ids is None:
            for record in records:
                apply_ctx(record)
                apply_state(record)
        else:
            take = call_ids.add
            for record in records:
                apply_ctx(record)
                apply_state(record)
                payload = record.payload
                if type(payload) is ToolCallPayload:
                    take(payload.tool_call_id)
    if meta is None:
        raise ValueError(f"{latest}: no session_meta record; the trace cannot be resumed")
    return used, latest, ctx, state, meta


def _fold_earlier(
    state: SessionState,
    paths: list[Path],
    *,
    sidecar: Path,
    store: bool,
    call_ids: set[str] | None,
) -> None:
    """Fold the closed files before the latest one into ``state`` (R-TRACE-19)."""
    if not paths:
        return
    cache = SummaryCache.beside(sidecar, FileSummary)
    for path in paths:
        summary = cache.get(path)
        if summary is None:
            # Fingerprinted before the read: a file that changes while it is read gets an
            # entry that no longer matches it, never a wrong one.
            fingerprint = cache.fingerprint(path)
            summary = summarize_file(iter_trace(path))
            if fingerprint is not None:
                cache.put(path, summary, fingerprint=fingerprint)
        if call_ids is not None:
            call_ids.update(summary.call_ids)
        if not summary.merge_into(state):
            # A fragment or crash residue: its fold depends on the files before it.
            for record in iter_trace(path, report=False):
                state.apply(record)
    if store:
        cache.save()


def folded_state(paths: list[Path]) -> SessionState:
    """The state folded from a session's files in order (R-PROJ-1): the earlier ones through
    their summaries (the sidecar's when current, R-TRACE-19), the last record by record.
    Takes no lock and writes nothing (analytics' ``status`` column)."""
    state = SessionState()
    _fold_earlier(state, paths[:-1], sidecar=paths[-1], store=False, call_ids=None)
    for record in iter_trace(paths[-1], report=False):
        state.apply(record)
    return state


# Session.create's keyword options that a resume takes (system_prompt is the recorded one).
_OPTIONS: Final = frozenset(
    {
        "compaction",
        "max_turns",
        "retry",
        "fsync",
        "mcp",
        "approval_rules",
        "sandbox",
        "network",
        "snapshots",
        "thinking_level",
    }
)


async def resume_session(
    root: DataRoot | str | Path | None,
    session_id: str,
    *,
    llm: LLM,
    environment: Environment,
    workspace: str | Path | None = None,
    project: str | None = None,
    agent: str | None = None,
    **options: Any,
) -> Session:
    """A ``Session`` that continues ``session_id``'s latest trace file (R-RESUME-1…3).

    ``workspace`` overrides the recorded one (a trace from another machine); ``options`` are
    ``Session.create``'s keyword options except ``system_prompt`` (the recorded one is kept).
    An option not given takes the session's recorded setting (R-SET-3: the last ``settings``
    record), else the default; one given overrides it and, when it differs, the next run
    records it (R-SET-2).  Raises ``SessionLocked`` while another writer holds the session.
    """
    if "system_prompt" in options:
        raise TypeError("resume_session() does not accept system_prompt: the recorded one is kept")
    unknown = set(options) - _OPTIONS
    if unknown:
        raise TypeError(f"resume_session() got unexpected options: {', '.join(sorted(unknown))}")
    data_root = root if isinstance(root, DataRoot) else DataRoot(root)
    location = data_root.locate(session_id, project=project, agent=agent)
    latest = data_root.latest_trace(session_id, project=location.project, agent=location.agent)
    fsync = options.get("fsync", "turn")
    # R-TRACE-18a: the lock is taken before the trace is read, and the torn tail repaired.
    writer = TraceWriter(latest, fsync=fsync, session_id=session_id)
    try:
        call_ids: set[str] = set()
        files, latest_now, ctx, state, meta = _load(
            data_root,
            session_id,
            project=location.project,
            agent=location.agent,
            store=True,
            call_ids=call_ids,
        )
        if latest_now != latest:
            raise RuntimeError(f"{latest}: the session's latest file changed while resuming")
        payload = meta.payload
        assert isinstance(payload, SessionMetaPayload)
        given = workspace if workspace is not None else payload.workspace
        ws = await anyio.to_thread.run_sync(check_workspace, given)
        for closure in ctx.closure_records():  # R-RESUME-14a, R-RESUME-14
            writer.append(closure)
            ctx.apply(closure)
            state.apply(closure)
    except BaseException:
        writer.close()
        raise
    if isinstance(llm, SeedsToolCallIds):
        llm.seed_tool_call_ids(call_ids)  # R-RUN-20: before the resumed session's first request
    # R-SET-3: the recorded settings (MCP servers included, R-MCP-4), overridden by the options.
    chosen = {
        **recorded_options(state.settings),
        **{k: v for k, v in options.items() if k != "fsync"},
    }
    if chosen.get("mcp"):
        # R-MCP-4: an MCP server that cannot be reached keeps the tools it was recorded with.
        chosen["recorded_tools"] = _recorded_tools(latest)
    try:
        session = Session.resume(
            llm=llm,
            environment=environment,
            root=data_root,
            project=location.project,
            agent=location.agent,
            workspace=ws,
            meta=meta,
            writer=writer,
            context=ctx,
            state=state,
            fsync=fsync,
            **chosen,
        )
    except BaseException:  # e.g. SandboxUnavailable (R-BOX-2): the lock is not kept
        writer.close()
        raise
    del files
    return session
