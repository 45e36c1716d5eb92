"""`loopactors repl`: steer loops by typing, on an embedded node or a remote one.

The line editor (prompt_toolkit) runs in a worker thread, so trio keeps running loops and
printing their progress while the user types; ``patch_stdout`` puts those lines above the
prompt without garbling the line being edited. Everything that acts on loops runs in trio.
"""

from __future__ import annotations

import argparse
import functools
import signal
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import trio
from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory
from prompt_toolkit.patch_stdout import patch_stdout

from .._util import count_of, terminal_safe
from ..client import connect
from ..errors import CodeLoopError, ConnectionLost, LoopactorsError
from ..loops import AnyEvent, LoopFinished, LoopStarted, LoopState, WorkerSpec
from ..runtime import NODE_URL_FILE, Gap, RuntimeConfig, open_runtime
from ..storage import store_kind
from ..workers import check_worker_spec, in_workspace, worker_kind
from ._follow import leave_now
from ._remote import read_token
from ._repl_commands import COMMANDS, WORDS, Command, help_text, parse_line
from ._repl_place import Place, embedded, on_node

__all__ = ["run_repl"]

HISTORY_FILE = "repl_history"


class _LoopIds(Completer):
    """Completes commands, and loop ids after the commands that take one."""

    def __init__(self) -> None:
        self.ids: tuple[str, ...] = ()  # replaced whole from trio, read from the editor thread

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        text = document.text_before_cursor
        words = text.split(" ")
        if len(words) == 1:
            for name in [*COMMANDS, *WORDS]:
                if name.startswith(words[0]):
                    yield Completion(name, start_position=-len(words[0]))
        elif len(words) == 2 and words[0] in COMMANDS and "ID" in COMMANDS[words[0]][0]:
            for loop_id in self.ids:
                if loop_id.startswith(words[1]):
                    yield Completion(loop_id, start_position=-len(words[1]))


class Repl:
    #: ``/loops`` shows at most this many.
    LIST_LIMIT = 100

    def __init__(self, place: Place, worker: str | None) -> None:
        self.place = place
        self.loops = place.control
        self.worker = worker  # None: the node's default
        self.default_worker = place.default_worker
        self.current: str | None = None
        self.completer = _LoopIds()
        self._said_scripted = False
        self.quit = False
        #: Why the node went away, when it did (the session ends).
        self.lost: str | None = None
        #: The command being run, so that Ctrl-C can cancel it.
        self.command_scope: trio.CancelScope | None = None
        self.on_lost: Callable[[], None] = lambda: None
        #: The code loop /loop runs: (slug, repository).
        self.code_loop: tuple[str, str] | None = None

    def say(self, text: str) -> None:
        print(terminal_safe(text), flush=True)  # data: no terminal control gets through

    async def show_events(self) -> None:
        try:
            await self._show_events()
        except ConnectionLost as exc:
            reason = self.place.closing_reason() or str(exc)
            self.lost = reason
            self.quit = True
            self.say(f"the connection to the node is lost ({reason}); leaving")
            self.on_lost()

    async def _show_events(self) -> None:
        async with self.loops.subscribe() as events:
            async for event in events:
                self._show(event)

    def _show(self, event: AnyEvent | Gap) -> None:
        if isinstance(event, Gap):
            self.say(f"[{event.missed} progress lines skipped: the display fell behind]")
            return
        if isinstance(event, LoopStarted):
            self._remember(event.loop_id)
        self.say(f"{event.loop_id} {event.note()}")
        if isinstance(event, LoopFinished) and event.loop_id == self.current:
            self.say(f"(loop {event.loop_id} is {event.phase})")

    def _remember(self, loop_id: str) -> None:
        if loop_id not in self.completer.ids:
            self.completer.ids = (*self.completer.ids[-199:], loop_id)

    async def run_line(self, line: str) -> None:
        with trio.CancelScope() as scope:
            self.command_scope = scope
            try:
                command = parse_line(line)
                await self._run(command)
            except LoopactorsError as exc:
                self.say(f"error: {exc}")
            except Exception as exc:  # a bug in one command must not end the session
                self.say(f"error: unexpected {exc!r}")
            finally:
                self.command_scope = None
        if scope.cancelled_caught:
            self.say("(cancelled)")

    async def _run(self, command: Command) -> None:
        name, args = command.name, command.args
        if name == "empty":
            return
        if name == "start":
            await self._start(command.text)
        elif name == "/help":
            self.say(help_text())
        elif name == "/quit":
            self.quit = True
        elif name == "/worker":
            self._set_worker(args)
        elif name == "/code":
            await self._code(args)
        elif name == "/loop":
            await self._code_round(continuous=bool(args))
        elif name == "/loops":
            for state in await self.loops.list(limit=self.LIST_LIMIT):
                self._remember(state.loop_id)
                self.say(_line(state))
            self.say(f"({self.place.where})")
        elif name == "/history":
            for record in await self.loops.history(args[0], output_head=60):
                head = " ".join((record.output or record.error or "").split())[:60]
                self.say(f"  round {record.round}: {record.status} {head}")
        elif name == "/output":
            await self._output(args[0], int(args[1]))
        elif name == "/status" and not args and self.current is None:
            for state in await self.loops.list(
                live_only=True, limit=self.LIST_LIMIT
            ) or await self.loops.list(limit=self.LIST_LIMIT):
                self.say(_line(state))
        else:
            loop_id = args[0] if args else await self._which(name)
            if loop_id is None:
                return
            # A unique prefix of an id will do: `get` resolves it, wherever the loops are.
            state = await self.loops.get(loop_id)
            action = {
                "/stop-loop": self.loops.stop,
                "/pause": self.loops.pause,
                "/resume": self.loops.resume,
            }.get(name)
            if action is not None:
                state = await action(state.loop_id)
            self.say(_line(state))
            if name == "/pause" and not state.terminal:
                self.say(_pause_note(state))

    async def _start(self, text: str) -> None:
        worker = self.worker
        if worker is None and _stand_in(self.default_worker) and not self._said_scripted:
            self._said_scripted = True
            self.say("(no worker configured: new loops use the scripted worker; /worker SPEC)")
        state = await self.loops.start(text, worker=worker)
        self.current = state.loop_id
        self._remember(state.loop_id)
        self.say(
            f"started {state.loop_id}: {count_of(state.spec.rounds, 'round')}, "
            f"{state.spec.mode} mode"
        )

    async def _code(self, args: tuple[str, ...]) -> None:
        action, rest = args[0], args[1:]
        if action == "use":
            chosen, repo = rest[0], rest[1] if len(rest) > 1 else "."
            result = await self.place.code("status", slug=chosen, repo=repo)
            self.code_loop = (chosen, repo)
            self.say(f"code loop {chosen} chosen: /loop runs one round, /loop continuous more")
        else:
            slug, repo = self._code_loop(rest[0] if rest else None, action)
            result = await self.place.code(action, slug=slug, repo=repo)
        if result.message:
            self.say(result.message)
        for status in result.loops:
            state = status.state
            self.say(
                f"code loop {state.slug}: {state.status}, round {state.round}, "
                f"{state.merged_rounds} merged{f' ({state.reason})' if state.reason else ''}"
            )

    def _code_loop(self, slug: str | None, action: str) -> tuple[str | None, str]:
        if slug is not None:
            return slug, self.code_loop[1] if self.code_loop else "."
        if self.code_loop is not None:
            return self.code_loop
        if action == "status":
            return None, "."  # every code loop of the repository here
        raise CodeLoopError("no code loop chosen: /code use SLUG [REPO] first")

    async def _code_round(self, *, continuous: bool) -> None:
        if self.code_loop is None:
            raise CodeLoopError(
                "/loop runs a round of a code loop: choose one with /code use SLUG [REPO] "
                "(start an iteration loop with |loop:N| task)"
            )
        slug, repo = self.code_loop
        result = await self.place.code(
            "run", slug=slug, repo=repo, rounds=None if continuous else 1
        )
        self.say(f"code loop {slug}: {result.message}")

    def _set_worker(self, args: tuple[str, ...]) -> None:
        if not args:
            self.say(f"new loops use: {self.worker or self.default_worker}")
            return
        spec = args[0]
        if not self.place.keeps_running:  # embedded: check now
            if check_worker_spec(spec).workspace == "round":
                # A coding-agent CLI works here, wherever later rounds run from.
                spec = in_workspace(spec, Path.cwd())
        else:  # a node: its kind and options now; what must exist there, the node checks
            check_worker_spec(spec, here=False)
        self.worker = spec
        self.say(f"new loops use: {self.worker}")

    async def _output(self, loop_id: str, round_number: int) -> None:
        state = await self.loops.get(loop_id)
        for stored in await self.loops.history(state.loop_id, output_head=0):
            if stored.round == round_number:
                record = await self.place.output(state.loop_id, round_number)
                self.say(record.output or f"(no output; {record.status}: {record.error})")
                return
        self.say(f"error: loop {loop_id} has no round {round_number}")

    async def _which(self, name: str) -> str | None:
        """The loop a command without an id means: the current one, or the only live one."""
        if self.current is not None and not (await self.loops.get(self.current)).terminal:
            return self.current
        live = await self.loops.list(live_only=True, limit=self.LIST_LIMIT)
        if len(live) == 1:
            return live[0].loop_id
        if not live:
            if self.current is not None and name == "/status":
                return self.current
            self.say("no loop is running" + self._instant_hint())
            return None
        ids = ", ".join(s.loop_id for s in live)
        self.say(f"several loops are running ({ids}); say which: {name} ID")
        return None

    def _instant_hint(self) -> str:
        """Why a loop just started may be over already: the scripted worker without a
        latency answers at once, so there is nothing left to stop or pause."""
        spec = self.worker or self.default_worker
        read = WorkerSpec.parse(spec)
        if self.current is None or not _stand_in(spec) or "latency=" in read.options:
            return ""
        return (
            " (the scripted worker ends each round at once; /worker scripted:latency=1 makes "
            "each round take a second, to try /stop-loop and /pause)"
        )

    async def live_count(self) -> int:
        return len(await self.loops.list(live_only=True, limit=self.LIST_LIMIT))


def _stand_in(spec: str) -> bool:
    """The spec's kind is a stand-in (scripted): its rounds need no model."""
    kind = worker_kind(spec)
    return kind is not None and kind.stand_in


def _line(state: LoopState) -> str:
    # Completed rounds, and the one running (if any), never one number for both.
    progress = f"{state.completed_rounds}/{state.spec.rounds} completed"
    if state.tasks_total is not None:
        progress += f", tasks {state.tasks_done}/{state.tasks_total}"
    if state.phase in ("dispatching", "awaiting_worker", "summarizing"):
        progress += f", round {state.round} running"
    text = f"{state.loop_id}  {state.phase:<15} {progress}  {state.spec.task[:40]}"
    return text if state.reason is None else f"{text}  ({state.reason})"


def _pause_note(state: LoopState) -> str:
    """When a pause takes effect."""
    if state.phase == "paused":
        return f"paused: round {state.round} is next; /resume runs it"
    if state.pause_requested:
        return (
            f"pauses once round {state.round} (running now) is recorded; no round after it "
            "is dispatched until /resume"
        )
    return f"not paused: the loop is {state.phase}"


def run_repl(args: argparse.Namespace, config: RuntimeConfig) -> int:
    return trio.run(_main, args, config)


@asynccontextmanager
async def _place(args: argparse.Namespace, config: RuntimeConfig) -> AsyncIterator[Place]:
    url = args.connect or _serving_node(config)
    async with AsyncExitStack() as stack:
        if url:
            token = read_token(args, Path(config.state_dir))
            try:
                node = await stack.enter_async_context(
                    connect(url, token=token, client_name="loopactors repl")
                )
            except ConnectionLost:
                if args.connect:
                    raise
                # The node that wrote node.url is gone (killed): run a runtime here.
            else:
                yield on_node(node)
                return
        yield embedded(await stack.enter_async_context(open_runtime(config)))


def _serving_node(config: RuntimeConfig) -> str | None:
    """The URL a node serving the state directory wrote (``node.url``): the REPL goes there
    rather than refuse a directory that node holds (only one runtime may use it)."""
    if store_kind(config.store).in_process:
        return None
    try:
        url = (Path(config.state_dir) / NODE_URL_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return url or None


async def _main(args: argparse.Namespace, config: RuntimeConfig) -> int:
    state_dir = trio.Path(config.state_dir)
    await state_dir.mkdir(parents=True, exist_ok=True)
    session: PromptSession[str] = PromptSession(history=FileHistory(str(state_dir / HISTORY_FILE)))
    async with _place(args, config) as place:
        repl = Repl(place, args.worker if args.connect else None)
        repl.on_lost = functools.partial(_end_prompt, session)
        if place.keeps_running and not args.connect:
            repl.say(
                f"a node serves {config.state_dir}: connected to it at {place.url} "
                "(from its node.url); loops started here run there"
            )
        repl.say(f"loopactors repl on {place.where}; /help for the commands")
        # While the editor waits for a line, Ctrl-C is a key it handles; between lines it is
        # a signal, and it cancels the command being run instead of ending the session.
        with (
            trio.open_signal_receiver(signal.SIGINT) as sigint,
            trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as ended,
            patch_stdout(raw=True),
        ):
            async with trio.open_nursery() as nursery:
                place.background = nursery
                nursery.start_soon(repl.show_events)
                nursery.start_soon(_cancel_commands, sigint, repl)
                # By default they would end the process and leave rounds' workers running.
                nursery.start_soon(_leave_on, ended)
                await _read_lines(session, repl)
                nursery.cancel_scope.cancel()
    return 0 if repl.lost is None else 1


async def _leave_on(signals: AsyncIterator[int]) -> None:
    async for _ in signals:
        leave_now()


async def _cancel_commands(sigint: AsyncIterator[int], repl: Repl) -> None:
    async for _ in sigint:
        if repl.command_scope is not None:
            repl.command_scope.cancel()


def _end_prompt(session: PromptSession[str]) -> None:
    """Make a prompt waiting in the editor's thread return (as Ctrl-D would)."""
    app = session.app
    loop = app.loop
    if app.is_running and loop is not None:
        loop.call_soon_threadsafe(
            lambda: app.exit(exception=EOFError()) if app.is_running else None
        )


async def _read_lines(session: PromptSession[str], repl: Repl) -> None:
    def prompt() -> str:
        return session.prompt(
            "loop> ", completer=repl.completer, complete_while_typing=False, handle_sigint=False
        )

    while not repl.quit:
        try:
            line = await trio.to_thread.run_sync(prompt, abandon_on_cancel=True)
        except KeyboardInterrupt:  # Ctrl-C: drop the line being typed
            continue
        except EOFError:  # Ctrl-D, or the node went away
            if repl.quit or await _confirm_quit(session, repl):
                return
            continue
        await repl.run_line(line)


async def _confirm_quit(session: PromptSession[str], repl: Repl) -> bool:
    try:
        live = await repl.live_count()
    except LoopactorsError:  # the node cannot tell: nothing to protect by asking
        return True
    if not live:
        return True
    if repl.place.keeps_running:
        question = f"{live} loop(s) are live; they keep running in the node. Quit? [y/N] "
    elif repl.place.keeps_nothing:
        question = (
            f"{live} loop(s) are live; they stop with this embedded node and are lost (the "
            "memory store keeps nothing). Quit? [y/N] "
        )
    else:
        question = (
            f"{live} loop(s) are live; they stop with this embedded node (its state directory "
            "keeps them for `loopactors resume`). Quit? [y/N] "
        )

    def ask() -> str:
        return session.prompt(question, handle_sigint=False)

    try:
        answer = await trio.to_thread.run_sync(ask, abandon_on_cancel=True)
    except (KeyboardInterrupt, EOFError):
        return False
    return answer.strip().lower() in {"y", "yes"}
