"""The public names of ``projections``, listed once.

Type checkers read this stub; at run time ``projections/__init__.py`` derives ``__all__`` and the
lazy ``__getattr__`` (PEP 562) from the same lines (``lazy_loader.attach_stub``), so a name
is exported by adding its import here and nowhere else.
"""

from . import (
    markers as markers,
)
from ._archived import (
    archived_after as archived_after,
    is_archived as is_archived,
)
from ._context import (
    CarryOver as CarryOver,
    ModelContext as ModelContext,
)
from ._cost import (
    DEFAULT_PRICES as DEFAULT_PRICES,
    Price as Price,
    estimate_cost as estimate_cost,
    price_for as price_for,
    priced_total as priced_total,
)
from ._goal import (
    GoalOutcome as GoalOutcome,
    GoalState as GoalState,
)
from ._project import (
    project as project,
)
from ._spans import (
    Span as Span,
    SpanKind as SpanKind,
    SpanTree as SpanTree,
)
from ._state import (
    SessionSettings as SessionSettings,
    SessionState as SessionState,
    StateSummary as StateSummary,
)
from ._status import (
    RunEnd as RunEnd,
    SessionStatus as SessionStatus,
    TaskActivity as TaskActivity,
    session_status as session_status,
)
from ._summary import (
    FileFold as FileFold,
    FileSummary as FileSummary,
    GoalEffect as GoalEffect,
    GoalSummary as GoalSummary,
    UsageSummary as UsageSummary,
    summarize_file as summarize_file,
    usage_summary as usage_summary,
)
from ._usage import (
    ErrorRow as ErrorRow,
    Usage as Usage,
    UsageRow as UsageRow,
)
from .markers import (
    DEFAULT_COMPACTION_PROMPT as DEFAULT_COMPACTION_PROMPT,
)
