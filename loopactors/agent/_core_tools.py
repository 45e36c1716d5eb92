"""The core tools every agent is offered: read, write, edit, glob, grep, bash.

All paths are confined to the workspace (relative paths resolve against it; anything that
resolves outside is refused). ``bash`` runs ``/bin/sh -c`` in the workspace in its own process
group: on timeout or cancellation the whole group gets SIGTERM, a short grace, then SIGKILL, so
nothing it started outlives the call.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from ._tools import Tool, ToolContext, ToolError, inside_workspace

__all__ = ["core_tools"]

OUTPUT_LIMIT = 30_000
_READ_LINES = 2000
_GREP_HITS = 200
_GLOB_HITS = 500
_KILL_GRACE = 1.0


def _text_arg(arguments: Mapping[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str):
        raise ToolError(f"argument {name!r} is required and must be a string")
    return value


def _relative(context: ToolContext, path: Path) -> str:
    return str(path.relative_to(context.workspace.resolve())) or "."


async def _read(arguments: Mapping[str, Any], context: ToolContext) -> str:
    path = inside_workspace(context.workspace, _text_arg(arguments, "path"))
    offset = int(arguments.get("offset") or 1)
    limit = int(arguments.get("limit") or _READ_LINES)
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise ToolError(f"cannot read {arguments['path']!r}: {exc.strerror or exc}") from None
    chosen = lines[max(offset, 1) - 1 : max(offset, 1) - 1 + limit]
    numbered = "\n".join(f"{n:6}\t{line}" for n, line in enumerate(chosen, start=max(offset, 1)))
    more = len(lines) - (max(offset, 1) - 1 + len(chosen))
    return numbered + (f"\n[{more} more lines; read on with offset]" if more > 0 else "")


async def _write(arguments: Mapping[str, Any], context: ToolContext) -> str:
    path = inside_workspace(context.workspace, _text_arg(arguments, "path"))
    content = _text_arg(arguments, "content")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    except OSError as exc:
        raise ToolError(f"cannot write {arguments['path']!r}: {exc.strerror or exc}") from None
    return f"wrote {len(content)} chars to {_relative(context, path)}"


async def _edit(arguments: Mapping[str, Any], context: ToolContext) -> str:
    path = inside_workspace(context.workspace, _text_arg(arguments, "path"))
    old, new = _text_arg(arguments, "old_string"), _text_arg(arguments, "new_string")
    replace_all = bool(arguments.get("replace_all", False))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolError(f"cannot read {arguments['path']!r}: {exc.strerror or exc}") from None
    count = text.count(old) if old else 0
    if count == 0:
        raise ToolError(f"old_string not found in {arguments['path']!r}; read the file first")
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {arguments['path']!r}; give more context "
            "to make it unique, or set replace_all"
        )
    path.write_text(text.replace(old, new), encoding="utf-8")
    return f"replaced {count if replace_all else 1} occurrence(s) in {_relative(context, path)}"


async def _glob(arguments: Mapping[str, Any], context: ToolContext) -> str:
    pattern = _text_arg(arguments, "pattern")
    if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
        raise ToolError(f"glob pattern {pattern!r} must stay inside the workspace (relative)")
    root = context.workspace.resolve()

    def find() -> list[str]:
        return sorted(str(p.relative_to(root)) for p in root.glob(pattern) if p.is_file())

    found = await trio.to_thread.run_sync(find)
    extra = f"\n[{len(found) - _GLOB_HITS} more]" if len(found) > _GLOB_HITS else ""
    return "\n".join(found[:_GLOB_HITS]) + extra if found else f"no file matches {pattern!r}"


async def _grep(arguments: Mapping[str, Any], context: ToolContext) -> str:
    try:
        regex = re.compile(_text_arg(arguments, "pattern"))
    except re.error as exc:
        raise ToolError(f"pattern is not a valid regular expression: {exc}") from None
    base = inside_workspace(context.workspace, str(arguments.get("path") or "."))
    include = str(arguments.get("glob") or "**/*")
    root = context.workspace.resolve()

    def search() -> list[str]:
        hits: list[str] = []
        files = [base] if base.is_file() else sorted(base.glob(include))
        for file in files:
            if not file.is_file() or ".git" in file.parts:
                continue
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue  # binary or unreadable: not searchable text
            for number, line in enumerate(text.splitlines(), start=1):
                if regex.search(line):
                    hits.append(f"{file.relative_to(root)}:{number}:{line[:300]}")
                    if len(hits) > _GREP_HITS:
                        return hits
        return hits

    hits = await trio.to_thread.run_sync(search)
    extra = (
        f"\n[more than {_GREP_HITS} matches; narrow the search]" if len(hits) > _GREP_HITS else ""
    )
    return "\n".join(hits[:_GREP_HITS]) + extra if hits else "no match"


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


async def _bash(arguments: Mapping[str, Any], context: ToolContext) -> str:
    command = _text_arg(arguments, "command")
    timeout = float(arguments.get("timeout") or 120)
    pgid: list[int] = []

    class _Started:
        def started(self, process: trio.Process | None = None) -> None:
            if process is not None:
                pgid.append(process.pid)

    try:
        with trio.move_on_after(timeout) as scope:
            done = await trio.run_process(
                ["/bin/sh", "-c", command],
                cwd=context.workspace,
                env={**os.environ, **context.env} if context.env else None,
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
    if scope.cancelled_caught:
        raise ToolError(f"command timed out after {timeout:g}s and was killed: {command}")
    output = cap_output(done.stdout.decode("utf-8", errors="replace"))
    if done.returncode != 0:
        raise ToolError(f"exit code {done.returncode}\n{output}")
    return output or "(no output)"


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


def core_tools() -> list[Tool]:
    """Fresh instances of the six core tools."""
    return [
        Tool(
            name="read",
            description="Read a text file of the workspace, with line numbers.",
            parameters=_schema(
                ["path"], path="file path", offset="first line (1-based)", limit="max lines"
            ),
            run=_read,
        ),
        Tool(
            name="write",
            description="Create or overwrite a file of the workspace with the given content.",
            parameters=_schema(["path", "content"], path="file path", content="full content"),
            run=_write,
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
            run=_edit,
        ),
        Tool(
            name="glob",
            description="List workspace files matching a glob pattern such as '**/*.py'.",
            parameters=_schema(["pattern"], pattern="glob pattern relative to the workspace"),
            run=_glob,
        ),
        Tool(
            name="grep",
            description="Search file contents with a regular expression; prints file:line:text.",
            parameters=_schema(
                ["pattern"],
                pattern="regular expression",
                path="file or directory (default: workspace)",
                glob="which files, e.g. '**/*.py'",
            ),
            run=_grep,
        ),
        Tool(
            name="bash",
            description=(
                "Run a shell command in the workspace; output is stdout and stderr together. "
                "A non-zero exit is an error."
            ),
            parameters=_schema(["command"], command="shell command", timeout="seconds (120)"),
            run=_bash,
            timeout=None,  # it has its own timeout argument
        ),
    ]
