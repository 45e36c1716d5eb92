"""The loop domain, pure and without trio: the ``|loop|`` syntax, specs, states, rounds,
phases, events and the per-round rules.

General layout: ``_syntax`` (parser), ``_model`` (structs and the transition function),
``_events`` (typed progress events), ``_notify`` (which events notify whom), ``_plan`` (plan
files), ``_replay`` (a round run again), ``_rules`` (prompt, next phase), ``_triggers`` (the
breaker: one ordered table of triggers), ``_control`` (the one vocabulary for acting on loops,
as protocols), ``steps`` (public: the LoopRunner's decisions as pure functions, and the effects
they return).
"""

from ._control import LoopControl as LoopControl
from ._control import LoopReader as LoopReader
from ._events import STATE_EVENTS as STATE_EVENTS
from ._events import AgentStep as AgentStep
from ._events import AnyEvent as AnyEvent
from ._events import Gap as Gap
from ._events import LoopEvent as LoopEvent
from ._events import LoopFinished as LoopFinished
from ._events import LoopInterrupted as LoopInterrupted
from ._events import LoopPaused as LoopPaused
from ._events import LoopRecovered as LoopRecovered
from ._events import LoopResumed as LoopResumed
from ._events import LoopStarted as LoopStarted
from ._events import LoopWaiting as LoopWaiting
from ._events import RoundDeferred as RoundDeferred
from ._events import RoundFinished as RoundFinished
from ._events import RoundStarted as RoundStarted
from ._events import RoundSummary as RoundSummary
from ._events import RoundWaiting as RoundWaiting
from ._events import event_decoder as event_decoder
from ._ids import LOOP_ID_GRAMMAR as LOOP_ID_GRAMMAR
from ._ids import MATCHES_SHOWN as MATCHES_SHOWN
from ._ids import MIN_TAIL as MIN_TAIL
from ._ids import loop_id_problem as loop_id_problem
from ._ids import resolve_loop_id as resolve_loop_id
from ._model import LIVE_PHASES as LIVE_PHASES
from ._model import MAX_ROUNDS as MAX_ROUNDS
from ._model import ROUNDS_CEILING as ROUNDS_CEILING
from ._model import TERMINAL_PHASES as TERMINAL_PHASES
from ._model import CheckRecord as CheckRecord
from ._model import LoopSpec as LoopSpec
from ._model import LoopState as LoopState
from ._model import Mode as Mode
from ._model import Phase as Phase
from ._model import RoundRecord as RoundRecord
from ._model import RoundStatus as RoundStatus
from ._model import StopMode as StopMode
from ._model import WorkerSpec as WorkerSpec
from ._model import check_transition as check_transition
from ._model import output_heads as output_heads
from ._model import round_of as round_of
from ._notify import NOTIFY_EVENTS as NOTIFY_EVENTS
from ._notify import Notification as Notification
from ._notify import NotifyEvent as NotifyEvent
from ._notify import check_notify as check_notify
from ._notify import notifications_for as notifications_for
from ._notify import redact_notify_url as redact_notify_url
from ._notify import shown as shown
from ._plan import Plan as Plan
from ._plan import PlanTask as PlanTask
from ._plan import parse_plan as parse_plan
from ._plan import plan_prompt as plan_prompt
from ._replay import recorded_prompt as recorded_prompt
from ._replay import replay_pair as replay_pair
from ._replay import replay_spec as replay_spec
from ._replay import replayed_round as replayed_round
from ._rules import Prompt as Prompt
from ._rules import build_prompt as build_prompt
from ._rules import check_feedback as check_feedback
from ._rules import defer_round as defer_round
from ._rules import deferred_wait as deferred_wait
from ._rules import next_phase as next_phase
from ._rules import no_completed_round as no_completed_round
from ._rules import normalize_output as normalize_output
from ._rules import round_intent as round_intent
from ._rules import stale_rounds_after as stale_rounds_after
from ._syntax import ParsedLoop as ParsedLoop
from ._syntax import parse_loop as parse_loop
from ._triggers import LIMIT_DEFAULTS as LIMIT_DEFAULTS
from ._triggers import SIMILARITY_DEFAULT as SIMILARITY_DEFAULT
from ._triggers import Trigger as Trigger
from ._triggers import Verdict as Verdict
from ._triggers import check_before_round as check_before_round
from ._triggers import forget_trigger as forget_trigger
from ._triggers import register_trigger as register_trigger
from ._triggers import triggers as triggers
from .steps import PlanProgress as PlanProgress
from .steps import Run as Run
from .steps import Step as Step
from .steps import after_round as after_round
from .steps import cancel_loop as cancel_loop
from .steps import dispatch_round as dispatch_round
from .steps import finish as finish
from .steps import on_control as on_control
from .steps import on_give_up as on_give_up
from .steps import on_recovery as on_recovery
from .steps import resume_step as resume_step

__all__ = [
    "LIMIT_DEFAULTS",
    "LIVE_PHASES",
    "LOOP_ID_GRAMMAR",
    "MATCHES_SHOWN",
    "MAX_ROUNDS",
    "MIN_TAIL",
    "NOTIFY_EVENTS",
    "ROUNDS_CEILING",
    "SIMILARITY_DEFAULT",
    "STATE_EVENTS",
    "TERMINAL_PHASES",
    "AgentStep",
    "AnyEvent",
    "CheckRecord",
    "Gap",
    "LoopControl",
    "LoopEvent",
    "LoopFinished",
    "LoopInterrupted",
    "LoopPaused",
    "LoopReader",
    "LoopRecovered",
    "LoopResumed",
    "LoopSpec",
    "LoopStarted",
    "LoopState",
    "LoopWaiting",
    "Mode",
    "Notification",
    "NotifyEvent",
    "ParsedLoop",
    "Phase",
    "Plan",
    "PlanProgress",
    "PlanTask",
    "Prompt",
    "RoundDeferred",
    "RoundFinished",
    "RoundRecord",
    "RoundStarted",
    "RoundStatus",
    "RoundSummary",
    "RoundWaiting",
    "Run",
    "Step",
    "StopMode",
    "Trigger",
    "Verdict",
    "WorkerSpec",
    "after_round",
    "build_prompt",
    "cancel_loop",
    "check_before_round",
    "check_feedback",
    "check_notify",
    "check_transition",
    "defer_round",
    "deferred_wait",
    "dispatch_round",
    "event_decoder",
    "finish",
    "forget_trigger",
    "loop_id_problem",
    "next_phase",
    "no_completed_round",
    "normalize_output",
    "notifications_for",
    "on_control",
    "on_give_up",
    "on_recovery",
    "output_heads",
    "parse_loop",
    "parse_plan",
    "plan_prompt",
    "recorded_prompt",
    "redact_notify_url",
    "register_trigger",
    "replay_pair",
    "replay_spec",
    "replayed_round",
    "resolve_loop_id",
    "resume_step",
    "round_intent",
    "round_of",
    "shown",
    "stale_rounds_after",
    "triggers",
]
