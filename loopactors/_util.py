"""Small helpers shared by the package's public namespaces."""

from __future__ import annotations

import contextlib
import gc
import math
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, ParamSpec, Protocol, TypeVar

import msgspec


def fix_public_module(namespace: dict[str, Any], names: Iterable[str]) -> None:
    """Make re-exported names report their public module, as trio does for its re-exports,
    so tracebacks and reprs show ``loopactors.actors.Actor``, not a private module."""
    public = namespace["__name__"]
    for name in names:
        obj = namespace[name]
        if isinstance(obj, type) and issubclass(obj, msgspec.Struct):
            # msgspec resolves a struct's annotations in its ``__module__``: the public one
            # does not define the names they use, and decoding the struct would fail there.
            continue
        if getattr(obj, "__module__", "").startswith(public + "._"):
            obj.__module__ = public


def backoff_delay(attempt: int, *, first: float, cap: float, factor: float = 2.0) -> float:
    """The wait before retry number ``attempt`` (1 for the first): ``first``, multiplied by
    ``factor`` for each retry after it, never more than ``cap``. The one exponential backoff
    of the package: supervisor restarts, Redis outages, a client's reconnects, model calls."""
    try:
        delay = first * factor ** max(0, attempt - 1)
    except OverflowError:  # a long outage: the cap was reached long ago
        return float(cap)
    return float(min(cap, delay)) if math.isfinite(delay) else float(cap)


def positive_setting(_: Any, attribute: Any, value: float | None) -> None:
    """An attrs validator for a setting: ``None`` or a finite number > 0 (an infinite
    timeout or delay would make a loop, or a connection, that never finishes)."""
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a finite number > 0, got {value!r}")


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The one of ``choices`` a misspelt ``word`` most likely meant (``stauts``: ``status``),
    or None when none is close: what every "did you mean" of the package says."""
    import difflib  # noqa: PLC0415 - only when something was misspelt

    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.7)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean X?)`` for :func:`closest`, or ``""``: put after the misspelt word."""
    found = closest(word, choices)
    return "" if found is None else f" (did you mean {found}?)"


def count_of(number: int, noun: str) -> str:
    """``1 round``, ``2 rounds``, ``0 rounds``: a count with its noun (regular plurals)."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


_gc_pauses = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a burst that allocates objects which all live on
    (a recovery's runners and rounds): its passes would only walk the growing heap and free
    nothing. Pauses may overlap (two runtimes in one process); the last one to end turns
    the collector back on, unless it was off before the first one began.

    At the end, what the burst made goes straight to the oldest generation: left in the
    youngest, the first collections after the pause would walk all of it, and then again as
    it moved up generation by generation (4.5 s of the 15 s of CPU a recovery of 50,000
    loops took, bench/recovery.py). Not done if the process froze objects itself
    (``gc.freeze``): moving them is how it is done, and they would be unfrozen.
    """
    global _gc_pauses, _gc_was_enabled  # noqa: PLW0603 - one collector per process
    if _gc_pauses == 0:
        _gc_was_enabled = gc.isenabled()
        gc.disable()
    _gc_pauses += 1
    try:
        yield
    finally:
        _gc_pauses -= 1
        if _gc_pauses == 0 and _gc_was_enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()  # every tracked object to the permanent generation...
                gc.unfreeze()  # ...and from there to the oldest one, none of them walked
            gc.enable()


# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides and
# isolates (which reorder what a terminal shows).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


_P = ParamSpec("_P")
_R = TypeVar("_R")


def deprecated(old: str, new: str) -> None:
    """Warn the caller's caller that ``old`` is a former spelling of ``new``, kept for one
    release (docs/embedding.md, "Former names")."""
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=3)


def former_name(old: str, new: Callable[_P, _R]) -> Callable[_P, _R]:
    """``new`` under the name it had before (``old``, as ``Class.method``), kept for one
    release: each call warns, then calls ``new``."""

    def former(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        deprecated(old, new.__name__)
        return new(*args, **kwargs)

    former.__name__ = old.rpartition(".")[2]
    former.__qualname__ = old
    former.__doc__ = f"Deprecated spelling of :meth:`{new.__name__}` (kept for one release)."
    return former


class _Closable(Protocol):
    def close(self) -> object: ...


@contextlib.contextmanager
def closed_on_failure(resource: _Closable) -> Iterator[None]:
    """Close ``resource`` if the block raises (cancellation too), then re-raise: what was
    just opened is not left open by a setup that failed."""
    try:
        yield
    except BaseException:
        resource.close()
        raise


def pid_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (signal 0: nothing is sent). One that
    belongs to another user exists too: the refusal says it is there."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def terminal_safe(text: str) -> str:
    """``text`` with every control character a terminal would act on (ESC, BEL, C1 controls,
    bidirectional overrides) shown as a visible ``\\xNN``/``\\uNNNN`` escape: data from a task,
    an output or a model can colour, link, move or clear nothing (docs/security.md)."""
    return _CONTROLS.sub(_visible, text)


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def private_dirs(directory: Path) -> None:
    """``directory`` and its missing parents, each made ``0700`` (what a state directory
    holds is the operator's alone: docs/security.md); existing ones are left as they are.

    Raises:
        OSError: one cannot be made, or ``directory`` is not a directory.
    """
    missing: list[Path] = []
    for path in (directory, *directory.parents):
        if path.exists():
            break
        missing.append(path)
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
    if not directory.is_dir():
        raise NotADirectoryError(f"{directory} is not a directory")


def open_private(path: Path, mode: str = "wb") -> IO[Any]:
    """``path`` opened for writing (``wb``, or ``w`` for text), created ``0600`` (an existing
    file keeps its mode), in directories made by :func:`private_dirs`."""
    private_dirs(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    return os.fdopen(
        fd,
        mode,
        encoding=None if "b" in mode else "utf-8",
        errors=None if "b" in mode else "surrogatepass",
    )


def redact_url(url: str) -> str:
    """The URL with any user name and password (also a ``password=`` query parameter)
    replaced by ``***``: safe for logs."""
    import urllib.parse  # noqa: PLC0415 - only where a URL is shown

    parts = urllib.parse.urlsplit(url)
    secret = parts.password is not None or parts.username is not None
    if not secret and "password" not in parts.query.lower():
        return url  # nothing to hide: as given (urlunsplit would drop an empty "//")
    if secret:
        host = parts.hostname or ""
        try:
            port = parts.port
        except ValueError:
            port = None
        if port is not None:
            host = f"{host}:{port}"
        parts = parts._replace(netloc=f"***@{host}")
    if "password" in parts.query.lower():
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        hidden = [(k, "***" if "password" in k.lower() else v) for k, v in query]
        parts = parts._replace(query=urllib.parse.urlencode(hidden, safe="*/"))
    return urllib.parse.urlunsplit(parts)
