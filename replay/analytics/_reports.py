"""Named reports: SQL over the views for the questions a fleet asks most.

Owns: the report names and their SQL.  Does not: print (the CLI) or build views (``_views``).
"""

from __future__ import annotations

from typing import Final

__all__ = ["REPORTS"]

#: ``name -> SQL``; each reads only the public views, so it runs on exported Parquet too.
REPORTS: Final[dict[str, str]] = {
    # Which tool fails most, which is slow, which is denied.
    "tools": """
        SELECT name AS tool, count(*) AS calls, count(DISTINCT session_id) AS sessions,
            count(*) FILTER (WHERE decision IN ('deny', 'forbidden')) AS denied,
            count(*) FILTER (WHERE output_status <> 'completed') AS failed,
            count(*) FILTER (WHERE output_status IS NULL) AS unanswered,
            round(100.0 * count(*) FILTER (WHERE output_status <> 'completed') / count(*), 1)
                AS failed_pct,
            round(median(duration_ms)) AS p50_ms,
            round(quantile_cont(duration_ms, 0.95)) AS p95_ms,
            round(avg(arguments_bytes)) AS avg_arguments_bytes,
            round(avg(output_bytes)) AS avg_output_bytes
        FROM tool_calls
        GROUP BY name
        ORDER BY calls DESC, tool
    """,
    # Which model retries most, and why.
    "retries": """
        SELECT provider, model, count(*) AS requests,
            count(*) FILTER (WHERE retry_in_ms IS NOT NULL) AS retries,
            round(100.0 * count(*) FILTER (WHERE retry_in_ms IS NOT NULL) / count(*), 1)
                AS retry_pct,
            count(*) FILTER (WHERE status = 'timeout') AS timeout,
            count(*) FILTER (WHERE status = 'malformed') AS malformed,
            count(*) FILTER (WHERE status = 'failed') AS failed,
            count(*) FILTER (WHERE status = 'auth') AS auth,
            count(*) FILTER (WHERE status = 'aborted') AS aborted,
            count(*) FILTER (WHERE status IS NULL) AS never_ended,
            coalesce(sum(retry_in_ms), 0) AS retry_wait_ms
        FROM requests
        GROUP BY provider, model
        ORDER BY retries DESC, requests DESC, provider, model
    """,
    # Where the tokens go, per day and model (the day of each token_usage record, UTC).
    "tokens-by-day": """
        SELECT coalesce(time::DATE, day) AS date, provider, model,
            count(DISTINCT session_id) AS sessions, count(*) AS requests,
            sum(cache_read) AS cache_read, sum(cache_write) AS cache_write,
            sum(output) AS output, sum(total) AS total
        FROM usage
        GROUP BY ALL
        ORDER BY date, provider, model
    """,
}
