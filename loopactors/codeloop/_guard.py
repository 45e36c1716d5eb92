"""What a role's turn may change in the repository, checked before and after the turn.

A role (executor, reviewer) is a process with the user's permissions running in the round's
worktree: it can run any git command. The loop cannot stop it from writing refs, hooks or the
repository's config, so it takes a :class:`RepoSnapshot` before each turn and one after it,
and :func:`breaches` names every change outside ``refs/heads/loop/<slug>/``; :func:`undo`
puts back what it can (refs, hook files, ``.git/config``). The round then trips the
``safety`` gate (docs/codeloop.md, "What a worker may change").

The snapshot taken before a turn is also written to the ledger (:func:`save_turn`, removed
once the turn has been checked): a loop that crashes during the turn finds it when it resumes
and checks the turn then (:func:`load_turn`), so a crash never skips the check.

Pushes are refused up front instead (:func:`refuse_push_env`): a push that got out cannot be
undone. A role can still remove that setting from its own environment; such a push is seen
afterwards only through the remote-tracking ref it moves.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import msgspec

from ._git import git
from ._lease import read_lease
from ._ledger import write_atomic

__all__ = [
    "RepoSnapshot",
    "breaches",
    "live_loops",
    "load_turn",
    "push_urls",
    "refuse_push_env",
    "save_turn",
    "take_snapshot",
    "undo",
]

#: A URL scheme git has no helper for: a push rewritten to it fails before it connects.
REFUSED_PUSH_URL = "loopactors-refuses-push://"
_HOOKS_CAP = 1 << 20  # a hooks directory bigger than this is compared by size and mtime only


@attrs.frozen
class RepoSnapshot:
    """The repository's refs, its main worktree's HEAD, hook files and ``.git/config``."""

    #: ref name -> object id, or ``"ref: <target>"`` for a symbolic ref (HEAD included).
    refs: Mapping[str, str]
    #: hook file path -> (mode, size, mtime, contents) of every entry of the hooks
    #: directories; contents None for what is not a regular file of at most 1 MiB.
    hooks: Mapping[str, tuple[int, int, int, bytes | None]]
    config: bytes | None


class _SavedTurn(msgspec.Struct, forbid_unknown_fields=True):
    """A role's turn under way, as written to the ledger (``TURN.json``)."""

    role: str
    refs: dict[str, str]
    hooks: dict[str, tuple[int, int, int, bytes | None]]
    config: bytes | None


def save_turn(path: Path, role: str, before: RepoSnapshot) -> None:
    """Write the snapshot taken before ``role``'s turn durably (fsync, rename)."""
    saved = _SavedTurn(role, dict(before.refs), dict(before.hooks), before.config)
    write_atomic(path, msgspec.json.encode(saved))


def load_turn(path: Path) -> tuple[str, RepoSnapshot] | None:
    """The role and snapshot of a turn that was never checked (its loop crashed), or None.

    Raises ``ValueError`` naming the file when it cannot be read back.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"{path} cannot be read: {exc.strerror}") from None
    try:
        saved = msgspec.json.decode(data, type=_SavedTurn)
    except msgspec.DecodeError as exc:
        raise ValueError(f"{path} is damaged: {exc}") from None
    return saved.role, RepoSnapshot(refs=saved.refs, hooks=saved.hooks, config=saved.config)


async def take_snapshot(root: Path, *, hooks_as_in: RepoSnapshot | None = None) -> RepoSnapshot:
    """Refs, hooks and ``.git/config`` of the repository at ``root``.

    With ``hooks_as_in`` (the snapshot before a turn), hooks are read from the directories
    that held hooks *then*: a ``core.hooksPath`` a turn pointed elsewhere is a config change
    (put back with the config), and the files in that other directory are none of the
    loop's business. Never list, report or remove them: it may be ``/tmp`` or a home.
    """
    out = (
        await git(
            ["for-each-ref", "--format=%(refname)%00%(objectname)%00%(symref)"],
            cwd=root,
            check=True,
        )
    )[1]
    refs: dict[str, str] = {}
    for line in out.splitlines():
        name, obj, target = line.split("\0")
        refs[name] = f"ref: {target}" if target else obj
    code, head = await git(["symbolic-ref", "-q", "HEAD"], cwd=root, check=False)
    if code == 0:
        refs["HEAD"] = f"ref: {head.strip()}"
    else:
        refs["HEAD"] = (await git(["rev-parse", "HEAD"], cwd=root, check=False))[1].strip()
    config_path = root / ".git" / "config"
    config = config_path.read_bytes() if config_path.is_file() else None
    hooks_config = config if hooks_as_in is None else hooks_as_in.config
    return RepoSnapshot(refs=refs, hooks=_hook_files(root, hooks_config), config=config)


def _hook_dirs(root: Path, config: bytes | None) -> list[Path]:
    """``.git/hooks`` and a ``core.hooksPath`` the config names (relative to the root)."""
    dirs = [root / ".git" / "hooks"]
    for line in (config or b"").decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "hookspath":
            dirs.append(root / os.path.expanduser(value.strip().strip('"')))
    return dirs


def _hook_files(root: Path, config: bytes | None) -> dict[str, tuple[int, int, int, bytes | None]]:
    files: dict[str, tuple[int, int, int, bytes | None]] = {}
    for directory in _hook_dirs(root, config):
        try:
            entries = sorted(directory.iterdir())
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.lstat()
                kept = stat.S_ISREG(info.st_mode) and info.st_size <= _HOOKS_CAP
                data = entry.read_bytes() if kept else None
                files[str(entry)] = (info.st_mode, info.st_size, info.st_mtime_ns, data)
            except OSError:
                continue
    return files


def live_loops(root: Path, slug: str) -> set[str]:
    """Other code loops of this repository whose lease is held now: they guard their own refs."""
    live: set[str] = set()
    loops = root / ".loop"
    try:
        names = [p.name for p in loops.iterdir() if p.is_dir() and p.name != slug]
    except OSError:
        return live
    now = time.time()
    for name in names:
        try:
            record = read_lease(loops / name)
        except Exception:  # an unreadable lease guards nothing
            continue
        if record is not None and not record.stale(now):
            live.add(name)
    return live


def breaches(before: RepoSnapshot, after: RepoSnapshot, slug: str, *, live: set[str]) -> list[str]:
    """Every change a turn made that it must not, one line each.

    Refs under ``refs/heads/loop/<slug>/`` are the loop's own; refs under
    ``refs/heads/loop/<other>/`` of a loop in ``live`` are that loop's to check.
    """
    own = f"refs/heads/loop/{slug}/"
    others = tuple(f"refs/heads/loop/{name}/" for name in live)
    found: list[str] = []
    for name in sorted(before.refs.keys() | after.refs.keys()):
        old, new = before.refs.get(name), after.refs.get(name)
        if old == new or name.startswith(own) or name.startswith(others):
            continue
        if old is None:
            found.append(f"{name} created ({_short(new)})")
        elif new is None:
            found.append(f"{name} deleted (was {_short(old)})")
        else:
            found.append(f"{name} moved {_short(old)} -> {_short(new)}")
    for path in sorted(before.hooks.keys() | after.hooks.keys()):
        old_hook, new_hook = before.hooks.get(path), after.hooks.get(path)
        if old_hook != new_hook:
            what = "created" if old_hook is None else "deleted" if new_hook is None else "changed"
            found.append(f"hook {Path(path).name} {what}")
    if before.config != after.config:
        found.append(".git/config changed")
    return found


def _short(value: str | None) -> str:
    if value is None:
        return "none"
    return value if value.startswith("ref: ") else value[:12]


async def undo(
    root: Path, before: RepoSnapshot, after: RepoSnapshot, slug: str, *, live: set[str]
) -> list[str]:
    """Put back refs (not HEAD), hook files and ``.git/config`` as ``before`` had them.

    Returns what could not be put back, one line each.
    """
    own = f"refs/heads/loop/{slug}/"
    left: list[str] = []
    others = tuple(f"refs/heads/loop/{name}/" for name in live)
    if before.config != after.config:
        # First: a changed config could change what the ref commands below do.
        _restore_file(root / ".git" / "config", before.config, left)
    for name in sorted(before.refs.keys() | after.refs.keys()):
        old, new = before.refs.get(name), after.refs.get(name)
        if old == new or name.startswith(own) or name.startswith(others):
            continue
        if name == "HEAD":
            left.append("HEAD of the main working tree (check it out again)")
            continue
        if name.startswith("refs/remotes/"):
            # Moved by a push that got out: kept, so the repository still shows the remote.
            left.append(f"{name} (a push reached the remote; undo it there)")
            continue
        if old is None:
            args = ["update-ref", "--no-deref", "-d", name]
        elif old.startswith("ref: "):
            args = ["symbolic-ref", name, old.removeprefix("ref: ")]
        else:
            args = ["update-ref", "--no-deref", name, old]
        code, _ = await git(args, cwd=root, check=False)
        if code != 0:
            left.append(name)
    _undo_hooks(before, after, left)
    return left


def _undo_hooks(before: RepoSnapshot, after: RepoSnapshot, left: list[str]) -> None:
    for path in sorted(before.hooks.keys() | after.hooks.keys()):
        old_hook, new_hook = before.hooks.get(path), after.hooks.get(path)
        if old_hook == new_hook:
            continue
        target = Path(path)
        if old_hook is None:
            try:
                target.unlink()
            except OSError as exc:
                left.append(f"hook {target.name} ({exc.strerror})")
        elif old_hook[3] is not None:
            _restore_file(target, old_hook[3], left, mode=stat.S_IMODE(old_hook[0]))
        else:
            left.append(f"hook {target.name}")


def _restore_file(path: Path, data: bytes | None, left: list[str], *, mode: int = 0o644) -> None:
    try:
        if data is None:
            path.unlink(missing_ok=True)
            return
        if path.is_symlink():
            path.unlink()
        path.write_bytes(data)
        path.chmod(mode)
    except OSError as exc:
        left.append(f"{path.name} ({exc.strerror})")


async def push_urls(root: Path) -> list[str]:
    """Every explicit ``remote.<name>.pushurl`` of the repository."""
    code, out = await git(
        ["config", "--get-regexp", r"^remote\..*\.pushurl$"], cwd=root, check=False
    )
    return [line.split(" ", 1)[1] for line in out.splitlines() if " " in line] if code == 0 else []


def refuse_push_env(
    push_urls: Sequence[str] = (), environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment for a role that makes ``git push`` fail for every remote and URL.

    ``url.<scheme>.pushInsteadOf`` with an empty prefix rewrites every push URL to a scheme git
    cannot open; fetches are untouched. An explicit ``remote.<name>.pushurl`` is not rewritten
    by ``pushInsteadOf``, so each one in ``push_urls`` gets an ``insteadOf`` of its own (a
    fetch from that very URL is refused too during the turn). The entries are added after any
    ``GIT_CONFIG_*`` entries already in the environment.
    """
    env = os.environ if environ is None else environ
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        count = 0
    entries = [(f"url.{REFUSED_PUSH_URL}.pushInsteadOf", "")]
    entries += [(f"url.{REFUSED_PUSH_URL}.insteadOf", url) for url in push_urls]
    added: dict[str, str] = {"GIT_CONFIG_COUNT": str(count + len(entries))}
    for index, (key, value) in enumerate(entries, start=count):
        added[f"GIT_CONFIG_KEY_{index}"] = key
        added[f"GIT_CONFIG_VALUE_{index}"] = value
    return added
