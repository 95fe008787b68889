"""The public views over ``_records``: ``sessions``, ``records``, ``requests``, ``tool_calls``,
``usage``, ``diagnostics``.

Owns: the SQL that folds records the way the ``Usage`` projection does (R-USAGE-1..3,
R-RUN-16, R-PROJ-4), with window functions instead of a Python loop: the file counter, the
compaction flag, the open request span, and the "``token_usage`` right after a ``request_end``"
rule.  Does not: read files (``_load``) or name reports (``_reports``).

Which records count is the codec's decision: a known payload whose fields do not fit its schema
is an unknown payload to the engine, so each kind the fold needs is typed here (``k``); every
other record still advances the fold (it resets "right after a request_end"), and origin-tagged
or partial records are ignored, as the projection ignores them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import duckdb

__all__ = ["VIEWS", "create_views"]

#: The public views, in dependency order.
VIEWS: Final = ("sessions", "records", "requests", "tool_calls", "usage", "diagnostics")

_KIND: Final = """
CASE
  WHEN type = 'session_meta' THEN CASE WHEN _is_str(p.session_id) AND _is_str(p.provider)
      AND _is_str(p.model_id) AND (_is_int(p.model_context_window)
                                   OR _is_str(p.model_context_window))
      AND _is_str(p.system_prompt) AND _is_str(p.agent_state) AND _is_str(p.workspace)
      AND (p.source IS NULL OR _in(p.source, ['subagent', 'schedule'])) THEN 'M' END
  WHEN type = 'event_msg' THEN CASE _str(p.type)
    WHEN 'request_begin' THEN 'B'
    WHEN 'request_end' THEN CASE WHEN _stop(p.status) AND _opt_str(p.error_message)
        AND _opt_int(p.attempt) AND _opt_int(p.retry_in_ms) THEN 'E' END
    WHEN 'token_usage' THEN CASE WHEN _is_obj(p.session) AND _is_obj(p.request)
        AND _counts_ok(_counts(p.session)) AND _counts_ok(_counts(p.request)) THEN 'U' END
    WHEN 'compaction_begin' THEN CASE WHEN _in(p.reason, ['context', 'turns', 'manual'])
        AND _in(p.mode, ['summarize', 'discard']) AND _is_int(p.context) AND _is_int(p.turns)
        THEN 'CB' END
    WHEN 'compaction_end' THEN CASE WHEN _in(p.reason, ['context', 'turns', 'manual'])
        AND _in(p.mode, ['summarize', 'discard']) AND _stop(p.status)
        AND _opt_int(p.attempt) AND _opt_str(p.error_message) THEN 'CE' END
    WHEN 'abort' THEN CASE WHEN _opt_str(p.reason) THEN 'A' END
    WHEN 'approval_decision' THEN CASE WHEN _in(p.decision, ['allow', 'deny', 'forbidden'])
        AND _is_str(p.tool_call_id) THEN 'D' END
  END
  WHEN type = 'model_msg' THEN CASE _str(p.type)
    WHEN 'tool_call' THEN CASE WHEN _in(p.role, ['user', 'assistant']) AND _is_str(p.name)
        AND _is_str(p.arguments) AND _is_str(p.tool_call_id) AND _opt_stop(p.stop_reason)
        THEN 'TC' END
    WHEN 'tool_call_output' THEN CASE WHEN _in(p.role, ['user', 'assistant'])
        AND _is_str(p.output) AND _is_str(p.tool_call_id) AND _opt_stop(p.stop_reason)
        AND (p.images IS NULL OR _is_arr(p.images)) THEN 'TO' END
    WHEN 'partial_text' THEN 'P' WHEN 'partial_thinking' THEN 'P'
    WHEN 'partial_tool_call' THEN 'P' WHEN 'partial_tool_call_output' THEN 'P'
  END
END"""

_SQL: Final = [
    # Every record with its kind and its position in the session (files by index, then lines).
    f"""
    CREATE OR REPLACE TEMP TABLE _ev AS
    SELECT r.*, coalesce({_KIND}, 'O') AS k,
        row_number() OVER (PARTITION BY session_id ORDER BY file_index, path, line_no) AS seq
    FROM _records r
    """,
    # Per session: the first valid session_meta, creation time, day, file count.
    """
    CREATE OR REPLACE TEMP TABLE _sessions AS
    WITH f AS (
        SELECT session_id, any_value(project) AS project, any_value(agent) AS agent,
            min(date_dir) AS date_dir, count(*) AS files
        FROM _files GROUP BY session_id
    ), m AS (
        SELECT session_id, arg_min(p, seq) AS p FROM _ev WHERE k = 'M' GROUP BY session_id
    ), t AS (
        SELECT session_id, count(*) AS records, max(try_cast(ts AS TIMESTAMPTZ)) AS last_ts,
            arg_min(try_cast(ts AS TIMESTAMPTZ), seq) AS first_ts
        FROM _ev GROUP BY session_id
    )
    SELECT f.session_id, f.project, f.agent, _str(m.p.workspace) AS workspace,
        _str(m.p.provider) AS provider, _str(m.p.model_id) AS model, _str(m.p.source) AS source,
        coalesce(try_strptime(regexp_extract(f.session_id,
            '^session-(\\d{4}-\\d{2}-\\d{2}-\\d{2}-\\d{2}-\\d{2})-[0-9a-f]{8}$', 1),
            '%Y-%m-%d-%H-%M-%S'), t.first_ts::TIMESTAMP) AS created,
        f.files, coalesce(t.records, 0) AS records, t.last_ts AS last_activity,
        coalesce(try_cast(f.date_dir AS DATE), created::DATE) AS day
    FROM f LEFT JOIN m USING (session_id) LEFT JOIN t USING (session_id)
    """,
    """
    CREATE OR REPLACE TEMP VIEW sessions AS
    SELECT session_id, project, agent, workspace, provider, model, created, files, records,
        last_activity, source, day
    FROM _sessions
    """,
    """
    CREATE OR REPLACE TEMP VIEW records AS
    SELECT e.session_id, e.path AS file, e.file_index, e.line_no AS line, e.ordinal, e.seq,
        e.ts AS timestamp, try_cast(e.ts AS TIMESTAMPTZ) AS time, e.type,
        _str(e.p.type) AS payload_type, e.nbytes AS bytes, e.has_origin, s.day
    FROM _ev e JOIN _sessions s USING (session_id)
    """,
    # The Usage fold.  ``span_k``/``span_seq``: the last session_meta, request_begin or
    # request_end before the record (an open span is a request_begin there).
    """
    CREATE OR REPLACE TEMP TABLE _fold AS
    WITH e AS (
        SELECT *,
            greatest(count(*) FILTER (WHERE k = 'M') OVER (w ROWS BETWEEN UNBOUNDED PRECEDING
                                                            AND CURRENT ROW), 1) AS file_no,
            coalesce(last_value(CASE k WHEN 'CB' THEN true WHEN 'CE' THEN false
                                       WHEN 'M' THEN false END IGNORE NULLS)
                     OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), false)
                AS in_compaction,
            last_value(CASE WHEN k IN ('M', 'B', 'E') THEN k END IGNORE NULLS)
                OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS span_k,
            last_value(CASE WHEN k IN ('M', 'B', 'E') THEN seq END IGNORE NULLS)
                OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS span_seq,
            lag(k) OVER w AS prev_k
        FROM _ev
        WHERE NOT has_origin AND k <> 'P'
        WINDOW w AS (PARTITION BY session_id ORDER BY seq)
    )
    SELECT *,
        CASE WHEN k = 'E' THEN CASE WHEN span_k = 'B' THEN span_seq ELSE seq END END AS row_seq,
        lag(CASE WHEN k = 'E' THEN CASE WHEN span_k = 'B' THEN span_seq ELSE seq END END)
            OVER (PARTITION BY session_id ORDER BY seq) AS prev_row_seq
    FROM e
    WHERE k IN ('M', 'B', 'E', 'U', 'CB', 'CE', 'A')
    """,
    """
    CREATE OR REPLACE TEMP VIEW requests AS
    WITH opened AS (
        SELECT session_id, seq AS row_seq, file_no, path AS begin_file,
            ordinal AS begin_ordinal, ts AS begin_ts,
            CASE WHEN in_compaction THEN 'compaction' ELSE 'turn' END AS kind
        FROM _fold WHERE k = 'B'
        UNION ALL
        SELECT session_id, seq, file_no, NULL, NULL, NULL,
            CASE WHEN in_compaction THEN 'compaction' ELSE 'turn' END
        FROM _fold WHERE k = 'E' AND span_k IS DISTINCT FROM 'B'
    ), ended AS (
        SELECT session_id, row_seq, path AS end_file, ordinal AS end_ordinal, ts AS end_ts,
            _str(p.status) AS status, _int(p.attempt) AS attempt,
            _int(p.retry_in_ms) AS retry_in_ms, _str(p.error_message) AS error_message
        FROM _fold WHERE k = 'E'
    ), tokens AS (
        SELECT session_id, row_seq, arg_max(_counts(p.request), seq) AS c
        FROM (SELECT session_id, seq, p,
                     CASE WHEN span_k = 'B' THEN span_seq
                          WHEN prev_k = 'E' THEN prev_row_seq END AS row_seq
              FROM _fold WHERE k = 'U')
        WHERE row_seq IS NOT NULL
        GROUP BY ALL
    )
    SELECT o.session_id, s.project, s.agent, s.provider, s.model, s.day, o.row_seq AS seq,
        coalesce(o.begin_file, n.end_file) AS file, o.file_no, o.begin_ordinal,
        n.end_ordinal, o.kind, n.status, n.attempt, n.retry_in_ms, n.error_message,
        o.begin_ts, n.end_ts,
        epoch_ms(try_cast(n.end_ts AS TIMESTAMPTZ))
            - epoch_ms(try_cast(o.begin_ts AS TIMESTAMPTZ)) AS duration_ms,
        coalesce(_int(t.c.cache_read), 0) AS cache_read,
        coalesce(_int(t.c.cache_write), 0) AS cache_write,
        coalesce(_int(t.c.output), 0) AS output,
        coalesce(_int(t.c.total), 0) AS total,
        t.c IS NOT NULL AS has_usage
    FROM opened o
    LEFT JOIN ended n USING (session_id, row_seq)
    LEFT JOIN tokens t USING (session_id, row_seq)
    JOIN _sessions s USING (session_id)
    """,
    """
    CREATE OR REPLACE TEMP VIEW usage AS
    SELECT f.session_id, s.project, s.agent, s.provider, s.model, s.day, f.path AS file,
        f.file_no, f.ordinal, f.seq, f.ts AS timestamp, try_cast(f.ts AS TIMESTAMPTZ) AS time,
        CASE WHEN f.span_k = 'B' THEN f.span_seq WHEN f.prev_k = 'E' THEN f.prev_row_seq END
            AS request_seq,
        coalesce(_int(_counts(f.p.request).cache_read), 0) AS cache_read,
        coalesce(_int(_counts(f.p.request).cache_write), 0) AS cache_write,
        coalesce(_int(_counts(f.p.request).output), 0) AS output,
        coalesce(_int(_counts(f.p.request).total), 0) AS total,
        coalesce(_int(_counts(f.p.session).cache_read), 0) AS session_cache_read,
        coalesce(_int(_counts(f.p.session).cache_write), 0) AS session_cache_write,
        coalesce(_int(_counts(f.p.session).output), 0) AS session_output,
        coalesce(_int(_counts(f.p.session).total), 0) AS session_total
    FROM _fold f JOIN _sessions s USING (session_id)
    WHERE f.k = 'U'
    """,
    # R-MSG-15: only a tool_call whose stop_reason is completed is a real call.
    """
    CREATE OR REPLACE TEMP VIEW tool_calls AS
    WITH calls AS (
        SELECT session_id, seq, path, ordinal, ts, _str(p.tool_call_id) AS call_id,
            _str(p.name) AS name, strlen(_str(p.arguments)) AS arguments_bytes
        FROM _ev
        WHERE k = 'TC' AND NOT has_origin
          AND coalesce(_str(p.stop_reason), 'completed') = 'completed'
    ), answers AS (
        SELECT session_id, seq, k, ts, _str(p.tool_call_id) AS call_id,
            _str(p.decision) AS decision,
            coalesce(_str(p.stop_reason), 'completed') AS status,
            strlen(_str(p.output)) AS output_bytes
        FROM _ev WHERE k IN ('D', 'TO') AND NOT has_origin
    ), firsts AS (
        SELECT c.session_id, c.seq,
            arg_min(a.decision, a.seq) FILTER (WHERE a.k = 'D') AS decision,
            arg_min({'ts': a.ts, 'status': a.status, 'bytes': a.output_bytes}, a.seq)
                FILTER (WHERE a.k = 'TO') AS out
        FROM calls c JOIN answers a
          ON a.session_id = c.session_id AND a.call_id = c.call_id AND a.seq > c.seq
        GROUP BY ALL
    )
    SELECT c.session_id, s.project, s.agent, s.provider, s.model, s.day, c.path AS file,
        c.ordinal, c.ts AS timestamp, try_cast(c.ts AS TIMESTAMPTZ) AS time, c.call_id,
        c.name, c.arguments_bytes, f.decision, f.out.status AS output_status,
        epoch_ms(try_cast(f.out.ts AS TIMESTAMPTZ)) - epoch_ms(try_cast(c.ts AS TIMESTAMPTZ))
            AS duration_ms,
        f.out.bytes AS output_bytes
    FROM calls c LEFT JOIN firsts f USING (session_id, seq) JOIN _sessions s USING (session_id)
    """,
    """
    CREATE OR REPLACE TEMP VIEW diagnostics AS
    SELECT d.session_id, d.path AS file, d.line, d.kind, d.detail,
        coalesce(s.day, try_cast(f.date_dir AS DATE)) AS day
    FROM _diagnostics d JOIN _files f ON f.path = d.path
    LEFT JOIN _sessions s ON s.session_id = d.session_id
    """,
]


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """Create the public views (and their helper tables) over ``_records``."""
    for statement in _SQL:
        con.execute(statement)
