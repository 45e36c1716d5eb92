"""A breaker trigger added with no edit under ``loopactors/``: registered, it takes its place
in the breaker's order (before the run ledger's), escalates a loop with its own reason, and
its standing shows beside the built-in ones."""

from __future__ import annotations

import time

import pytest

from loopactors.loops import Trigger, register_trigger, triggers
from loopactors.runtime import RuntimeConfig, breaker_standing, open_runtime


async def test_the_new_trigger_escalates_a_loop(long_output_trigger: str) -> None:
    names = [t.name for t in triggers()]
    assert names[-3:] == ["long_output", "stagnation", "frustration"]
    async with open_runtime(RuntimeConfig(store="memory")) as rt:
        quiet = rt.handle(
            await rt.start("|loop:3,fresh| x", worker="scripted:output=short {round}")
        )
        loud = rt.handle(
            await rt.start("|loop:3,fresh| x", worker="scripted:output=" + "y" * 45 + "{round}")
        )
        assert (await quiet.wait()).phase == "complete"
        final = await loud.wait()
        state, records = await rt.recorded(loud.loop_id)
    assert final.phase == "escalated"
    assert final.trigger == "long_output"
    assert final.reason == "the last output has 46 characters (limit 40)"
    assert final.completed_rounds == 1  # checked before round 2
    standing = breaker_standing(state, records, time.time())
    assert [t.trigger for t in standing.triggers][-3:] == names[-3:]
    assert standing.closest == "long_output"
    # A trigger without a label is shown by its name.
    assert standing.triggers[-3].label == "long_output"


def test_a_trigger_is_registered_once_and_in_a_place_that_exists(
    long_output_trigger: str,
) -> None:
    with pytest.raises(ValueError, match="'long_output' is already registered"):
        register_trigger(Trigger(name="long_output", check=None))
    with pytest.raises(ValueError, match="no breaker trigger 'nope'; the triggers: max_rounds"):
        register_trigger(Trigger(name="other", check=None), before="nope")
