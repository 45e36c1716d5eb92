"""The loop runtime: supervised actors that run |loop| iteration loops.

General layout: ``_api`` (open_runtime, Runtime, LoopHandle), ``_coordinator``, ``_runner``
(one LoopRunner per live loop), ``_dispatcher``, one module per service actor (``_store``,
``_breaker``, ``_context_builder``, ``_timers``, ``_notifier``), ``_messages`` (every message
they exchange), ``_wiring`` (their names and how they reach each other), ``_events``
(subscriber fan-out), ``_config`` (configuration files), ``_transports`` (round transports by
name), ``_round_transport`` (their interface), ``_inprocess`` (the default one).
"""

from .._lazy import lazy_names

TYPE_CHECKING = False

if TYPE_CHECKING:
    from ._api import MAX_AGE as MAX_AGE
    from ._api import LoopHandle as LoopHandle
    from ._api import Runtime as Runtime
    from ._api import open_runtime as open_runtime
    from ._config import BreakerSettings as BreakerSettings
    from ._config import BudgetSettings as BudgetSettings
    from ._config import NotifySettings as NotifySettings
    from ._config import RuntimeConfig as RuntimeConfig
    from ._config import find_config as find_config
    from ._config import forget_section as forget_section
    from ._config import load_config as load_config
    from ._config import register_section as register_section
    from ._coordinator import new_loop_id as new_loop_id
    from ._events import Changes as Changes
    from ._events import Gap as Gap
    from ._events import Subscription as Subscription
    from ._inprocess import InProcessTransport as InProcessTransport
    from ._ledger import BreakerStanding as BreakerStanding
    from ._ledger import TriggerStanding as TriggerStanding
    from ._ledger import breaker_standing as breaker_standing
    from ._ledger import ledger_of as ledger_of
    from ._lock import NODE_URL_FILE as NODE_URL_FILE
    from ._lock import lock_state_dir as lock_state_dir
    from ._notifier import NotifierStatistics as NotifierStatistics
    from ._round_transport import RoundRun as RoundRun
    from ._round_transport import RoundTransport as RoundTransport
    from ._runner import worker_problem as worker_problem
    from ._spec import build_spec as build_spec
    from ._transports import DispatchSettings as DispatchSettings
    from ._transports import TransportKind as TransportKind
    from ._transports import check_transport as check_transport
    from ._transports import forget_transport as forget_transport
    from ._transports import open_transport as open_transport
    from ._transports import redact_url as redact_url
    from ._transports import register_transport as register_transport
    from ._transports import transport_kind as transport_kind

__all__ = [
    "MAX_AGE",
    "NODE_URL_FILE",
    "BreakerSettings",
    "BreakerStanding",
    "BudgetSettings",
    "Changes",
    "DispatchSettings",
    "Gap",
    "InProcessTransport",
    "LoopHandle",
    "NotifierStatistics",
    "NotifySettings",
    "RoundRun",
    "RoundTransport",
    "Runtime",
    "RuntimeConfig",
    "Subscription",
    "TransportKind",
    "TriggerStanding",
    "breaker_standing",
    "build_spec",
    "check_transport",
    "find_config",
    "forget_section",
    "forget_transport",
    "ledger_of",
    "load_config",
    "lock_state_dir",
    "new_loop_id",
    "open_runtime",
    "open_transport",
    "redact_url",
    "register_section",
    "register_transport",
    "transport_kind",
    "worker_problem",
]

# Names load their module on first use: the command line reads a configuration
# (``_config``) for `loopactors status` without loading the actors.
_HOMES = {
    "BreakerSettings": "_config",
    "BreakerStanding": "_ledger",
    "Changes": "_events",
    "Gap": "_events",
    "LoopHandle": "_api",
    "MAX_AGE": "_api",
    "NODE_URL_FILE": "_lock",
    "NotifierStatistics": "_notifier",
    "BudgetSettings": "_config",
    "NotifySettings": "_config",
    "Runtime": "_api",
    "RuntimeConfig": "_config",
    "Subscription": "_events",
    "TriggerStanding": "_ledger",
    "breaker_standing": "_ledger",
    "build_spec": "_spec",
    "find_config": "_config",
    "forget_section": "_config",
    "register_section": "_config",
    "ledger_of": "_ledger",
    "load_config": "_config",
    "lock_state_dir": "_lock",
    "new_loop_id": "_coordinator",
    "open_runtime": "_api",
    "DispatchSettings": "_transports",
    "InProcessTransport": "_inprocess",
    "RoundRun": "_round_transport",
    "RoundTransport": "_round_transport",
    "TransportKind": "_transports",
    "check_transport": "_transports",
    "forget_transport": "_transports",
    "open_transport": "_transports",
    "redact_url": "_transports",
    "register_transport": "_transports",
    "transport_kind": "_transports",
    "worker_problem": "_runner",
}


#: Names that left the runtime, and where they went.
_MOVED = {
    "NodeSettings": "the gateway owns the [node] table now; import GatewaySettings (or its "
    "alias NodeSettings) from loopactors.gateway (docs/configuration.md, [node])",
}

__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__, moved=_MOVED)
