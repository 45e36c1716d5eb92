"""The Peri-style agent loop: Receive -> Compact -> Reason -> Act, on any OpenAI-compatible model.

General layout: ``_queue`` (the inbox and its kinds), ``_transcript`` (append-only conversation
with flags), ``_usage`` (reported vs estimated tokens), ``_compaction`` and ``_summary`` (the
pure compaction planner and full-compaction text).
"""

from .._util import fix_public_module
from ._compaction import CompactionAction as CompactionAction
from ._compaction import CompactionConfig as CompactionConfig
from ._compaction import CompactRetriesExhausted as CompactRetriesExhausted
from ._compaction import Decision as Decision
from ._compaction import MicroPlan as MicroPlan
from ._compaction import decide as decide
from ._compaction import plan_micro as plan_micro
from ._queue import MessageKind as MessageKind
from ._queue import MessageQueue as MessageQueue
from ._queue import MessageSource as MessageSource
from ._queue import QueuedMessage as QueuedMessage
from ._summary import SummaryFailed as SummaryFailed
from ._transcript import Entry as Entry
from ._transcript import Message as Message
from ._transcript import Projection as Projection
from ._transcript import Role as Role
from ._transcript import StaleTranscript as StaleTranscript
from ._transcript import ToolCall as ToolCall
from ._transcript import Transcript as Transcript
from ._transcript import TranscriptError as TranscriptError
from ._usage import ContextReading as ContextReading
from ._usage import ModelUsage as ModelUsage
from ._usage import TokenTotals as TokenTotals
from ._usage import UsageTracker as UsageTracker

__all__ = [
    "CompactRetriesExhausted",
    "CompactionAction",
    "CompactionConfig",
    "ContextReading",
    "Decision",
    "Entry",
    "Message",
    "MessageKind",
    "MessageQueue",
    "MessageSource",
    "MicroPlan",
    "ModelUsage",
    "Projection",
    "QueuedMessage",
    "Role",
    "StaleTranscript",
    "SummaryFailed",
    "TokenTotals",
    "ToolCall",
    "Transcript",
    "TranscriptError",
    "UsageTracker",
    "decide",
    "plan_micro",
]

fix_public_module(globals(), __all__)
