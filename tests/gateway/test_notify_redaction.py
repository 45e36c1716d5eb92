"""Over the protocol a loop's notification URLs are never sent whole: the start answer,
status, history and the coalesced states all carry them redacted."""

from __future__ import annotations

import msgspec

from loopactors.client import connect

from .conftest import LiveNode

SECRET_URL = "json://hookuser:s3cr3t@127.0.0.1:9/hook?token=t0ken"
SHOWN = "json://***@127.0.0.1:9/***?***"


async def test_notify_urls_go_over_the_wire_redacted(live_node: LiveNode) -> None:
    async with connect(live_node.url, token=live_node.token) as node:
        started = await node.start("|loop:1| x", worker="scripted", notify=[SECRET_URL])
        assert started.spec.notify == (SHOWN,)
        status = await node.get(started.loop_id)
        history = await node.history_reply(started.loop_id)
    assert status.spec.notify == (SHOWN,)
    assert history.loop.spec.notify == (SHOWN,)
    for seen in (started, status, history.loop):
        text = msgspec.json.encode(seen).decode()
        assert "s3cr3t" not in text
        assert "t0ken" not in text
        assert "hookuser" not in text
    # The store keeps it whole: the notifier needs it.
    stored = await live_node.runtime.get(started.loop_id)
    assert stored.spec.notify == (SECRET_URL,)
