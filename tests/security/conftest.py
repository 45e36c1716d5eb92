"""The code loop tests' toy repository and runtime, for the code loop breaches here."""

from ..codeloop.conftest import repo, rt

__all__ = ["repo", "rt"]
