"""Every exception loopactors raises on purpose.

One hierarchy under :class:`LoopactorsError`, so an embedding program can catch the
runtime's errors without catching its own.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not the typing module: `loopactors context` starts without it
if TYPE_CHECKING:
    from typing import ClassVar

__all__ = [
    "ActorError",
    "ActorNotRunning",
    "AdmissionRefused",
    "AgentError",
    "AmbiguousLoopId",
    "CallFailed",
    "CallTimeout",
    "CallToSelf",
    "ChildStartError",
    "CodeLoopError",
    "CodeLoopExists",
    "CodeLoopNotFound",
    "CodeLoopStateError",
    "CommandNotAnswered",
    "ConfigError",
    "ConnectionLost",
    "GateClosed",
    "GitError",
    "IllegalTransition",
    "InvalidRequest",
    "LeaseHeld",
    "LeaseLost",
    "LoopError",
    "LoopNotFound",
    "LoopSyntaxError",
    "LoopactorsError",
    "LoopsFenced",
    "MailboxFull",
    "ModelError",
    "NameTaken",
    "OrchestrationError",
    "OwnedElsewhere",
    "RemoteError",
    "RemoteLoopNotFound",
    "ReplayError",
    "RestartIntensityExceeded",
    "SelfReviewRefused",
    "SlugError",
    "StateDirectoryLost",
    "StoreError",
    "SupervisorError",
    "WorkerSpecError",
]


class LoopactorsError(Exception):
    """Base class of every error loopactors raises on purpose."""

    #: The node protocol's error code when a request raises it (docs/protocol.md); ``None``:
    #: the node answers ``internal`` (a bug). A subclass inherits its base's code.
    protocol_code: ClassVar[str | None] = None


class ActorError(LoopactorsError):
    """Sending to, or calling, an actor failed."""


class ActorNotRunning(ActorError):
    """The target actor has exited (or no actor is registered under that name)."""

    protocol_code = "unavailable"


class MailboxFull(ActorError):
    """A non-waiting send found the mailbox full (the waiting ``cast`` is the backpressure)."""


class CallFailed(ActorError):
    """The actor exited before it replied to a call.

    ``reason`` is the exception that crashed it, or ``None`` when it was stopped (shut down,
    terminated or restarted by its supervisor). The crash is also the ``__cause__``.
    """

    protocol_code = "unavailable"

    def __init__(self, message: str, reason: BaseException | None) -> None:
        super().__init__(message)
        self.reason = reason


class CallTimeout(ActorError, TimeoutError):
    """No reply arrived within the call's timeout. A reply that arrives later is dropped."""

    protocol_code = "unavailable"


class CallToSelf(ActorError):
    """An actor called itself from its own task, which could never be answered."""


class NameTaken(ActorError):
    """Another live actor is already registered under that name on this node."""


class SupervisorError(LoopactorsError):
    """A supervisor could not keep its children running."""


class ChildStartError(SupervisorError):
    """A child's start hook failed; the cause is attached."""

    def __init__(self, message: str, child_id: str) -> None:
        super().__init__(message)
        self.child_id = child_id


class RestartIntensityExceeded(SupervisorError):
    """More restarts than ``max_restarts`` within ``max_seconds``: the supervisor gave up.

    It stopped its children in reverse start order and fails to its own parent with this error,
    which names the supervisor, the child that failed last and that child's last cause.
    """

    def __init__(
        self, message: str, supervisor: str, child_id: str, last_cause: BaseException | None
    ) -> None:
        super().__init__(message)
        self.supervisor = supervisor
        self.child_id = child_id
        self.last_cause = last_cause


class LoopError(LoopactorsError):
    """A loop could not be started, found or driven."""


class LoopSyntaxError(LoopError, ValueError):
    """``|loop ...|`` text that cannot be accepted; the message names the bad part and what
    is accepted."""

    protocol_code = "rejected"


class IllegalTransition(LoopError):
    """A phase change the loop state machine does not allow (a bug, never user input)."""


class LoopNotFound(LoopError, KeyError):
    """No loop with that id in this runtime's store."""

    protocol_code = "not_found"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class AmbiguousLoopId(LoopNotFound):
    """A loop id prefix (or tail) that more than one loop's id starts (or ends) with; the
    message lists them."""


class ReplayError(LoopError, ValueError):
    """A round that cannot be replayed, or two loops that cannot be compared (no such round,
    a round that never ran, not a replay); says why."""

    protocol_code = "rejected"


class AdmissionRefused(LoopError):
    """The runtime refused to start a loop (a cap, a duplicate task, a bad worker spec)."""

    protocol_code = "rejected"


class WorkerSpecError(LoopError, ValueError):
    """A worker spec that cannot be used (unknown kind, bad option, missing executable)."""

    protocol_code = "rejected"


class ConfigError(LoopactorsError, ValueError):
    """A configuration file or flag that cannot be used; names the key and the file."""

    protocol_code = "rejected"


class InvalidRequest(LoopactorsError, ValueError):
    """A request lacks what it needs (a field another one requires); says which."""

    protocol_code = "invalid_request"


class StoreError(LoopactorsError):
    """The store could not read or write (corrupt file, newer schema, I/O error)."""


class StateDirectoryLost(StoreError):
    """The state directory or its database was deleted or replaced under a running runtime:
    nothing it commits from then on would be found again, so it stops."""


class LeaseLost(StoreError):
    """This node's lease on a shared store (PostgreSQL) ended: it could not renew it in time,
    or another node declared it dead and took the store over. Nothing it commits from then
    on is written, so its runtime stops (docs/multinode.md)."""


class LoopsFenced(StoreError):
    """A commit found some of its loops no longer this node's (another node owns them, or
    they changed owner since this node took them): nothing of those loops was written; the
    batch's other loops were. ``loop_ids`` names the fenced ones (docs/multinode.md)."""

    def __init__(self, message: str, loop_ids: frozenset[str]) -> None:
        super().__init__(message)
        self.loop_ids = loop_ids


class OwnedElsewhere(LoopError):
    """The loop is live and another node of the shared store owns it (its commands are
    routed there when the store can, docs/multinode.md)."""

    protocol_code = "unavailable"


class CommandNotAnswered(LoopactorsError):
    """A command routed to the node that owns its loop got no answer in time (the node is
    stuck, or the loop waits for a node to claim it); it was withdrawn, not applied."""

    protocol_code = "unavailable"


class RemoteError(LoopactorsError):
    """A node refused a request; ``code`` is the protocol's stable error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message

    @staticmethod
    def for_code(code: str, message: str) -> RemoteError:
        """The error a node's refusal is raised as: its code, and the loop error it stands
        for where there is one (``not_found``: a :class:`LoopNotFound` too)."""
        if code == LoopNotFound.protocol_code:
            return RemoteLoopNotFound(code, message)
        return RemoteError(code, message)


class RemoteLoopNotFound(RemoteError, LoopNotFound):
    """A node has no loop by that id (code ``not_found``): a :class:`LoopNotFound` too, as an
    embedded runtime's would be (docs/architecture.md, "One loop vocabulary")."""


class ConnectionLost(LoopactorsError):
    """The connection to a node closed (or could not be made) before the answer came."""


class AgentError(LoopactorsError):
    """The agent loop could not go on (a transcript rule, a compaction or budget limit)."""


class ModelError(AgentError):
    """The model endpoint failed after its retries; carries the provider's status and message."""

    def __init__(
        self,
        message: str,
        status: int | None = None,
        *,
        rate_limited: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        #: A rate or usage limit (429, a quota, a server's retry-after) outlasted the
        #: retries; ``retry_after``: seconds the server last asked to wait, if it said.
        self.rate_limited = rate_limited
        self.retry_after = retry_after


class CodeLoopError(LoopError):
    """A code loop (``loopactors code``) could not be set up, found or driven."""

    protocol_code = "rejected"


class SlugError(CodeLoopError, ValueError):
    """A code loop slug that is not lowercase kebab-case (so never a path)."""


class CodeLoopExists(CodeLoopError):
    """``init`` of a slug that already has a ledger (resume it, or re-initialise with force)."""


class CodeLoopNotFound(CodeLoopError, LookupError):
    """No ledger for that slug in the repository, or an unreadable one."""

    protocol_code = "not_found"


class CodeLoopStateError(CodeLoopError):
    """A status change the code loop state machine does not allow from the current status."""


class GateClosed(CodeLoopError):
    """A gate (status, deadline, max rounds, no progress, breaker) forbids the next round."""


class LeaseHeld(CodeLoopError):
    """Another owner holds the code loop's lease: a round is already running."""


class OrchestrationError(CodeLoopError, ValueError):
    """An ``ORCHESTRATION.md`` (or init flags) that cannot be used; says which field and why."""


class SelfReviewRefused(OrchestrationError):
    """The reviewer is the executor: a code loop's reviewer must be a different worker."""


class GitError(CodeLoopError):
    """A git command failed, or the directory is not a usable git repository."""
