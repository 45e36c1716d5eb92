"""A node and a client in one program: the runtime served over a websocket on loopback, and
a client that starts a loop on it, follows its events, reads its history, then watches a
few more loops to their end the way a view of thousands would (their states, coalesced).

Run it with `python examples/node_and_client.py`. Against a separate `loopactors node`, keep
only the client half and pass the node's URL and token (its state directory's node.token).
"""

from __future__ import annotations

import tempfile

import trio

from loopactors import open_runtime
from loopactors.client import connect
from loopactors.gateway import GatewaySettings, open_gateway
from loopactors.loops import LoopFinished


async def client(url: str, token: str) -> None:
    async with connect(url, token=token) as node:
        print(f"connected to node {node.info.node_id} (protocol {node.info.protocol})")
        state = await node.start("|loop:3,fresh| name a tree", worker="scripted")
        async with node.subscribe(state.loop_id, replay=True) as events:
            async for event in events:
                print(event.note().splitlines()[0])
                if isinstance(event, LoopFinished):
                    break
        history = await node.history(state.loop_id)
        print("outputs:", [r.output for r in history])
        # A view of many loops: at most every 0.1 s, the latest state of each loop that changed.
        async with await node.watch(every=0.1) as watch:
            started = {(await node.start(f"|loop:2| job {n}")).loop_id for n in range(3)}
            ended: set[str] = set()
            async for states in watch:
                ended |= {s.loop_id for s in states if s.loop_id in started and s.terminal}
                if ended == started:
                    break
        print(f"watched {len(started)} more loops to their end")


async def main() -> None:
    with tempfile.TemporaryDirectory() as state_dir:
        async with (
            open_runtime(store="memory", state_dir=state_dir) as runtime,
            open_gateway(runtime, GatewaySettings(port=0)) as gateway,  # 0: any free port
        ):
            token = gateway.token_path.read_text().strip()
            await client(gateway.url, token)


if __name__ == "__main__":
    trio.run(main)
