"""The public views over ``_records``: ``sessions``, ``records``, ``requests``, ``tool_calls``,
``usage``, ``diagnostics``; and the per-record SQL ``_load`` applies (``KIND``,
``RECORD_COLUMNS``).

Owns: the SQL that folds records the way the ``Usage`` projection does (R-USAGE-1..3,
R-RUN-16, R-PROJ-4), with window functions instead of a Python loop: the file counter, the
compaction flag, the open request span, and the "``token_usage`` right after a ``request_end``"
rule.  Does not: read files (``_load``) or name reports (``_reports``).

Which records count is the codec's decision: a known payload whose fields do not fit its schema
is an unknown payload to the engine, so each kind the fold needs is typed here (``KIND``); every
other record still advances the fold (it resets "right after a request_end"), and origin-tagged
or partial records are ignored, as the projection ignores them.  ``seq`` orders the records of
a session (files by index, then lines); it is a position key, not a count.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import duckdb

__all__ = ["FOLD_READERS", "KIND", "RECORD_COLUMNS", "VIEWS", "create_views", "store_fold"]

#: The public views, in dependency order.
VIEWS: Final = ("sessions", "records", "requests", "tool_calls", "usage", "diagnostics")


KIND: Final = """
CASE
  WHEN type = 'session_meta' THEN CASE WHEN _is_str(ty.session_id) AND _is_str(ty.provider)
      AND _is_str(ty.model_id) AND (_is_int(ty.model_context_window, p.model_context_window)
                                    OR _is_str(ty.model_context_window))
      AND _is_str(ty.system_prompt) AND _is_str(ty.agent_state) AND _is_str(ty.workspace)
      AND (_null(ty.source) OR _in(ty.source, p.source, ['subagent', 'schedule'])) THEN 'M' END
  WHEN type = 'event_msg' THEN CASE p.type
    WHEN 'request_begin' THEN 'B'
    WHEN 'request_end' THEN CASE WHEN _stop(ty.status, p.status) AND _opt_str(ty.error_message)
        AND _opt_int(ty.attempt, p.attempt) AND _opt_int(ty.retry_in_ms, p.retry_in_ms)
        THEN 'E' END
    WHEN 'token_usage' THEN CASE WHEN _is_obj(ty.session) AND _is_obj(ty.request)
        AND _count(ty.session_cache_read, p.session.cache_read)
        AND _count(ty.session_cache_write, p.session.cache_write)
        AND _count(ty.session_output, p.session.output)
        AND _count(ty.session_total, p.session.total)
        AND _count(ty.request_cache_read, p.request.cache_read)
        AND _count(ty.request_cache_write, p.request.cache_write)
        AND _count(ty.request_output, p.request.output)
        AND _count(ty.request_total, p.request.total) THEN 'U' END
    WHEN 'compaction_begin' THEN CASE WHEN _in(ty.reason, p.reason, ['context', 'turns', 'manual'])
        AND _in(ty.mode, p.mode, ['summarize', 'discard']) AND _is_int(ty.context, p.context)
        AND _is_int(ty.turns, p.turns) THEN 'CB' END
    WHEN 'compaction_end' THEN CASE WHEN _in(ty.reason, p.reason, ['context', 'turns', 'manual'])
        AND _in(ty.mode, p.mode, ['summarize', 'discard']) AND _stop(ty.status, p.status)
        AND _opt_int(ty.attempt, p.attempt) AND _opt_str(ty.error_message) THEN 'CE' END
    WHEN 'abort' THEN CASE WHEN _opt_str(ty.reason) THEN 'A' END
    WHEN 'approval_decision' THEN CASE WHEN
        _in(ty.decision, p.decision, ['allow', 'deny', 'forbidden'])
        AND _is_str(ty.tool_call_id) THEN 'D' END
  END
  WHEN type = 'model_msg' THEN CASE p.type
    WHEN 'tool_call' THEN CASE WHEN _in(ty.role, p.role, ['user', 'assistant'])
        AND _is_str(ty.name) AND _is_str(ty.arguments) AND _is_str(ty.tool_call_id)
        AND _opt_stop(ty.stop_reason, p.stop_reason) THEN 'TC' END
    WHEN 'tool_call_output' THEN CASE WHEN _in(ty.role, p.role, ['user', 'assistant'])
        AND _is_str(ty.output) AND _is_str(ty.tool_call_id)
        AND _opt_stop(ty.stop_reason, p.stop_reason)
        AND (_null(ty.images) OR _is_arr(ty.images)) THEN 'TO' END
    WHEN 'partial_text' THEN 'P' WHEN 'partial_thinking' THEN 'P'
    WHEN 'partial_tool_call' THEN 'P' WHEN 'partial_tool_call_output' THEN 'P'
  END
END"""

#: Each record's typed columns, from ``v`` (the envelope parsed against the explicit schema,
#: every leaf as text), ``ty`` (each leaf's JSON type) and ``k`` (``KIND``): only the kinds
#: that use a column fill it.
RECORD_COLUMNS: Final = """
    v.timestamp AS ts,
    v.type AS type,
    -- the reader accepts only a list (or null) as ``origin``: the text tells an empty one
    coalesce(v.origin <> '[]', false) AS has_origin,
    p.type AS ptype,
    k,
    CASE WHEN k IN ('TC', 'TO', 'D') THEN p.tool_call_id END AS call_id,
    CASE WHEN k = 'TC' THEN p.name END AS name,
    CASE WHEN k = 'TC' THEN strlen(p.arguments) END AS arguments_bytes,
    CASE WHEN k = 'TO' THEN strlen(p.output) END AS output_bytes,
    CASE WHEN k IN ('TC', 'TO') THEN coalesce(p.stop_reason, 'completed') END AS stop_reason,
    CASE WHEN k = 'D' THEN p.decision END AS decision,
    CASE WHEN k IN ('E', 'CE') THEN p.status END AS status,
    CASE WHEN k IN ('E', 'CE') THEN _int(p.attempt) END AS attempt,
    CASE WHEN k = 'E' THEN _int(p.retry_in_ms) END AS retry_in_ms,
    CASE WHEN k IN ('E', 'CE') THEN p.error_message END AS error_message,
    CASE WHEN k IN ('A', 'CB', 'CE') THEN p.reason END AS reason,
    CASE WHEN k = 'U' THEN _typed_counts(p.request) END AS req,
    CASE WHEN k = 'U' THEN _typed_counts(p.session) END AS sess,
    CASE WHEN k = 'M' THEN {'provider': p.provider, 'model': p.model_id,
                            'workspace': p.workspace, 'source': p.source} END AS meta
"""

_SQL: Final = [
    # Every record with its kind and its position in the session (files by index, then lines).
    "CREATE OR REPLACE TEMP VIEW _ev AS SELECT * FROM _records",
    # Per session: the first valid session_meta, creation time, day, file count.
    """
    CREATE OR REPLACE TEMP TABLE _sessions AS
    WITH f AS (
        SELECT sid, any_value(session_id) AS session_id, any_value(project) AS project,
            any_value(agent) AS agent, min(date_dir) AS date_dir, count(*) AS files
        FROM _files GROUP BY sid
    ), m AS (
        SELECT sid, arg_min(meta, seq) AS meta FROM _ev WHERE k = 'M' GROUP BY sid
    ), t AS (
        SELECT sid, count(*) AS records, max(try_cast(ts AS TIMESTAMPTZ)) AS last_ts,
            arg_min(try_cast(ts AS TIMESTAMPTZ), seq) AS first_ts
        FROM _ev GROUP BY sid
    )
    SELECT f.sid, f.session_id, f.project, f.agent, m.meta.workspace AS workspace,
        m.meta.provider AS provider, m.meta.model AS model, m.meta.source AS source,
        coalesce(try_strptime(regexp_extract(f.session_id,
            '^session-(\\d{4}-\\d{2}-\\d{2}-\\d{2}-\\d{2}-\\d{2})-[0-9a-f]{8}$', 1),
            '%Y-%m-%d-%H-%M-%S'), t.first_ts::TIMESTAMP) AS created,
        f.files, coalesce(t.records, 0) AS records, t.last_ts AS last_activity,
        coalesce(try_cast(f.date_dir AS DATE), created::DATE) AS day
    FROM f LEFT JOIN m USING (sid) LEFT JOIN t USING (sid)
    """,
    """
    CREATE OR REPLACE TEMP VIEW sessions AS
    SELECT session_id, project, agent, workspace, provider, model, created, files, records,
        last_activity, source, day, st.status
    FROM _sessions LEFT JOIN _status st USING (session_id)
    """,
    """
    CREATE OR REPLACE TEMP VIEW records AS
    SELECT s.session_id, f.path AS file, e.file_index, e.line_no AS line, e.ordinal, e.seq,
        e.ts AS timestamp, try_cast(e.ts AS TIMESTAMPTZ) AS time, e.type,
        e.ptype AS payload_type, e.nbytes AS bytes, e.has_origin, s.day
    FROM _ev e JOIN _sessions s USING (sid) JOIN _files f ON f.fid = e.fid
    """,
    # The Usage fold.  ``span_k``/``span_seq``: the last session_meta, request_begin or
    # request_end before the record (an open span is a request_begin there).
    """
    CREATE OR REPLACE TEMP VIEW _fold AS
    WITH base AS (
        -- only the columns the fold reads: windows over the wide records cost ten times more
        SELECT sid, seq, fid, ordinal, ts, k, status, attempt, retry_in_ms, error_message, req,
            sess, lag(k) OVER (PARTITION BY sid ORDER BY seq) AS prev_k
        FROM _ev
        WHERE NOT has_origin AND k <> 'P'
    ), rel AS (
        SELECT * FROM base WHERE k IN ('M', 'B', 'E', 'U', 'CB', 'CE', 'A')
    ), e AS (
        -- "the last X before this record" as a running max of seq * 4 + code (seq grows).
        SELECT *,
            greatest(count(*) FILTER (WHERE k = 'M') OVER (w ROWS BETWEEN UNBOUNDED PRECEDING
                                                            AND CURRENT ROW), 1) AS file_no,
            max(CASE k WHEN 'CB' THEN seq * 4 + 1 WHEN 'CE' THEN seq * 4 + 2
                       WHEN 'M' THEN seq * 4 + 3 END)
                OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS last_comp,
            max(CASE k WHEN 'M' THEN seq * 4 + 1 WHEN 'B' THEN seq * 4 + 2
                       WHEN 'E' THEN seq * 4 + 3 END)
                OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS last_span
        FROM rel
        WINDOW w AS (PARTITION BY sid ORDER BY seq)
    ), f AS (
        SELECT * EXCLUDE (last_comp, last_span),
            coalesce(last_comp % 4 = 1, false) AS in_compaction,
            CASE last_span % 4 WHEN 1 THEN 'M' WHEN 2 THEN 'B' WHEN 3 THEN 'E' END AS span_k,
            last_span // 4 AS span_seq
        FROM e
    )
    SELECT *,
        CASE WHEN k = 'E' THEN CASE WHEN span_k = 'B' THEN span_seq ELSE seq END END AS row_seq,
        lag(CASE WHEN k = 'E' THEN CASE WHEN span_k = 'B' THEN span_seq ELSE seq END END)
            OVER (PARTITION BY sid ORDER BY seq) AS prev_row_seq
    FROM f
    """,
    """
    CREATE OR REPLACE TEMP VIEW requests AS
    WITH opened AS (
        SELECT sid, seq AS row_seq, file_no, fid AS begin_fid,
            ordinal AS begin_ordinal, ts AS begin_ts,
            CASE WHEN in_compaction THEN 'compaction' ELSE 'turn' END AS kind
        FROM _fold WHERE k = 'B'
        UNION ALL
        SELECT sid, seq, file_no, NULL, NULL, NULL,
            CASE WHEN in_compaction THEN 'compaction' ELSE 'turn' END
        FROM _fold WHERE k = 'E' AND span_k IS DISTINCT FROM 'B'
    ), ended AS (
        SELECT sid, row_seq, fid AS end_fid, ordinal AS end_ordinal, ts AS end_ts,
            status, attempt, retry_in_ms, error_message
        FROM _fold WHERE k = 'E'
    ), tokens AS (
        SELECT sid, row_seq, arg_max(req, seq) AS c
        FROM (SELECT sid, seq, req,
                     CASE WHEN span_k = 'B' THEN span_seq
                          WHEN prev_k = 'E' THEN prev_row_seq END AS row_seq
              FROM _fold WHERE k = 'U')
        WHERE row_seq IS NOT NULL
        GROUP BY ALL
    )
    SELECT s.session_id, s.project, s.agent, s.provider, s.model, s.day, o.row_seq AS seq,
        f.path AS file, o.file_no, o.begin_ordinal,
        n.end_ordinal, o.kind, n.status, n.attempt, n.retry_in_ms, n.error_message,
        o.begin_ts, n.end_ts,
        epoch_ms(try_cast(n.end_ts AS TIMESTAMPTZ))
            - epoch_ms(try_cast(o.begin_ts AS TIMESTAMPTZ)) AS duration_ms,
        coalesce(t.c.cache_read, 0) AS cache_read,
        coalesce(t.c.cache_write, 0) AS cache_write,
        coalesce(t.c.output, 0) AS output,
        coalesce(t.c.total, 0) AS total,
        t.c IS NOT NULL AS has_usage
    FROM opened o
    LEFT JOIN ended n USING (sid, row_seq)
    LEFT JOIN tokens t USING (sid, row_seq)
    JOIN _sessions s USING (sid)
    JOIN _files f ON f.fid = coalesce(o.begin_fid, n.end_fid)
    """,
    """
    CREATE OR REPLACE TEMP VIEW usage AS
    SELECT s.session_id, s.project, s.agent, s.provider, s.model, s.day, fl.path AS file,
        f.file_no, f.ordinal, f.seq, f.ts AS timestamp, try_cast(f.ts AS TIMESTAMPTZ) AS time,
        CASE WHEN f.span_k = 'B' THEN f.span_seq WHEN f.prev_k = 'E' THEN f.prev_row_seq END
            AS request_seq,
        coalesce(f.req.cache_read, 0) AS cache_read,
        coalesce(f.req.cache_write, 0) AS cache_write,
        coalesce(f.req.output, 0) AS output,
        coalesce(f.req.total, 0) AS total,
        coalesce(f.sess.cache_read, 0) AS session_cache_read,
        coalesce(f.sess.cache_write, 0) AS session_cache_write,
        coalesce(f.sess.output, 0) AS session_output,
        coalesce(f.sess.total, 0) AS session_total
    FROM _fold f JOIN _sessions s USING (sid) JOIN _files fl ON fl.fid = f.fid
    WHERE f.k = 'U'
    """,
    # R-MSG-15: only a tool_call whose stop_reason is completed is a real call.
    """
    CREATE OR REPLACE TEMP VIEW tool_calls AS
    WITH calls AS (
        SELECT sid, seq, fid, ordinal, ts, call_id, name, arguments_bytes
        FROM _ev
        WHERE k = 'TC' AND NOT has_origin AND stop_reason = 'completed'
    ), answers AS (
        SELECT sid, seq, k, ts, call_id, decision, stop_reason AS status, output_bytes
        FROM _ev WHERE k IN ('D', 'TO') AND NOT has_origin
    ), firsts AS (
        SELECT c.sid, c.seq,
            arg_min(a.decision, a.seq) FILTER (WHERE a.k = 'D') AS decision,
            arg_min({'ts': a.ts, 'status': a.status, 'bytes': a.output_bytes}, a.seq)
                FILTER (WHERE a.k = 'TO') AS out
        FROM calls c JOIN answers a
          ON a.sid = c.sid AND a.call_id = c.call_id AND a.seq > c.seq
        GROUP BY ALL
    )
    SELECT s.session_id, s.project, s.agent, s.provider, s.model, s.day, fl.path AS file,
        c.ordinal, c.ts AS timestamp, try_cast(c.ts AS TIMESTAMPTZ) AS time, c.call_id,
        c.name, c.arguments_bytes, f.decision, f.out.status AS output_status,
        epoch_ms(try_cast(f.out.ts AS TIMESTAMPTZ)) - epoch_ms(try_cast(c.ts AS TIMESTAMPTZ))
            AS duration_ms,
        f.out.bytes AS output_bytes
    FROM calls c LEFT JOIN firsts f USING (sid, seq) JOIN _sessions s USING (sid)
    JOIN _files fl ON fl.fid = c.fid
    """,
    """
    CREATE OR REPLACE TEMP VIEW diagnostics AS
    SELECT f.session_id, f.path AS file, d.line, d.kind, d.detail,
        coalesce(s.day, try_cast(f.date_dir AS DATE)) AS day
    FROM _diagnostics d JOIN _files f ON f.fid = d.fid
    LEFT JOIN _sessions s ON s.sid = d.sid
    """,
]


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """Create the public views over ``_records``: each record's kind and position and the
    sessions are computed here, as tables; the fold (``_fold``, for ``requests`` and
    ``usage``) is a view until ``store_fold``; the public views are computed by the query
    that reads them."""
    for statement in _SQL:
        con.execute(statement)


#: A query that reads these needs the fold.
FOLD_READERS: Final = re.compile(r"\b(requests|usage)\b", re.IGNORECASE)


def store_fold(con: duckdb.DuckDBPyConnection) -> None:
    """Compute the fold once and keep it (``requests`` reads it three times per query)."""
    con.execute("CREATE OR REPLACE TEMP TABLE _fold_stored AS SELECT * FROM _fold")
    con.execute("CREATE OR REPLACE TEMP VIEW _fold AS SELECT * FROM _fold_stored")
