"""The node's token and where it may listen. Pure, no trio."""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import secrets
import stat
from pathlib import Path

from .._util import private_dirs
from ..errors import ConfigError

__all__ = ["MIN_TOKEN_LENGTH", "TOKEN_FILENAME", "check_listen", "load_token", "token_matches"]

log = logging.getLogger("loopactors.gateway")

#: The token a node creates in its state directory at first start (mode 0600).
TOKEN_FILENAME = "node.token"
#: Characters a node's token has at least (the one a node makes itself has 43).
MIN_TOKEN_LENGTH = 16


def load_token(state_dir: Path, token_file: Path | None = None) -> tuple[str, Path]:
    """The node's token and the file it came from.

    With ``token_file`` the token is read from it (it must exist and hold one line of at least
    ``MIN_TOKEN_LENGTH`` characters; a file other users may read is logged as a warning).
    Without, ``<state_dir>/node.token`` is read, or created with a new random token and
    permissions 0600 (readable by the owner only) when it does not exist yet.
    """
    if token_file is not None:
        return _read(token_file), token_file
    path = state_dir / TOKEN_FILENAME
    if not path.exists():
        private_dirs(state_dir)
        token = secrets.token_urlsafe(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another node created it between the check and here
            return _read(path), path
        with os.fdopen(fd, "w") as out:
            out.write(token + "\n")
        return token, path
    return _read(path), path


def _read(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
        mode = path.stat().st_mode
    except OSError as exc:
        raise ConfigError(f"cannot read the token file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"the token file {path} is not UTF-8 text") from None
    if not token or "\n" in token:
        raise ConfigError(f"the token file {path} must hold the token on one non-empty line")
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigError(
            f"the token in {path} has {len(token)} characters; a node's token needs at least "
            f"{MIN_TOKEN_LENGTH} (make one with: python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))')"
        )
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        log.warning(
            "the token file %s can be read by other users (mode %o); "
            "anyone who reads it can drive this node: chmod 600 it",
            path,
            stat.S_IMODE(mode),
        )
    return token


def token_matches(expected: str, offered: str | None) -> bool:
    """Constant-time comparison (the time taken does not tell how much of a guess was right)."""
    if offered is None:
        return False
    return hmac.compare_digest(expected.encode(), offered.encode())


def check_listen(host: str, *, explicit_token_file: bool) -> None:
    """Refuse a non-loopback address unless the operator chose the token file on purpose."""
    if is_loopback(host) or explicit_token_file:
        return
    raise ConfigError(
        f"refusing to listen on {host!r}, which is not a loopback address, without --token-file: "
        "a node reachable from other machines needs a token you chose and distributed on purpose "
        "(or listen on 127.0.0.1 / ::1 / localhost)"
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) into its parts, or a clear error."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"--listen takes HOST:PORT (e.g. 127.0.0.1:8765), got {text!r}")
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"--listen port must be a number from 0 to 65535, got {port_text!r}")
    return host.strip("[]"), port
