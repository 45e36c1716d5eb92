"""What is kept of a round's output: at most ``max_output_bytes`` (docs/configuration.md).

Pure, no trio: :func:`cap_output` cuts a whole output; :class:`OutputTail` keeps the same
thing while the output streams in, so a worker that prints gigabytes costs the limit in
memory, not the gigabytes. Both give the same text: the last ``limit`` bytes (whole
characters) after one line saying what was dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

from .._util import open_private

__all__ = ["CUT_PREFIX", "LineSplitter", "OutputTail", "cap_output", "is_cut"]

CUT_PREFIX = "[output cut: the first "


def _cut_line(dropped: int, total: int, limit: int, kept_at: Path | None) -> str:
    where = f"; whole output in {kept_at}" if kept_at is not None else ""
    return (
        f"{CUT_PREFIX}{dropped} of {total} bytes were dropped "
        f"(max_output_bytes = {limit}){where}]\n"
    )


def is_cut(output: str, limit: int) -> bool:
    """``output`` was cut already (its first line says so) and the rest is within ``limit``:
    cutting it again would drop the line that says where the whole is."""
    if not output.startswith(CUT_PREFIX):
        return False
    _, _, rest = output.partition("\n")
    return len(rest) * 4 <= limit or len(rest.encode("utf-8", "surrogatepass")) <= limit


def cap_output(output: str, limit: int, *, kept_at: Path | None = None) -> str:
    """``output`` if it is at most ``limit`` bytes (UTF-8), or was cut already; else its last
    ``limit`` bytes (whole characters) after one line that says what was dropped and where
    the whole is."""
    if len(output) * 4 <= limit:  # no character is longer than 4 bytes: fits for sure
        return output
    if is_cut(output, limit):
        return output
    data = output.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return output
    tail = data[-limit:].decode("utf-8", "ignore")
    return _cut_line(len(data) - limit, len(data), limit, kept_at) + tail


class OutputTail:
    """An output as it streams in: its last ``limit`` bytes in memory and, once it is longer
    than that, the whole of it written to ``whole_at`` if given (opened at that moment, with
    what came so far). Memory: ``limit`` bytes plus the chunk being fed."""

    def __init__(self, limit: int, *, whole_at: Path | None = None) -> None:
        if limit <= 0:
            raise ValueError(f"an output limit must be > 0 bytes, got {limit}")
        self.limit = limit
        self.total = 0
        self.whole_at = whole_at
        self._tail = bytearray()
        self._file: IO[Any] | None = None
        #: Why the whole output could not be kept (the file could not be written), if so.
        self.whole_error: str | None = None

    def feed(self, chunk: bytes | bytearray) -> None:
        """Take the next chunk (blocking file I/O when the whole is being kept: call it in
        a thread then)."""
        self.total += len(chunk)
        self._tail += chunk
        if self.whole_at is not None and self.whole_error is None:
            try:
                if self._file is None and self.total > self.limit:
                    self._file = open_private(self.whole_at)  # 0600, docs/security.md
                    self._file.write(self._tail)  # the whole output so far
                elif self._file is not None:
                    self._file.write(chunk)
            except OSError as exc:
                self.whole_error = f"{type(exc).__name__}: {exc}"
                self.close()
        excess = len(self._tail) - self.limit
        if excess > 0:
            del self._tail[:excess]  # cheap: a bytearray drops its front in place

    def writes(self, size: int) -> bool:
        """Feeding a chunk of ``size`` bytes writes to the file (feed it in a thread)."""
        if self._file is not None:
            return True
        return (
            self.whole_at is not None
            and self.whole_error is None
            and self.total + size > self.limit
        )

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @property
    def kept(self) -> bytes:
        """The bytes kept: the last ``limit`` of them."""
        return bytes(self._tail)

    def text(self) -> str:
        """What is kept, as text: the whole output if it fit, else the cut line and the tail
        (its first, partial character dropped)."""
        self.close()
        if self.total <= self.limit:
            return self._tail.decode("utf-8", errors="replace")
        start = 0
        while start < min(4, len(self._tail)) and 0x80 <= self._tail[start] <= 0xBF:
            start += 1  # a character cut in two: drop the continuation bytes
        kept_at = self.whole_at if self.whole_at is not None and not self.whole_error else None
        tail = self._tail[start:].decode("utf-8", errors="replace")
        return _cut_line(self.total - self.limit, self.total, self.limit, kept_at) + tail


class LineSplitter:
    """A byte stream cut into lines (without their newline), each at most ``limit`` bytes.

    A longer line is dropped whole and counted (``dropped``): its bytes are skipped as they
    arrive, so one endless line costs ``limit`` bytes of memory, not the line. Each byte is
    looked at once, however the stream is chunked (no re-scan of a line still coming).
    """

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"a line limit must be > 0 bytes, got {limit}")
        self.limit = limit
        self.dropped = 0
        self._parts: list[bytes] = []
        self._size = 0
        self._skipping = False

    def feed(self, chunk: bytes | bytearray) -> list[bytes]:
        """The lines this chunk completes."""
        chunk = bytes(chunk)  # a no-op for bytes; slices of it are then bytes too
        lines: list[bytes] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            line = self._take(chunk[start:end])
            if line is not None:
                lines.append(line)
            self._parts.clear()
            self._size = 0
            self._skipping = False
            start = end + 1
        if start < len(chunk):
            self._keep(chunk[start:])
        return lines

    def end(self) -> bytes | None:
        """The last line, when the stream did not end with a newline (and it was kept)."""
        line = self._take(b"") if self._size else None
        self._parts.clear()
        self._size = 0
        return line

    def _take(self, piece: bytes) -> bytes | None:
        if self._skipping:
            return None
        if self._size + len(piece) > self.limit:
            self.dropped += 1
            return None
        return b"".join([*self._parts, piece]) if self._parts else piece

    def _keep(self, piece: bytes) -> None:
        if self._skipping:
            return
        if self._size + len(piece) > self.limit:
            self.dropped += 1
            self._skipping = True
            self._parts.clear()
            self._size = 0
            return
        self._parts.append(piece)
        self._size += len(piece)
