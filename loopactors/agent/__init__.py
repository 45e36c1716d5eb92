"""The Peri-style agent loop: Receive -> Compact -> Reason -> Act, on any OpenAI-compatible model.

General layout: ``_loop`` (:func:`run_agent` and its stages), ``_dispatch`` (the atomic tool
round), ``_queue`` (the inbox and its kinds), ``_transcript`` (append-only conversation with
flags), ``_usage`` (reported vs estimated tokens), ``_compaction`` and ``_summary`` (the pure
compaction planner and full-compaction text), ``_compact_stage`` (applying them), ``_tools``
and ``_core_tools`` (tool sets, meta tools, the core tools), ``_workspace`` (what confines
them to the workspace), ``_sandbox`` (how ``bash`` runs a command), ``_loop_tools`` (child loops and
the sub-agent), ``_mcp`` (MCP servers as deferred tools), ``_hooks`` (middleware and its error
policy), ``_llm`` and ``_wire`` (the chat-completions client and its wire format).
"""

from .._util import fix_public_module
from ._compact_stage import MicroApplier as MicroApplier
from ._compact_stage import apply_locally as apply_locally
from ._compaction import CompactBudgetUnrecovered as CompactBudgetUnrecovered
from ._compaction import CompactionAction as CompactionAction
from ._compaction import CompactionConfig as CompactionConfig
from ._compaction import CompactRetriesExhausted as CompactRetriesExhausted
from ._compaction import Decision as Decision
from ._compaction import FullPlan as FullPlan
from ._compaction import MicroPlan as MicroPlan
from ._compaction import apply_full as apply_full
from ._compaction import apply_micro as apply_micro
from ._compaction import apply_plan as apply_plan
from ._compaction import decide as decide
from ._compaction import plan_micro as plan_micro
from ._core_tools import core_tools as core_tools
from ._hooks import AgentHooks as AgentHooks
from ._hooks import HookError as HookError
from ._hooks import ToolDecision as ToolDecision
from ._hooks import approve as approve
from ._hooks import deny as deny
from ._llm import ChatClient as ChatClient
from ._llm import ChatModel as ChatModel
from ._llm import ModelSettings as ModelSettings
from ._loop import DEFAULT_MAX_ITERATIONS as DEFAULT_MAX_ITERATIONS
from ._loop import SUBAGENT_MAX_ITERATIONS as SUBAGENT_MAX_ITERATIONS
from ._loop import AgentConfig as AgentConfig
from ._loop import AgentEvent as AgentEvent
from ._loop import AgentResult as AgentResult
from ._loop import MaxIterationsExceeded as MaxIterationsExceeded
from ._loop import run_agent as run_agent
from ._loop_tools import ChildLoops as ChildLoops
from ._loop_tools import SubAgentRun as SubAgentRun
from ._loop_tools import SubAgentStarter as SubAgentStarter
from ._loop_tools import loop_tools as loop_tools
from ._loop_tools import subagent_tool as subagent_tool
from ._mcp import McpServer as McpServer
from ._mcp import load_mcp_config as load_mcp_config
from ._mcp import open_mcp_tools as open_mcp_tools
from ._queue import MessageKind as MessageKind
from ._queue import MessageQueue as MessageQueue
from ._queue import MessageSource as MessageSource
from ._queue import QueuedMessage as QueuedMessage
from ._sandbox import BASH_MODES as BASH_MODES
from ._sandbox import BashMode as BashMode
from ._sandbox import find_bwrap as find_bwrap
from ._summary import SummaryFailed as SummaryFailed
from ._tools import Tool as Tool
from ._tools import ToolContext as ToolContext
from ._tools import ToolError as ToolError
from ._tools import ToolSet as ToolSet
from ._transcript import Entry as Entry
from ._transcript import Message as Message
from ._transcript import Projection as Projection
from ._transcript import Role as Role
from ._transcript import StaleTranscript as StaleTranscript
from ._transcript import ToolCall as ToolCall
from ._transcript import Transcript as Transcript
from ._transcript import TranscriptError as TranscriptError
from ._transcript import format_transcript as format_transcript
from ._usage import ContextReading as ContextReading
from ._usage import ModelUsage as ModelUsage
from ._usage import TokenTotals as TokenTotals
from ._usage import UsageTracker as UsageTracker
from ._wire import ChatReply as ChatReply

__all__ = [
    "BASH_MODES",
    "DEFAULT_MAX_ITERATIONS",
    "SUBAGENT_MAX_ITERATIONS",
    "AgentConfig",
    "AgentEvent",
    "AgentHooks",
    "AgentResult",
    "BashMode",
    "ChatClient",
    "ChatModel",
    "ChatReply",
    "ChildLoops",
    "CompactBudgetUnrecovered",
    "CompactRetriesExhausted",
    "CompactionAction",
    "CompactionConfig",
    "ContextReading",
    "Decision",
    "Entry",
    "FullPlan",
    "HookError",
    "MaxIterationsExceeded",
    "McpServer",
    "Message",
    "MessageKind",
    "MessageQueue",
    "MessageSource",
    "MicroApplier",
    "MicroPlan",
    "ModelSettings",
    "ModelUsage",
    "Projection",
    "QueuedMessage",
    "Role",
    "StaleTranscript",
    "SubAgentRun",
    "SubAgentStarter",
    "SummaryFailed",
    "TokenTotals",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDecision",
    "ToolError",
    "ToolSet",
    "Transcript",
    "TranscriptError",
    "UsageTracker",
    "apply_full",
    "apply_locally",
    "apply_micro",
    "apply_plan",
    "approve",
    "core_tools",
    "decide",
    "deny",
    "find_bwrap",
    "format_transcript",
    "load_mcp_config",
    "loop_tools",
    "open_mcp_tools",
    "plan_micro",
    "run_agent",
    "subagent_tool",
]

fix_public_module(globals(), __all__)
