"""The public names of ``replay``, listed once.

Type checkers read this stub; at run time ``replay/__init__.py`` derives ``__all__`` and the
lazy ``__getattr__`` (PEP 562) from the same lines (``lazy_loader.attach_stub``), so a name
is exported by adding its import here and nowhere else.
"""

from . import (
    golden as golden,
)
from ._diff import (
    Difference as Difference,
    TraceDiff as TraceDiff,
    diff_traces as diff_traces,
)
from ._export import (
    export_trace as export_trace,
    redact_record as redact_record,
)
from ._fork import (
    fork_session as fork_session,
)
from ._import import (
    ImportRefused as ImportRefused,
    ImportResult as ImportResult,
    import_trace as import_trace,
)
from ._labels import (
    request_label as request_label,
)
from ._repair import (
    RepairChange as RepairChange,
    RepairResult as RepairResult,
    repair_trace as repair_trace,
)
from ._replay_llm import (
    ReplayEnvironment as ReplayEnvironment,
    ReplayLLM as ReplayLLM,
    recorded_approve as recorded_approve,
)
from ._resume import (
    load_session as load_session,
    resume_session as resume_session,
)
from ._rewind import (
    RewindPlan as RewindPlan,
    RewindRefused as RewindRefused,
    RewindResult as RewindResult,
    TaskChanges as TaskChanges,
    collect_snapshots as collect_snapshots,
    plan_rewind as plan_rewind,
    restore_workspace as restore_workspace,
    rewind_session as rewind_session,
    session_timeline as session_timeline,
    task_changes as task_changes,
)
from ._timetravel import (
    Position as Position,
    TracePoint as TracePoint,
    context_at as context_at,
    parse_position as parse_position,
    request_at as request_at,
    trace_point as trace_point,
)
from ._validate import (
    Finding as Finding,
    validate_file as validate_file,
    validate_paths as validate_paths,
    validate_session as validate_session,
)
