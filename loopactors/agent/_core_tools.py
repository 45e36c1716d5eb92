"""The core tools every agent is offered: read, write, edit, glob, grep, bash.

Every path-like argument (``path`` of each tool, ``glob``'s pattern, ``grep``'s ``path`` and
``glob``) is confined to the workspace by ``_workspace``: relative paths resolve against it,
symlinks are followed, anything that resolves outside is refused or, in a listing, left out;
only regular files are read or written, off the trio thread and up to a byte limit. ``grep``
uses RE2 (linear time in the text searched, whatever the pattern), so no pattern can stall
the node. ``bash`` runs ``/bin/sh -c`` in the workspace, unconfined or in a bubblewrap
sandbox (``_sandbox``), in its own process group: on timeout or cancellation the whole group
gets SIGTERM, a short grace, then SIGKILL, so nothing it started outlives the call.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import re2
import trio

from ..errors import AgentError
from ._protected import Protected, put_back_tables
from ._sandbox import BASH_MODES, BashMode, BashPlan, bash_env, find_bwrap, plan_bash
from ._tools import Tool, ToolContext, ToolError, inside_workspace
from ._workspace import compile_glob, path_mode, read_regular, walk_files, write_regular

__all__ = ["compile_regex", "core_tools"]

T = TypeVar("T")

OUTPUT_LIMIT = 30_000
_READ_LINES = 2000
_GREP_HITS = 200
_GLOB_HITS = 500
#: A glob or grep walks and reads for at most this long, then answers with what it found.
_SEARCH_SECONDS = 30.0
_KILL_GRACE = 1.0
_SANDBOX_NOTE = (
    " It runs in a sandbox: only the workspace and /tmp are writable, system directories are "
    "read-only, nothing else of the machine is visible, and there is no network."
)
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error goes to the model, not to the node's stderr


def compile_regex(pattern: str) -> Any:
    """A grep pattern compiled by RE2, or a clear error (RE2 has no backreferences, no
    lookahead or lookbehind, no possessive or atomic groups: docs/agent.md)."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", errors="replace")
        raise ToolError(
            f"pattern {pattern!r} is not a valid regular expression for grep: {reason} "
            "(RE2 syntax, as Python's re but without backreferences, lookahead/lookbehind "
            "and possessive or atomic groups)"
        ) from None


def _text_arg(arguments: Mapping[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str):
        raise ToolError(f"argument {name!r} is required and must be a string")
    return value


def _relative(context: ToolContext, path: Path) -> str:
    return str(path.relative_to(context.workspace.resolve())) or "."


async def _in_thread(function: Callable[[], T], name: str, verb: str) -> T:
    """File I/O off the trio thread (a slow disk never stalls the node), OSError made clear."""
    try:
        return await trio.to_thread.run_sync(function)
    except OSError as exc:
        raise ToolError(f"cannot {verb} {name!r}: {exc.strerror or exc}") from None


async def _read_text(root: Path, path: Path, name: str) -> tuple[str, str]:
    """The text of a regular file, and a note when it was longer than the tools read."""
    data, size = await _in_thread(lambda: read_regular(root, path), name, "read")
    note = ""
    if size > len(data):
        note = f"\n[file is {size} bytes; only the first {len(data)} were read]"
    return data.decode("utf-8", errors="replace"), note


async def _read(guard: Protected, arguments: Mapping[str, Any], context: ToolContext) -> str:
    name = _text_arg(arguments, "path")
    path = inside_workspace(context.workspace, name)
    guard.check(context.workspace.resolve(), path, name, write=False)
    offset = max(int(arguments.get("offset") or 1), 1)
    limit = int(arguments.get("limit") or _READ_LINES)
    text, note = await _read_text(context.workspace.resolve(), path, name)
    lines = text.splitlines()
    chosen = lines[offset - 1 : offset - 1 + limit]
    numbered = "\n".join(f"{n:6}\t{line}" for n, line in enumerate(chosen, start=offset))
    more = len(lines) - (offset - 1 + len(chosen))
    return numbered + (f"\n[{more} more lines; read on with offset]" if more > 0 else "") + note


async def _write(guard: Protected, arguments: Mapping[str, Any], context: ToolContext) -> str:
    name = _text_arg(arguments, "path")
    path = inside_workspace(context.workspace, name)
    content = _text_arg(arguments, "content")
    data = content.encode("utf-8")
    root = context.workspace.resolve()
    await _check_write(guard, context, path, name, data)
    await _in_thread(lambda: write_regular(root, path, data), name, "write")
    return f"wrote {len(content)} chars to {_relative(context, path)}"


async def _edit(guard: Protected, arguments: Mapping[str, Any], context: ToolContext) -> str:
    name = _text_arg(arguments, "path")
    path = inside_workspace(context.workspace, name)
    guard.check(context.workspace.resolve(), path, name, write=True)
    old, new = _text_arg(arguments, "old_string"), _text_arg(arguments, "new_string")
    replace_all = bool(arguments.get("replace_all", False))
    root = context.workspace.resolve()
    data, size = await _in_thread(lambda: read_regular(root, path), name, "read")
    if size > len(data):
        raise ToolError(f"{name!r} is {size} bytes, over the {len(data)} bytes edit handles")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{name!r} is not UTF-8 text; edit changes text files only") from None
    count = text.count(old) if old else 0
    if count == 0:
        raise ToolError(f"old_string not found in {name!r}; read the file first")
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {name!r}; give more context "
            "to make it unique, or set replace_all"
        )
    changed = text.replace(old, new).encode("utf-8")
    await _check_write(guard, context, path, name, changed)
    await _in_thread(lambda: write_regular(root, path, changed), name, "write")
    return f"replaced {count if replace_all else 1} occurrence(s) in {_relative(context, path)}"


async def _check_write(
    guard: Protected, context: ToolContext, path: Path, name: str, data: bytes
) -> None:
    root = context.workspace.resolve()
    guard.check(root, path, name, write=True)
    if path.name == "pyproject.toml":  # its [tool.loopactors] must stay as it is
        old: bytes | None = None
        if await trio.Path(path).exists():
            old, _ = await _in_thread(lambda: read_regular(root, path), name, "read")
        guard.check_write(root, path, name, old, data)


async def _glob(guard: Protected, arguments: Mapping[str, Any], context: ToolContext) -> str:
    pattern = _text_arg(arguments, "pattern")
    matcher = compile_glob(pattern)
    root = context.workspace.resolve()
    stop = threading.Event()

    def find() -> list[str]:
        deadline = time.monotonic() + _SEARCH_SECONDS
        listable = guard.listing(root)
        found = []
        for path, name in walk_files(
            root, root, should_stop=lambda: stop.is_set() or time.monotonic() > deadline
        ):
            if matcher.fullmatch(name) and listable(path):
                found.append(name)
        return sorted(found)

    try:
        found = await trio.to_thread.run_sync(find, abandon_on_cancel=True)
    finally:
        stop.set()  # a cancelled call's walk ends at its next file
    extra = f"\n[{len(found) - _GLOB_HITS} more]" if len(found) > _GLOB_HITS else ""
    return "\n".join(found[:_GLOB_HITS]) + extra if found else f"no file matches {pattern!r}"


async def _grep(guard: Protected, arguments: Mapping[str, Any], context: ToolContext) -> str:
    regex = compile_regex(_text_arg(arguments, "pattern"))
    given = str(arguments.get("path") or ".")
    base = inside_workspace(context.workspace, given)
    matcher = compile_glob(str(arguments.get("glob") or "**/*"))
    root = context.workspace.resolve()
    guard.check(root, base, given, write=False)
    stop = threading.Event()

    def search() -> tuple[list[str], bool]:
        deadline = time.monotonic() + _SEARCH_SECONDS

        def should_stop() -> bool:
            return stop.is_set() or time.monotonic() > deadline

        hits: list[str] = []
        listable = guard.listing(root)
        if stat.S_ISREG(path_mode(root, base) or 0):
            files: Iterable[tuple[Path, str]] = [(base, base.name)]
        else:
            files = walk_files(root, base, should_stop=should_stop)
        searched: set[Path] = set()
        for file, name in files:
            if file in searched or (file is not base and not matcher.fullmatch(name)):
                continue  # a file reached again through a symlink is searched once
            if not listable(file):
                continue
            searched.add(file)
            try:
                data, _ = read_regular(root, file)
                text = data.decode("utf-8")
            except (OSError, UnicodeDecodeError, ToolError):
                continue  # binary, unreadable or not a regular file: not searchable text
            for number, line in enumerate(text.splitlines(), start=1):
                if regex.search(line):
                    hits.append(f"{file.relative_to(root)}:{number}:{line[:300]}")
                    if len(hits) > _GREP_HITS:
                        return hits, False
            if should_stop():
                return hits, not stop.is_set()
        return hits, False

    try:
        hits, timed_out = await trio.to_thread.run_sync(search, abandon_on_cancel=True)
    finally:
        stop.set()  # a cancelled call's search ends at its next line batch
    extra = (
        f"\n[more than {_GREP_HITS} matches; narrow the search]" if len(hits) > _GREP_HITS else ""
    )
    if timed_out:
        extra += f"\n[search stopped after {_SEARCH_SECONDS:g}s; narrow it with path or glob]"
    return "\n".join(hits[:_GREP_HITS]) + extra if hits else "no match" + extra


def cap_output(text: str, limit: int = OUTPUT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[Output truncated at {limit} chars of {len(text)}]"


def _kill_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


async def _stop_group(process: trio.Process) -> None:
    _kill_group(process.pid, signal.SIGTERM)
    with trio.move_on_after(_KILL_GRACE):
        await process.wait()
    _kill_group(process.pid, signal.SIGKILL)


def _bash_tool(mode: BashMode, guard: Protected) -> Callable[[Mapping[str, Any], ToolContext], Any]:
    bwrap = find_bwrap() if mode == "sandbox" else None

    async def _bash(arguments: Mapping[str, Any], context: ToolContext) -> str:
        command = _text_arg(arguments, "command")
        timeout = float(arguments.get("timeout") or 120)
        pgid: list[int] = []
        plan: BashPlan | None = None
        put_back: list[str] = []

        class _Started:
            def started(self, process: trio.Process | None = None) -> None:
                if process is not None:
                    pgid.append(process.pid)

        try:
            with trio.move_on_after(timeout) as scope:
                # In a thread: the sandbox's argv comes from a scan of the workspace.
                plan = await trio.to_thread.run_sync(
                    functools.partial(
                        plan_bash, mode, command, context.workspace, bwrap, hidden=guard.hidden
                    )
                )
                done = await trio.run_process(
                    plan.argv,
                    cwd=context.workspace,
                    env=bash_env(mode, context.workspace, context.env),
                    stdin=subprocess.DEVNULL,
                    capture_stdout=True,
                    stderr=subprocess.STDOUT,
                    check=False,
                    start_new_session=True,
                    deliver_cancel=_stop_group,
                    task_status=_Started(),
                )
        finally:
            if pgid:  # whatever the command left running in the background goes too
                _kill_group(pgid[0], signal.SIGKILL)
            if plan is not None and plan.tables:  # also after a timeout or a stop
                put_back = put_back_tables(plan.root, plan.tables)
        if put_back:
            raise ToolError(
                "the command changed the [tool.loopactors] table of "
                f"{', '.join(put_back)}, which configures the node that runs this agent: "
                "the file was put back as it was before the command (the command's other "
                "changes stay)"
            )
        if scope.cancelled_caught:
            raise ToolError(f"command timed out after {timeout:g}s and was killed: {command}")
        output = cap_output(done.stdout.decode("utf-8", errors="replace"))
        if done.returncode != 0:
            raise ToolError(f"exit code {done.returncode}\n{output}")
        return output or "(no output)"

    return _bash


def _schema(required: list[str], **properties: str) -> dict[str, Any]:
    types = {"timeout": "number", "offset": "integer", "limit": "integer", "replace_all": "boolean"}
    return {
        "type": "object",
        "properties": {
            name: {"type": types.get(name, "string"), "description": text}
            for name, text in properties.items()
        },
        "required": required,
    }


def core_tools(*, bash: BashMode = "on", node_paths: Sequence[Path] = ()) -> list[Tool]:
    """Fresh instances of the core tools; ``bash`` says how the bash tool runs commands
    (``on``: as the node's user; ``sandbox``: under bubblewrap; ``off``: no bash tool).
    ``node_paths`` are the node's own state (its state directory, its token file): no file
    tool touches them and the sandbox hides them (with the rest of ``_protected``'s rules).

    Raises:
        AgentError: an unknown ``bash`` mode, or ``sandbox`` without bubblewrap.
    """
    if bash not in BASH_MODES:
        raise AgentError(f"bash must be one of {', '.join(BASH_MODES)}, got {bash!r}")
    guard = Protected(tuple(Path(d).resolve() for d in node_paths))
    tools = [
        Tool(
            name="read",
            description="Read a text file of the workspace, with line numbers.",
            parameters=_schema(
                ["path"], path="file path", offset="first line (1-based)", limit="max lines"
            ),
            run=functools.partial(_read, guard),
        ),
        Tool(
            name="write",
            description="Create or overwrite a file of the workspace with the given content.",
            parameters=_schema(["path", "content"], path="file path", content="full content"),
            run=functools.partial(_write, guard),
        ),
        Tool(
            name="edit",
            description=(
                "Replace an exact string in a file (old_string must be unique unless replace_all)."
            ),
            parameters=_schema(
                ["path", "old_string", "new_string"],
                path="file path",
                old_string="exact text to replace",
                new_string="replacement",
                replace_all="replace every occurrence",
            ),
            run=functools.partial(_edit, guard),
        ),
        Tool(
            name="glob",
            description="List workspace files matching a glob pattern such as '**/*.py'.",
            parameters=_schema(["pattern"], pattern="glob pattern relative to the workspace"),
            run=functools.partial(_glob, guard),
        ),
        Tool(
            name="grep",
            description="Search file contents with a regular expression; prints file:line:text.",
            parameters=_schema(
                ["pattern"],
                pattern="regular expression (RE2: no backreferences or lookaround)",
                path="file or directory (default: workspace)",
                glob="which files, e.g. '**/*.py'",
            ),
            run=functools.partial(_grep, guard),
        ),
    ]
    if bash != "off":
        tools.append(
            Tool(
                name="bash",
                description=(
                    "Run a shell command in the workspace; output is stdout and stderr together. "
                    "A non-zero exit is an error." + (_SANDBOX_NOTE if bash == "sandbox" else "")
                ),
                parameters=_schema(["command"], command="shell command", timeout="seconds (120)"),
                run=_bash_tool(bash, guard),
                timeout=None,  # it has its own timeout argument
            )
        )
    return tools
