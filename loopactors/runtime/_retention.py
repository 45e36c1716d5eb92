"""Automatic retention: with ``retention_days`` set, the Store prunes finished loops at start
and then periodically, from a task in its own nursery."""

from __future__ import annotations

import logging
import time
from typing import Any

import trio

from ..actors import ActorRef
from ..errors import ActorError, StoreError
from ..storage import PruneReport
from ._messages import PruneLoops

__all__ = ["CHECK_EVERY", "DAY", "keep_pruning", "retention_interval"]

log = logging.getLogger("loopactors.runtime")

DAY = 86_400.0
#: The longest wait between two prunes. Each removes what finished since the last one, so
#: prunes stay small; a short retention is checked ten times per period instead, but never
#: more often than once a minute.
CHECK_EVERY = 3_600.0
MIN_CHECK_EVERY = 60.0


def retention_interval(retention_days: float) -> float:
    """Seconds between two prunes: an hour, or a tenth of the retention if that is shorter,
    but at least a minute."""
    return min(CHECK_EVERY, max(MIN_CHECK_EVERY, retention_days * DAY / 10))


async def keep_pruning(store: ActorRef[Any], retention_days: float) -> None:
    """Prune at the start, then every :func:`retention_interval`, until cancelled (with the
    Store). A runtime that lives a few seconds (`loopactors run`) prunes too.

    Through the Store's mailbox, so a prune never runs alongside another backend call (and
    the Store serves other messages between its batches). A prune that fails is logged and
    tried again at the next interval: its failed batch was rolled back whole, so nothing is
    lost by waiting.
    """
    interval = retention_interval(retention_days)
    while True:
        # Loops are stamped with the wall clock, so the cutoff is one too.
        before = time.time() - retention_days * DAY
        try:
            report: PruneReport = await store.call(PruneLoops(before), timeout=None)
        except StoreError as exc:
            log.warning("retention: %s; trying again in %.0f s", exc, interval)
        except ActorError:
            return  # the Store stopped or crashed: its next incarnation starts its own task
        else:
            if report.removed_any:
                log.info("retention_days=%g: %s", retention_days, report.note())
        await trio.sleep(interval)
