"""The gateway's one internal exception."""

from __future__ import annotations

from ._protocol import ErrorCode

__all__ = ["Refusal"]


class Refusal(Exception):
    """A request answered with an error frame; the connection goes on."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
