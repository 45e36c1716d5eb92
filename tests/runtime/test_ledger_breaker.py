"""The run ledger in the runtime: loop-context's breaker on every loop, and its context
block in prompts."""

from __future__ import annotations

import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from loopactors.loops import LoopSpec, LoopState, RoundRecord, triggers
from loopactors.runtime import breaker_standing, open_runtime
from loopactors.runtime._ledger import attempt_of
from loopactors.testing import inject_crash

from . import round_fns
from .conftest import memory_config


async def test_the_same_error_again_and_again_escalates_as_stagnation() -> None:
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:10| fix the bug",
                worker="python:tests.runtime.round_fns:same_error",
                max_consecutive_failures=10,
            )
        )
        final = await handle.wait()
    assert final.phase == "escalated"
    assert final.trigger == "stagnation"
    assert final.reason is not None
    assert "Same error repeated 3\u00d7 in a row (threshold 3)" in final.reason
    assert final.completed_rounds == 0


async def test_the_same_action_again_and_again_escalates_as_frustration() -> None:
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:10| fix the parser",
                worker="python:tests.runtime.round_fns:same_action",
                max_consecutive_failures=10,
                frustration_threshold=4,
            )
        )
        final = await handle.wait()
        rounds = await handle.history()
    assert final.trigger == "frustration"
    assert len(rounds) == 4
    assert final.reason is not None
    assert "apply the usual fix to the parser" in final.reason


async def test_thresholds_come_from_the_loop() -> None:
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:10| fix the bug",
                worker="python:tests.runtime.round_fns:same_error",
                max_consecutive_failures=10,
                stagnation_threshold=5,
                frustration_threshold=10,
            )
        )
        final = await handle.wait()
        assert final.trigger == "stagnation"
        assert len(await handle.history()) == 5


async def test_the_ledger_block_is_injected_into_prompts_when_asked() -> None:
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:3| improve it",
                worker="python:tests.runtime.round_fns:record",
                inject_ledger=True,
            )
        )
        await handle.wait()
    first, second, _ = round_fns.PROMPTS[handle.loop_id]
    assert first == "improve it"  # nothing tried yet: no block
    assert second.startswith("## Loop Context (managed)\n\n**Goal:** improve it\n")
    assert "**Progress:** iteration 1 \u00b7 1 ok \u00b7 0 failed" in second
    assert second.endswith("\n\n---\n\nimprove it")


async def test_the_breaker_rebuilds_a_ledger_after_a_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(memory_config(inter_round_delay=1.0)) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:10| fix the bug",
                worker="python:tests.runtime.round_fns:same_error",
                max_consecutive_failures=10,
            )
        )
        await trio.sleep(1.5)  # two rounds recorded, the third not yet started
        inject_crash(rt.node, "breaker")
        final = await handle.wait()
        # The first two failures were rebuilt from the store: stagnation at the third.
        assert final.trigger == "stagnation"
        assert len(await handle.history()) == 3


async def test_ledger_thresholds_are_checked_when_a_loop_starts() -> None:
    import pytest

    from loopactors.errors import LoopSyntaxError

    async with open_runtime(memory_config(breaker={"stagnation_threshold": 4})) as rt:
        assert rt.build_spec("|loop:2| x").stagnation_threshold == 4
        with pytest.raises(LoopSyntaxError, match="similarity_threshold must be > 0"):
            await rt.start("|loop:2| x", similarity_threshold=85.0)
        with pytest.raises(LoopSyntaxError, match="frustration_threshold must be >= 1"):
            await rt.start("|loop:2| x", frustration_threshold=0)


def test_a_ledger_of_a_loop_that_never_started_has_no_started_at() -> None:
    import msgspec

    from loopactors.ledger import encode_json
    from loopactors.loops import LoopSpec, LoopState
    from loopactors.runtime._ledger import ledger_of

    state = LoopState(loop_id="x", spec=LoopSpec(task="t"))
    assert encode_json(msgspec.to_builtins(ledger_of(state, []))) == (
        '{\n  "goal": "t",\n  "attempts": []\n}'
    )


async def test_the_breaker_standing_counts_every_trigger_and_names_the_closest() -> None:
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:10| fix the parser",
                worker="python:tests.runtime.round_fns:same_action",
                max_consecutive_failures=10,
                frustration_threshold=4,
                stagnation_threshold=6,
                max_tokens=500,
                max_seconds=3600,
            )
        )
        final = await handle.wait()
        records = await handle.history()
    standing = breaker_standing(final, records, now=final.updated_at + 100)
    counts = {t.trigger: (t.value, t.limit) for t in standing.triggers}
    assert list(counts) == [
        "max_rounds",
        "no_progress",
        "consecutive_failures",
        "token_budget",
        "deadline",
        "stagnation",
        "frustration",
    ]  # the order the breaker checks them in (docs/loops.md)
    assert counts["frustration"] == (4, 4)  # what tripped it
    assert counts["consecutive_failures"] == (4, 10)
    assert counts["max_rounds"] == (4, 10)
    assert counts["stagnation"][1] == 6
    assert counts["stagnation"][0] < 4  # the errors differ: no stagnation
    assert counts["token_budget"] == (0, 500)
    # A finished loop's clock stopped at its last update, whatever "now" is.
    assert counts["deadline"][0] == round(final.updated_at - final.started_at, 1)
    assert standing.closest == "frustration"
    # Each carries its label from the trigger table, for the dashboard to show.
    labels = {t.trigger: t.label for t in standing.triggers}
    assert labels["no_progress"] == "no progress (same output)"
    assert labels["stagnation"] == "stagnation (same error)"
    assert labels == {t.name: t.label for t in triggers() if t.name in labels}


def test_the_closest_trigger_is_the_first_of_equals() -> None:
    spec = LoopSpec(task="t", rounds=5, max_consecutive_failures=3)
    state = LoopState(loop_id="x", spec=spec, round=4, consecutive_failures=3)
    failed = [
        RoundRecord(loop_id="x", round=n, status="failed", output="same", error="boom")
        for n in (1, 2, 3)
    ]
    standing = breaker_standing(state, failed, now=0.0)
    counts = {t.trigger: t.value for t in standing.triggers}
    assert counts == {
        "max_rounds": 3,
        "no_progress": 0,
        "consecutive_failures": 3,
        "stagnation": 3,
        "frustration": 3,
    }
    assert standing.closest == "consecutive_failures"  # checked before stagnation
    fresh = breaker_standing(LoopState(loop_id="y", spec=spec), [], now=0.0)
    assert all(t.value == 0 for t in fresh.triggers)
    assert fresh.closest == "max_rounds"


_LINE_PIECES = st.sampled_from(
    ["a", "b c", " ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85",
     "\u2028", "\u2029", "\xa0", "\u3000", "x" * 200]
)  # fmt: skip


@given(st.lists(_LINE_PIECES, max_size=8).map("".join), st.sampled_from(["the task", " \n"]))
def test_an_attempts_action_is_the_first_line_that_is_not_blank(output: str, task: str) -> None:
    record = RoundRecord(loop_id="l", round=1, status="completed", output=output)
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    expected = lines[0] if lines else (task.strip() or task)
    assert attempt_of(record, task).action == expected[:160]
