"""Loop ids given by a user: the whole id, or any unique prefix or tail of it (tables show ids
by their tail, ``cli/_tables.py``).

Pure: the store finds the ids that start with what was given, else those that end with it
(``matching_loop_ids``), and
:func:`resolve_loop_id` decides. Every place that takes a loop id from a person (the command
line, the REPL, the node's requests) goes through these two.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..errors import AmbiguousLoopId, LoopNotFound

__all__ = ["LOOP_ID_GRAMMAR", "MATCHES_SHOWN", "MIN_TAIL", "loop_id_problem", "resolve_loop_id"]

#: What a loop id may be (docs/loops.md): what the runtime makes (``<hex time>-<16 hex>``),
#: code loops' ``code:<slug>``, and ids a client chooses in the same alphabet. Never a path:
#: an id names files (``outputs/<loop_id>/``), so no ``/``, no leading ``.`` or ``-``, no NUL.
LOOP_ID_GRAMMAR = (
    "1 to 128 characters of letters, digits, '.', '_', ':' and '-', starting with a letter "
    "or a digit"
)
_LOOP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def loop_id_problem(loop_id: object) -> str | None:
    """Why ``loop_id`` is not a valid loop id, or None when it is."""
    if isinstance(loop_id, str) and _LOOP_ID.fullmatch(loop_id):
        return None
    return f"loop id {loop_id!r} is not a valid loop id: give {LOOP_ID_GRAMMAR}"


#: How many matching ids an ambiguous prefix's error lists (ask the store for one more).
MATCHES_SHOWN = 10

#: The fewest characters that name a loop by the end of its id: a shorter tail (a typo, a
#: stray digit) is never taken for a loop to stop.
MIN_TAIL = 6


def resolve_loop_id(given: str, matches: Sequence[str], *, where: str = "the store") -> str:
    """The loop id ``given`` names among ``matches`` (the ids that start with it, or else
    end with it, sorted).

    The whole id wins even when it is also the prefix of other ids.

    Raises:
        LoopNotFound: no id starts with ``given`` (or ``given`` is empty).
        AmbiguousLoopId: several do; the message lists them (at most ``MATCHES_SHOWN``).
    """
    if given in matches:
        return given
    if not given or not matches:
        raise LoopNotFound(f"no loop {given!r} in {where}")
    if len(matches) == 1:
        return matches[0]
    shown = ", ".join(matches[:MATCHES_SHOWN])
    more = " and more" if len(matches) > MATCHES_SHOWN else ""
    part = "prefix" if all(m.startswith(given) for m in matches) else "tail"
    raise AmbiguousLoopId(
        f"loop id {part} {given!r} matches several loops in {where}: {shown}{more}; "
        "give more of the id"
    )
