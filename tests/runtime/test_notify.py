"""Notifications delivered through apprise to real receivers on loopback: an HTTP server
(json://, form://) and an SMTP server (mailto://), one that is down and comes back, a queue
that survives a restart, and one that drops what is too old. Real time (deliveries run in
worker threads); every wait is for an event, never a deadline."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import trio

from loopactors.errors import ConfigError, LoopSyntaxError
from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.storage import open_backend

from . import defer_fns
from .conftest import memory_config, sqlite_config
from .receivers import free_port, http_receiver, smtp_receiver

FAST = {"retry_first": 0.05, "retry_max": 0.2}


def notify_config(base: RuntimeConfig, **notify: object) -> RuntimeConfig:
    return base.replace(notify={**FAST, **notify})


async def test_a_finished_loop_posts_json_to_the_receiver() -> None:
    async with (
        http_receiver() as (receiver, port),
        open_runtime(notify_config(memory_config())) as rt,
    ):
        url = f"json://127.0.0.1:{port}/hook"
        handle = rt.handle(await rt.start("|loop:2| tidy up", worker="scripted", notify=(url,)))
        final = await handle.wait()
        await receiver.wait_for(1)
        while (await rt.store_statistics()).notifications:
            await trio.sleep(0.01)  # the delivery is over once it left the queue
        stats = await rt.notifier_statistics()
    assert final.phase == "complete"
    path, headers, body = receiver.requests[0]
    assert path == "/hook"
    assert headers["content-type"].startswith("application/json")
    sent = json.loads(body)
    assert sent["title"] == f"loop {handle.loop_id} complete"
    assert "tidy up" in sent["message"]
    assert "2/2 rounds completed" in sent["message"]
    assert (stats.sent, stats.dropped) == (1, 0)


async def test_form_and_several_urls_each_get_it() -> None:
    async with (
        http_receiver() as (one, port_one),
        http_receiver() as (two, port_two),
        open_runtime(notify_config(memory_config())) as rt,
    ):
        urls = (f"form://127.0.0.1:{port_one}/a", f"json://127.0.0.1:{port_two}/b")
        handle = rt.handle(await rt.start("|loop:1| x", worker="scripted", notify=urls))
        await handle.wait()
        await one.wait_for(1)
        await two.wait_for(1)
    assert one.forms()[0]["title"] == f"loop {handle.loop_id} complete"
    assert json.loads(two.bodies()[0])["title"] == f"loop {handle.loop_id} complete"


async def test_a_deferred_round_says_until_when() -> None:
    defer_fns.CALLS.clear()
    defer_fns.WAIT["seconds"] = 0.2
    async with (
        http_receiver() as (receiver, port),
        open_runtime(notify_config(memory_config())) as rt,
    ):
        handle = rt.handle(
            await rt.start(
                "|loop:1| x",
                worker="python:tests.runtime.defer_fns:limited_once",
                notify=(f"json://127.0.0.1:{port}/",),
                notify_on=("round_deferred",),
            )
        )
        assert (await handle.wait()).phase == "complete"
        await receiver.wait_for(1)
        await trio.sleep(0.3)  # a loop_finished would have been posted by now
    (body,) = receiver.bodies()
    sent = json.loads(body)
    assert "waits until" in sent["title"]
    assert "round 1/1 deferred until" in sent["message"]
    assert "usage limit reached" in sent["message"]


async def test_mail_goes_to_the_smtp_server() -> None:
    with smtp_receiver() as (mailbox, port):
        async with open_runtime(notify_config(memory_config())) as rt:
            url = (
                f"mailto://localhost:{port}?smtp=127.0.0.1&mode=insecure"
                "&from=loops@example.com&to=ops@example.com"
            )
            handle = rt.handle(
                await rt.start("|loop:1| write the report", worker="scripted", notify=(url,))
            )
            await handle.wait()
            await trio.to_thread.run_sync(mailbox.wait_for, 1)
    (mail,) = mailbox.messages
    assert mail["Subject"] == f"loop {handle.loop_id} complete"
    assert mail["To"] == "ops@example.com"
    texts = [
        part.get_payload(decode=True).decode()
        for part in mail.walk()
        if part.get_content_type() in ("text/plain", "text/html")
    ]
    assert texts
    assert all("write the report" in text for text in texts)


async def test_a_receiver_that_is_down_gets_it_when_it_comes_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "loopactors.notify")
    port = free_port()
    url = f"json://hookuser:s3cr3tpass@127.0.0.1:{port}/hook"
    async with open_runtime(notify_config(memory_config())) as rt:
        handle = rt.handle(await rt.start("|loop:2| x", worker="scripted", notify=(url,)))
        final = await handle.wait()
        assert final.phase == "complete"  # the loop never waited for its notification
        while (await rt.notifier_statistics()).failed < 2:
            await trio.sleep(0.05)
        assert (await rt.store_statistics()).notifications == 1
        async with http_receiver(port) as (receiver, _):
            await receiver.wait_for(1)
            while (await rt.store_statistics()).notifications:
                await trio.sleep(0.01)
        stats = await rt.notifier_statistics()
    assert stats.sent == 1
    assert stats.failed >= 2
    assert stats.dropped == 0
    assert json.loads(receiver.bodies()[0])["title"] == f"loop {handle.loop_id} complete"
    assert receiver.requests[0][1]["authorization"].startswith("Basic ")
    failures = [r.getMessage() for r in caplog.records if "failed (attempt" in r.getMessage()]
    assert failures
    assert f"json://***@127.0.0.1:{port}/***" in failures[0]
    assert not any(
        "s3cr3tpass" in r.getMessage() or "hookuser" in r.getMessage() for r in caplog.records
    )


async def test_a_notification_still_undelivered_at_the_end_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # `loopactors run` ending while the receiver is down: a warning (shown on stderr) says
    # what was not delivered and that it stays queued, so the user is not left believing it
    # went out; the URL's secret is not in it.
    caplog.set_level(logging.WARNING, "loopactors.notify")
    port = free_port()
    url = f"json://hookuser:s3cr3tpass@127.0.0.1:{port}/hook"
    async with open_runtime(notify_config(sqlite_config(tmp_path / "state"))) as rt:
        handle = rt.handle(await rt.start("|loop:1| x", worker="scripted", notify=(url,)))
        await handle.wait()
        while (await rt.notifier_statistics()).failed < 1:
            await trio.sleep(0.05)
    said = [r for r in caplog.records if "not delivered" in r.getMessage()]
    assert len(said) == 1
    assert said[0].levelno == logging.WARNING
    text = said[0].getMessage()
    assert f"loop_finished of loop {handle.loop_id}" in text
    assert f"json://***@127.0.0.1:{port}/***" in text
    assert "kept in the queue" in text
    assert "(Notifying" not in text  # apprise's line before sending is no reason
    assert "error" in text.lower()  # the one it gives: a connection error
    assert "s3cr3tpass" not in text
    # The next run on the store tries it again, but it is not this run's to say again.
    caplog.clear()
    async with open_runtime(notify_config(sqlite_config(tmp_path / "state"))) as rt:
        while (await rt.notifier_statistics()).failed < 1:
            await trio.sleep(0.05)
    assert not [r for r in caplog.records if "not delivered" in r.getMessage()]


async def test_the_queue_survives_a_restart(tmp_path: Path) -> None:
    port = free_port()
    url = f"json://127.0.0.1:{port}/later"
    config = notify_config(sqlite_config(tmp_path), retry_first=3600.0, retry_max=3600.0)
    async with open_runtime(config) as rt:
        handle = rt.handle(await rt.start("|loop:1| x", worker="scripted", notify=(url,)))
        await handle.wait()
        while (await rt.notifier_statistics()).failed < 1:
            await trio.sleep(0.05)
    backend = open_backend("sqlite", tmp_path)
    try:
        (queued,) = backend.due_notifications(float("inf"), limit=10)
    finally:
        backend.close()
    assert (queued.attempts, queued.notification.loop_id) == (1, handle.loop_id)
    # Due again only in an hour: make it due now, as that hour having passed would.
    backend = open_backend("sqlite", tmp_path)
    try:
        backend.notification_retry(queued.id, 0.0, queued.attempts)
    finally:
        backend.close()
    async with http_receiver(port) as (receiver, _), open_runtime(config) as rt:
        await receiver.wait_for(1)
        while (await rt.store_statistics()).notifications:
            await trio.sleep(0.01)
    assert json.loads(receiver.bodies()[0])["title"] == f"loop {handle.loop_id} complete"


async def test_an_old_notification_is_dropped_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "loopactors.notify")
    url = f"json://127.0.0.1:{free_port()}/gone"
    async with open_runtime(notify_config(memory_config(), max_age=0.3)) as rt:
        handle = rt.handle(await rt.start("|loop:1| x", worker="scripted", notify=(url,)))
        await handle.wait()
        while (await rt.notifier_statistics()).dropped < 1:
            await trio.sleep(0.05)
        assert (await rt.store_statistics()).notifications == 0
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped) == 1
    assert f"loop {handle.loop_id}" in dropped[0]
    assert "not delivered within 0.3 s" in dropped[0]


async def test_the_node_default_applies_to_loops_that_name_none() -> None:
    async with http_receiver() as (receiver, port):
        config = notify_config(
            memory_config(), urls=(f"json://127.0.0.1:{port}/default",), events=("loop_finished",)
        )
        async with open_runtime(config) as rt:
            spec = rt.build_spec("|loop:1| x")
            assert spec.notify == (f"json://127.0.0.1:{port}/default",)
            assert rt.build_spec("|loop:1| x", notify=("json://127.0.0.1:1/own",)).notify == (
                "json://127.0.0.1:1/own",
            )
            handle = rt.handle(await rt.start("|loop:1| x", worker="scripted"))
            await handle.wait()
            await receiver.wait_for(1)
    assert receiver.requests[0][0] == "/default"


async def test_a_url_apprise_cannot_use_is_refused_at_start() -> None:
    async with open_runtime(memory_config()) as rt:
        with pytest.raises(LoopSyntaxError, match="is not one apprise can send to") as info:
            await rt.start("|loop:1| x", notify=("nosuchservice://user:hunter2@host/x",))
        assert "hunter2" not in str(info.value)
        with pytest.raises(LoopSyntaxError, match="unknown notify event"):
            await rt.start("|loop:1| x", notify=("json://127.0.0.1:1/",), notify_on=("often",))


async def test_notify_on_without_any_url_is_refused_not_ignored() -> None:
    # `--notify-on loop_finished` alone would tell no one: said at start, naming both ways
    # to give a URL. With the node's [notify] urls it is a choice among those.
    async with open_runtime(memory_config()) as rt:
        with pytest.raises(LoopSyntaxError, match="no notify URL") as info:
            await rt.start("|loop:1| x", notify_on=("loop_finished",))
        assert "--notify URL" in str(info.value)
        assert "[notify] urls" in str(info.value)
        assert await rt.list() == []
    config = memory_config().replace(notify={"urls": ["json://127.0.0.1:1/x"]})
    async with open_runtime(config) as rt:
        spec = rt.build_spec("|loop:1| x", notify_on=("loop_finished",))
    assert spec.notify == ("json://127.0.0.1:1/x",)
    assert spec.notify_on == ("loop_finished",)


async def test_an_empty_notify_url_is_said_to_be_empty() -> None:
    async with open_runtime(memory_config()) as rt:
        with pytest.raises(LoopSyntaxError, match="a notify URL is empty: write SCHEME://"):
            await rt.start("|loop:1| x", notify=(" ",))


def test_the_config_checks_notify_settings() -> None:
    with pytest.raises(ConfigError, match="unknown event"):
        RuntimeConfig().replace(notify={"events": ["loop_finished", "hourly"]})
    with pytest.raises(ConfigError, match="is not a URL") as info:
        RuntimeConfig().replace(notify={"urls": ["me:secret@example.com"]})
    assert "secret" not in str(info.value)
    shown = repr(RuntimeConfig().replace(notify={"urls": ["json://u:secret@h:1/x"]}))
    assert "secret" not in shown
    assert "json://***@h:1/***" in shown


async def test_loopactors_run_notify_posts_before_it_exits(tmp_path: Path) -> None:
    import sys

    async with http_receiver() as (receiver, port):
        url = f"json://user:hidden@127.0.0.1:{port}/cli"
        done = await trio.run_process(
            [
                sys.executable,
                "-m",
                "loopactors",
                "run",
                "|loop:2| from the command line",
                "--state",
                str(tmp_path),
                "--notify",
                url,
                "--notify-on",
                "loop_finished",
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        # Delivered by the run itself, before it exited (not left for the next start).
        assert len(receiver.requests) == 1
        status = await trio.run_process(
            [sys.executable, "-m", "loopactors", "status", "--state", str(tmp_path), "--json"],
            capture_stdout=True,
        )
    assert json.loads(receiver.bodies()[0])["title"].endswith(" complete")
    shown = status.stdout.decode()
    assert "hidden" not in shown
    assert f"json://***@127.0.0.1:{port}/***" in shown
    bad = await trio.run_process(
        [
            sys.executable,
            "-m",
            "loopactors",
            "run",
            "|loop:1| x",
            "--store",
            "memory",
            "--notify",
            "json://127.0.0.1:1/",
            "--notify-on",
            "weekly",
        ],
        capture_stderr=True,
        check=False,
    )
    assert bad.returncode != 0
    assert b"unknown notify event(s) weekly" in bad.stderr


async def test_a_check_failing_rounds_in_a_row_and_a_budget_notify(tmp_path: Path) -> None:
    async with (
        http_receiver() as (receiver, port),
        open_runtime(notify_config(memory_config())) as rt,
    ):
        url = f"json://127.0.0.1:{port}/checks"
        failing = rt.handle(
            await rt.start(
                "|loop:4,fresh| fix it",
                worker="scripted",
                until="echo 'FAILED test_one'; exit 3",
                notify=(url,),
                notify_on=("check_failing",),
                notify_check_failures=2,
            )
        )
        assert (await failing.wait()).phase == "escalated"
        await receiver.wait_for(1)
        costly = rt.handle(
            await rt.start(
                "|loop:5,fresh| spend",
                worker="python:tests.runtime.notify_fns:costly",
                max_cost_usd=0.25,
                notify=(url,),
            )
        )
        final = await costly.wait()
        await receiver.wait_for(2)
        while (await rt.store_statistics()).notifications:
            await trio.sleep(0.01)
    assert (final.phase, final.trigger) == ("escalated", "cost_budget")
    first, second = (json.loads(body) for body in receiver.bodies())
    # Once, at the second failure in a row; not again at the third and fourth.
    assert first["title"] == f"loop {failing.loop_id}: its check failed 2 rounds in a row"
    assert "round 2/4" in first["message"]
    assert "(3)" in first["message"]
    assert "FAILED test_one" in first["message"]
    assert second["title"] == f"loop {costly.loop_id} escalated"
    assert "trigger cost_budget" in second["message"]
    assert len(receiver.requests) == 2


async def test_a_mail_server_that_is_down_gets_the_mail_when_it_comes_back() -> None:
    port = free_port()
    url = (
        f"mailto://localhost:{port}?smtp=127.0.0.1&mode=insecure"
        "&from=loops@example.com&to=ops@example.com"
    )
    async with open_runtime(notify_config(memory_config())) as rt:
        handle = rt.handle(await rt.start("|loop:1| nightly", worker="scripted", notify=(url,)))
        assert (await handle.wait()).phase == "complete"
        while (await rt.notifier_statistics()).failed < 1:
            await trio.sleep(0.05)
        with smtp_receiver(port) as (mailbox, _):
            await trio.to_thread.run_sync(mailbox.wait_for, 1)
            while (await rt.store_statistics()).notifications:
                await trio.sleep(0.01)
    (mail,) = mailbox.messages
    assert mail["Subject"] == f"loop {handle.loop_id} complete"
