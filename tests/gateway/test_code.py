"""Code loops driven over the node protocol: init, run one bounded round, status, stop."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.hang import HANG

from ..codeloop.toyrepo import VALIDATE, git, make_repo, worker
from .conftest import LiveNode, open_raw


async def test_code_loop_controls_over_the_wire(live_node: LiveNode, tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    async with open_raw(live_node) as raw:
        init = {
            "type": "code",
            "id": 1,
            "action": "init",
            "repo": str(repo),
            "slug": "fix-calc",
            "objective": "make calc.VALUE 42",
            "executor": worker(tmp_path, "fix"),
            "reviewer": worker(tmp_path, "approve"),
            "validate": VALIDATE,
            "max_rounds": 3,
        }
        reply = await raw.ask(init)
        assert reply["type"] == "ok", reply
        assert reply["data"]["loops"][0]["state"]["status"] == "ready"
        again = await raw.ask({**init, "id": 2})
        assert again["code"] == "rejected"  # re-initialising needs force
        run = await raw.ask(
            {"type": "code", "id": 3, "action": "run", "repo": str(repo), "slug": "fix-calc"}
        )
        assert run["type"] == "ok", run
        assert "1 round" in run["data"]["message"]
        with trio.fail_after(HANG):
            while True:
                status = await raw.ask(
                    {"type": "code", "id": 4, "action": "status", "repo": str(repo)}
                )
                assert status["type"] == "ok", status
                state = status["data"]["loops"][0]["state"]
                if state["round"] == 1 and status["data"]["loops"][0]["lease"] is None:
                    break
                await trio.sleep(0.1)
        assert state["merged_rounds"] == 1
        assert "VALUE = 42" in git(repo, "show", "loop/fix-calc/candidate:calc.py")
        assert "VALUE = 42" not in (repo / "calc.py").read_text()  # main is never touched
        stop = await raw.ask(
            {"type": "code", "id": 5, "action": "stop", "repo": str(repo), "slug": "fix-calc"}
        )
        assert stop["data"]["loops"][0]["state"]["status"] == "stopped"
        refused = await raw.ask(
            {"type": "code", "id": 6, "action": "run", "repo": str(repo), "slug": "fix-calc"}
        )
        assert refused.get("code") == "rejected", refused
        assert "stopped" in refused["message"]
        handoff = await raw.ask(
            {"type": "code", "id": 7, "action": "handoff", "repo": str(repo), "slug": "fix-calc"}
        )
        assert "not pushed" in handoff["data"]["message"].lower()
        for bad, code in [
            ({"action": "run", "repo": str(repo)}, "invalid_request"),
            ({"action": "status", "repo": str(repo), "slug": "nope"}, "not_found"),
            ({"action": "status", "repo": str(repo), "slug": "../x"}, "rejected"),
            ({"action": "explode", "repo": str(repo)}, "invalid_request"),
        ]:
            reply = await raw.ask({"type": "code", "id": 8, **bad})
            assert reply["code"] == code, (bad, reply)
