"""One loop vocabulary (``loops.LoopControl``): the same scenario, verb for verb, on every place
that keeps loops: an embedded ``Runtime``, a ``NodeClient`` over a real websocket node on
loopback, a round's own ``RoundContext`` (the scenario run by the round's worker), and, for
what reads, ``StoredLoops``, the view of a store no runtime runs (``status``, ``history``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest

from loopactors.cli._loop_control import StoredLoops
from loopactors.client import connect
from loopactors.errors import LoopNotFound
from loopactors.gateway import GatewaySettings, open_gateway
from loopactors.loops import Gap, LoopControl, LoopFinished, LoopReader, LoopState
from loopactors.runtime import Runtime, RuntimeConfig, open_runtime
from loopactors.runtime._api import RuntimeRoundContext
from loopactors.workers import RoundContext, RoundRequest

# trio-websocket's client may leave its socket to the garbage collector (tests/gateway).
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

PLACES = ["embedded", "node", "round", "stored"]


@attrs.frozen
class Seen:
    """What the scenario saw, for the reads to check (here, or on the store afterwards)."""

    done: LoopState
    stopped: LoopState
    events: tuple[str, ...]


async def act(control: LoopControl, tag: str) -> Seen:
    """Start, follow, wait, pause, resume and stop loops with the vocabulary's verbs only."""
    done_id, slow_id = f"vocabdone-{tag}", f"vocabslow-{tag}"
    async with control.subscribe() as events:
        started = await control.start(
            "|loop:2,fresh| name a tree", worker="scripted", loop_id=done_id
        )
        # The first state, as admitted: no second read needed.
        assert (started.loop_id, started.spec.rounds, started.terminal) == (done_id, 2, False)
        seen: list[str] = []
        async for event in events:
            if isinstance(event, Gap) or event.loop_id != done_id:
                continue
            seen.append(event.type)
            if isinstance(event, LoopFinished):
                break
    done = await control.wait(done_id)
    assert (done.phase, done.completed_rounds) == ("complete", 2)

    slow = await control.start(
        "|loop:5| poll the build", worker="scripted:latency=30", loop_id=slow_id
    )
    assert slow.loop_id == slow_id
    paused = await control.pause(slow_id)
    assert paused.phase == "paused" or paused.pause_requested
    resumed = await control.resume(slow_id)
    assert not resumed.terminal
    assert not resumed.pause_requested
    stopped = await control.stop(slow_id)
    assert stopped.phase == "cancelled"
    assert (await control.wait(slow_id)).phase == "cancelled"
    return Seen(done=done, stopped=stopped, events=tuple(seen))


async def read(reader: LoopReader, seen: Seen) -> None:
    """``get``, ``list`` and ``history`` agree with what the scenario saw."""
    done_id, slow_id = seen.done.loop_id, seen.stopped.loop_id
    assert await reader.get(done_id) == seen.done
    assert (await reader.get("vocabdone")).loop_id == done_id  # a unique prefix will do
    # The same error everywhere: over the wire too (a RemoteError as well, with its code).
    with pytest.raises(LoopNotFound, match="'vocab' matches several loops"):
        await reader.get("vocab")
    with pytest.raises(LoopNotFound, match="'nosuch-loop'"):
        await reader.history("nosuch-loop")
    listed = {state.loop_id: state.phase for state in await reader.list()}
    assert (listed[done_id], listed[slow_id]) == ("complete", "cancelled")
    live = {state.loop_id for state in await reader.list(live_only=True)}
    assert not live & {done_id, slow_id}
    assert len(await reader.list(limit=1)) == 1
    rounds = await reader.history(done_id)
    assert [(r.round, r.status) for r in rounds] == [(1, "completed"), (2, "completed")]
    assert all(r.output for r in rounds)
    heads = await reader.history(done_id, output_head=3)
    assert [r.output for r in heads] == [r.output[:3] for r in rounds]
    [cancelled] = await reader.history(slow_id)
    assert cancelled.status == "cancelled"


async def round_scenario(request: RoundRequest, context: RoundContext | None) -> str:
    """The scenario run by a round's worker on its own context (its starts are children)."""
    assert context is not None
    seen = await act(context, "round")
    assert seen.done.spec.parent_id == request.loop_id  # a child of the round's loop
    await read(context, seen)
    return f"ok: {' '.join(seen.events)}"


@asynccontextmanager
async def embedded(tmp_path: Path) -> AsyncIterator[Runtime]:
    config = RuntimeConfig(store="sqlite", state_dir=tmp_path, shutdown_grace=5.0)
    async with open_runtime(config) as rt:
        yield rt


@pytest.mark.parametrize("place", PLACES)
async def test_the_same_scenario_on_every_place_loops_live(place: str, tmp_path: Path) -> None:
    if place == "node":
        async with (
            embedded(tmp_path) as rt,
            open_gateway(rt, GatewaySettings(port=0)) as gateway,
            connect(gateway.url, token=gateway.token_path.read_text().strip()) as node,
        ):
            seen = await act(node, place)
            await read(node, seen)
        events = list(seen.events)
    elif place == "round":
        async with embedded(tmp_path) as rt:
            parent = await rt.start(
                "|loop:1| act on loops", worker="python:tests.test_vocabulary:round_scenario"
            )
            final = await rt.wait(parent.loop_id)
            [record] = await rt.history(parent.loop_id)
        assert (final.phase, record.status) == ("complete", "completed"), record.error
        events = record.output.removeprefix("ok: ").split()
    else:
        async with embedded(tmp_path) as rt:
            seen = await act(rt, place)
            if place == "embedded":
                await read(rt, seen)
        if place == "stored":  # the runtime is gone: the store is read in place
            stored = StoredLoops(lambda: RuntimeConfig(store="sqlite", state_dir=tmp_path))
            await read(stored, seen)
        events = list(seen.events)
    assert events[0] == "loop_started"
    assert events[-1] == "loop_finished"
    assert events.count("round_finished") == 2


async def test_the_former_names_still_work_and_warn(tmp_path: Path) -> None:
    async with (
        embedded(tmp_path) as rt,
        open_gateway(rt, GatewaySettings(port=0)) as gateway,
        connect(gateway.url, token=gateway.token_path.read_text().strip()) as node,
    ):
        parent = await rt.start("|loop:1| parent", worker="scripted:latency=30")
        with pytest.warns(DeprecationWarning, match=r"Runtime.loops is deprecated: use list"):
            assert [s.loop_id for s in await rt.loops()] == [parent.loop_id]
        with pytest.warns(DeprecationWarning, match=r"NodeClient.loops is deprecated: use list"):
            assert [s.loop_id for s in await node.loops()] == [parent.loop_id]
        with pytest.warns(DeprecationWarning, match=r"LoopHandle.status is deprecated: use get"):
            assert (await rt.handle(parent).status()).loop_id == parent.loop_id
        context = RuntimeRoundContext(rt.config, rt.bus, rt.node, parent.loop_id, 1)
        with pytest.warns(DeprecationWarning, match=r"start_child is deprecated: use start"):
            child = await context.start_child("|loop:2| child", worker="scripted")
        assert (await child.wait()).spec.parent_id == parent.loop_id
        with pytest.warns(DeprecationWarning, match="get_loop is deprecated: use get"):
            assert (await context.get_loop(child.loop_id)).phase == "complete"
        with pytest.warns(DeprecationWarning, match="list_loops is deprecated: use list"):
            assert {s.loop_id for s in await context.list_loops()} >= {child.loop_id}
        with pytest.warns(DeprecationWarning, match="loop_history is deprecated: use history"):
            assert len(await context.loop_history(child.loop_id)) == 2
        with pytest.warns(DeprecationWarning, match="stop_loop is deprecated: use stop"):
            assert (await context.stop_loop(parent.loop_id)).phase == "cancelled"


async def test_a_handle_verb_on_a_started_state_says_where_it_went(tmp_path: Path) -> None:
    """Code written for the former Runtime.start (a LoopHandle) calls the handle's verbs on
    what start returns now, a LoopState: the error says how to reach them."""
    async with embedded(tmp_path) as rt:
        state = await rt.start("|loop:1| x", worker="scripted")
        with pytest.raises(AttributeError, match=r"rt\.handle\(state\)\.wait\(") as caught:
            await state.wait()  # type: ignore[attr-defined]
        assert caught.value.name == "wait"
        assert (await rt.handle(state).wait()).phase == "complete"
        with pytest.raises(AttributeError, match=r"^'LoopState' object has no attribute 'nope'$"):
            state.nope  # type: ignore[attr-defined]  # noqa: B018
