"""The ledger directory ``<repo>/.loop/<slug>/`` and its files. Plain file I/O, no trio.

``RUNS.jsonl`` is the write-ahead log: each change appends its event (flushed to disk) before
``STATE.json`` is replaced (temp file, fsync, rename). A crash between the two leaves a
snapshot older than the log, and :meth:`CodeLedger.read_state` then rebuilds it from the log.
Only the lease holder calls :meth:`CodeLedger.record` (the single writer); anyone may read.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs
import msgspec

from ..errors import CodeLoopNotFound
from ._events import AnyCodeEvent, apply_event, decode_event, encode_event, rebuild_state
from ._model import CodeLoopState, check_slug, round_name

__all__ = ["LOOP_DIR", "CodeLedger", "list_slugs", "write_atomic"]

LOOP_DIR = ".loop"
_state_decoder = msgspec.json.Decoder(CodeLoopState)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def list_slugs(root: Path) -> list[str]:
    """Slugs with a ledger under ``root/.loop``, sorted."""
    base = root / LOOP_DIR
    if not base.is_dir():
        return []
    return sorted(
        p.name
        for p in base.iterdir()
        if (p / "STATE.json").is_file() or (p / "RUNS.jsonl").is_file()
    )


@attrs.frozen
class CodeLedger:
    """The files of one code loop. ``slug`` is checked, so no path leaves ``root/.loop``."""

    root: Path
    slug: str = attrs.field(validator=lambda _, __, value: check_slug(value))

    @property
    def dir(self) -> Path:
        return self.root / LOOP_DIR / self.slug

    @property
    def state_path(self) -> Path:
        return self.dir / "STATE.json"

    @property
    def runs_path(self) -> Path:
        return self.dir / "RUNS.jsonl"

    @property
    def orchestration_path(self) -> Path:
        return self.dir / "ORCHESTRATION.md"

    @property
    def plan_path(self) -> Path:
        return self.dir / "PLAN.md"

    @property
    def lessons_path(self) -> Path:
        return self.dir / "LESSONS.md"

    @property
    def handoff_path(self) -> Path:
        return self.dir / "HANDOFF.md"

    @property
    def turn_path(self) -> Path:
        """The repository as it was before the role's turn under way (see ``_guard``)."""
        return self.dir / "TURN.json"

    @property
    def breach_path(self) -> Path:
        """What a turn changed outside the loop's branches, kept until a safety gate records
        it, so that a crash between finding and recording a breach cannot drop it."""
        return self.dir / "BREACH.txt"

    @property
    def control_path(self) -> Path:
        """A pause or stop asked for while a round runs (the holder applies it)."""
        return self.dir / "CONTROL.json"

    @property
    def worktrees_dir(self) -> Path:
        return self.dir / "worktrees"

    def round_dir(self, number: int) -> Path:
        return self.dir / "rounds" / round_name(number)

    def worktree(self, number: int) -> Path:
        return self.worktrees_dir / round_name(number)

    def exists(self) -> bool:
        return self.state_path.is_file() or self.runs_path.is_file()

    # -- reading ---------------------------------------------------------------------------

    def read_events(self) -> list[AnyCodeEvent]:
        try:
            data = self.runs_path.read_bytes()
        except FileNotFoundError:
            return []
        events = []
        for number, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                events.append(decode_event(line))
            except msgspec.DecodeError as exc:
                if number == len(data.splitlines()) and not data.endswith(b"\n"):
                    break  # a last line cut short by a crash: it never happened
                raise CodeLoopNotFound(
                    f"{self.runs_path} line {number} is not a code loop event: {exc}"
                ) from None
        return events

    def read_state(self) -> CodeLoopState:
        """The current state: ``STATE.json``, or the log's if the snapshot is behind it.

        Raises:
            CodeLoopNotFound: no ledger for this slug, or an unreadable one.
        """
        state: CodeLoopState | None = None
        try:
            state = _state_decoder.decode(self.state_path.read_bytes())
        except FileNotFoundError:
            pass
        except msgspec.DecodeError as exc:
            raise CodeLoopNotFound(f"{self.state_path} cannot be read: {exc}") from None
        events = self.read_events()
        if events and (state is None or events[-1].at > state.updated_at):
            state = rebuild_state(events)
        if state is None:
            raise CodeLoopNotFound(
                f"no code loop {self.slug!r} in {self.root} "
                f"(no {LOOP_DIR}/{self.slug}/STATE.json); start one with: loopactors code init"
            )
        return state

    # -- writing (the lease holder only) -----------------------------------------------------

    def record(self, state: CodeLoopState | None, event: AnyCodeEvent) -> CodeLoopState:
        """Apply ``event`` to ``state`` (checked), log it, then replace the snapshot."""
        new = apply_event(state, event)
        self.dir.mkdir(parents=True, exist_ok=True)
        with self.runs_path.open("ab") as handle:
            handle.write(encode_event(event) + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        write_atomic(self.state_path, msgspec.json.format(msgspec.json.encode(new)) + b"\n")
        return new

    def fingerprint(self) -> tuple[int, ...]:
        """Size and change time of STATE.json and RUNS.jsonl: what a round compares to tell
        whether anyone but itself wrote them."""
        marks: list[int] = []
        for path in (self.state_path, self.runs_path):
            try:
                info = path.stat()
            except FileNotFoundError:
                marks += [-1, -1]
            else:
                marks += [info.st_size, info.st_mtime_ns]
        return tuple(marks)

    def write_text(self, path: Path, text: str) -> None:
        write_atomic(path, text.encode("utf-8"))

    def write_receipt(self, number: int, name: str, text: str) -> Path:
        path = self.round_dir(number) / f"{name}.md"
        self.write_text(path, text)
        return path

    def append_lesson(self, text: str) -> None:
        if not self.lessons_path.exists():
            self.write_text(self.lessons_path, f"# Lessons: {self.slug}\n\n")
        with self.lessons_path.open("a", encoding="utf-8") as handle:
            handle.write(text.rstrip() + "\n")

    def lessons(self) -> str:
        try:
            return self.lessons_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""

    def request_control(self, command: str) -> None:
        write_atomic(self.control_path, msgspec.json.encode({"command": command}))

    def take_control(self) -> str | None:
        """The pending pause/stop request, removed (None if there is none)."""
        try:
            data = msgspec.json.decode(self.control_path.read_bytes())
        except (FileNotFoundError, msgspec.DecodeError):
            return None
        self.control_path.unlink(missing_ok=True)
        command = data.get("command") if isinstance(data, dict) else None
        return command if command in ("pause", "stop") else None

    def pending_control(self) -> str | None:
        try:
            data = msgspec.json.decode(self.control_path.read_bytes())
        except (FileNotFoundError, msgspec.DecodeError):
            return None
        return data.get("command") if isinstance(data, dict) else None
