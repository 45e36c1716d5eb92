"""The python worker: an async callable named by import path, for embedding.

Spec: ``python:module.path:function``. The callable is imported and checked when the spec is
parsed, so a typo fails when the loop starts, not in its first round.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import attrs

from ..errors import WorkerSpecError
from ._base import RoundContext, RoundRequest, RoundResult, Worker
from ._kinds import WorkerKind

__all__ = ["KIND", "PythonWorker", "RoundFunction", "python_spec"]

#: What a python worker calls: returns the output text, or a full :class:`RoundResult`.
RoundFunction = Callable[[RoundRequest, RoundContext | None], Awaitable[str | RoundResult]]

_FORM = "python:module.path:function"


def _is_dotted_name(text: str) -> bool:
    return all(part.isidentifier() for part in text.split("."))


def _is_async_callable(obj: object) -> bool:
    # An instance with ``async def __call__`` is as good as a coroutine function.
    return inspect.iscoroutinefunction(obj) or (
        callable(obj) and inspect.iscoroutinefunction(type(obj).__call__)
    )


def import_round_function(target: str) -> RoundFunction:
    """Import ``module.path:function`` (the function may be dotted, like ``Class.method``)."""
    module_name, colon, attr_path = target.partition(":")
    if not (colon and _is_dotted_name(module_name) and _is_dotted_name(attr_path)):
        raise WorkerSpecError(f"python worker needs {_FORM}; {target!r} is not module:function")
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise WorkerSpecError(f"python worker cannot import module {module_name!r}: {exc}") from exc
    except Exception as exc:  # the module's own code failed while importing
        raise WorkerSpecError(
            f"python worker module {module_name!r} failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            if module_name == "__main__":  # another program's: a spec made by python_spec
                raise WorkerSpecError(
                    f"python worker: {target!r} names a function of the program that started "
                    "the loop, which only that program can resume (with open_runtime on this "
                    "state directory)"
                ) from None
            raise WorkerSpecError(
                f"python worker: {module_name!r} has no attribute {attr_path!r}"
            ) from None
    if not _is_async_callable(obj):
        raise WorkerSpecError(
            f"python worker: {target!r} (type {type(obj).__name__}) is not an async function; "
            "it must be `async def fn(request, context)`"
        )
    return obj  # type: ignore[return-value]  # checked above, as far as Python can tell


@attrs.frozen
class PythonWorker(Worker):
    """Awaits ``fn(request, context)``; an exception from it is a failed round, not a crash.

    ``trio.Cancelled`` (a ``BaseException``) goes through untouched, as a stop must.
    """

    kind: ClassVar[str] = "python"

    fn: RoundFunction

    @classmethod
    def from_spec(cls, target: str) -> PythonWorker:
        """Build from the text after ``python:``."""
        return cls(import_round_function(target))

    async def run(self, request: RoundRequest, context: RoundContext | None) -> RoundResult:
        try:
            value = await self.fn(request, context)
        except Exception as exc:
            return RoundResult(status="failed", error=f"{type(exc).__name__}: {exc}")
        if isinstance(value, str):
            return RoundResult(status="completed", output=value)
        if isinstance(value, RoundResult):
            return value
        return RoundResult(
            status="failed",
            error=f"TypeError: python worker returned {type(value).__name__}, "
            "expected str or RoundResult",
        )


def python_spec(fn: Callable[..., Any]) -> str:
    """A function given as ``worker=`` -> its ``python:module:function`` spec.

    A spec is text, kept in the store and read again by whatever runtime resumes the loop, so
    the function must be found again by that name: one defined at a module's top level (or a
    class's). ``__main__`` works while this program runs it; a loop meant to be resumed by
    ``loopactors resume`` needs an importable module.
    """
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(name, str) or "<" in name:
        shown = getattr(fn, "__qualname__", None) or type(fn).__name__
        raise WorkerSpecError(
            f"worker={shown!r} cannot be named for the store: a function worker is stored as "
            "python:module:function, so give a function defined at a module's top level "
            "(not a lambda or a nested function), or the spec itself, e.g. "
            "worker='python:myapp.rounds:improve'"
        )
    found: object = sys.modules.get(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    if found is not fn:
        raise WorkerSpecError(
            f"worker={name!r}: python:{module}:{name} does not name this function (was it "
            "replaced or decorated?); pass the spec of the function to call, "
            "worker='python:module:function'"
        )
    return f"python:{module}:{name}"


def _check_form(target: str) -> None:
    module, sep, function = target.partition(":")
    if not (sep and module and function.isidentifier()):
        raise WorkerSpecError(f"python worker takes {_FORM}, got {'python:' + target!r}")


KIND = WorkerKind(
    name="python",
    build=lambda options, kill_grace: PythonWorker.from_spec(options),
    local_resources=True,  # the module must be importable where the rounds run
    check_form=_check_form,
    stable_spec=True,
    served_by_default=True,
)
