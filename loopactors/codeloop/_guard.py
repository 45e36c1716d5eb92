"""What a role's turn may change in the repository, checked before and after the turn.

A role (executor, reviewer) is a process with the user's permissions running in the round's
worktree: it can run any git command. The loop cannot stop it from writing refs, hooks or the
repository's config, so it takes a :class:`RepoSnapshot` before each turn and one after it,
and :func:`breaches` names every change outside ``refs/heads/loop/<slug>/``, to git's
internals a later command would use (``info/``, alternates, worktrees), to the main checkout
and to the ledger files that steer a round; :func:`undo` puts back what it can (refs, hook
and ``info/`` files, ``.git/config``, alternates, submodules' git files). The round then
trips the ``safety`` gate (docs/codeloop.md, "What a worker may change").

The snapshot taken before a turn is also written to the ledger (:func:`save_turn`, removed
once the turn has been checked): a loop that crashes during the turn finds it when it resumes
and checks the turn then (:func:`load_turn`), so a crash never skips the check.

Pushes are refused up front instead (:func:`refuse_push_env`): a push that got out cannot be
undone. A role can still remove that setting from its own environment; such a push is seen
afterwards only through the remote-tracking ref it moves.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
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


#: A file as the guard compares it: (mode, size, mtime, contents), contents None for what is
#: not a regular file of at most 1 MiB.
FileMark = tuple[int, int, int, bytes | None]


@attrs.frozen
class RepoSnapshot:
    """The repository's refs, its main worktree's HEAD, hook files, ``.git/config``,
    ``.git/info/``, linked worktrees, ``objects/info/alternates``, the main checkout's status,
    and the loop's ledger files that steer a round."""

    #: ref name -> object id, or ``"ref: <target>"`` for a symbolic ref (HEAD included).
    refs: Mapping[str, str]
    #: hook file path -> its mark, for every entry of the hooks directories.
    hooks: Mapping[str, FileMark]
    config: bytes | None
    #: path -> mark of every file under ``.git/info`` (``attributes``, ``exclude``, ...).
    info: Mapping[str, FileMark] = attrs.field(factory=dict)
    alternates: bytes | None = None
    #: linked worktree name -> what git keeps of it (its ``gitdir`` and ``config.worktree``).
    worktrees: Mapping[str, str] = attrs.field(factory=dict)
    #: The main checkout's ``git status`` with a digest of each file it lists.
    status: str = ""
    #: ledger file (relative to ``.loop/<slug>``) -> digest of its contents.
    ledger: Mapping[str, str] = attrs.field(factory=dict)
    #: The user's own git configuration files (``~/.gitconfig``, ``~/.config/git/...``):
    #: what the operator's next git command reads.
    user: Mapping[str, FileMark] = attrs.field(factory=dict)
    #: path -> mark of the files of submodules' git directories (``.git/modules/``, nested
    #: too) that git reads when it recurses into a submodule of the main checkout.
    modules: Mapping[str, FileMark] = attrs.field(factory=dict)


class _SavedTurn(msgspec.Struct, forbid_unknown_fields=True):
    """A role's turn under way, as written to the ledger (``TURN.json``)."""

    role: str
    refs: dict[str, str]
    hooks: dict[str, FileMark]
    config: bytes | None
    info: dict[str, FileMark] = {}
    alternates: bytes | None = None
    worktrees: dict[str, str] = {}
    status: str = ""
    ledger: dict[str, str] = {}
    user: dict[str, FileMark] = {}
    modules: dict[str, FileMark] = {}


def save_turn(path: Path, role: str, before: RepoSnapshot) -> None:
    """Write the snapshot taken before ``role``'s turn durably (fsync, rename)."""
    saved = _SavedTurn(
        role,
        dict(before.refs),
        dict(before.hooks),
        before.config,
        dict(before.info),
        before.alternates,
        dict(before.worktrees),
        before.status,
        dict(before.ledger),
        dict(before.user),
        dict(before.modules),
    )
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
    return saved.role, RepoSnapshot(
        refs=saved.refs,
        hooks=saved.hooks,
        config=saved.config,
        info=saved.info,
        alternates=saved.alternates,
        worktrees=saved.worktrees,
        status=saved.status,
        ledger=saved.ledger,
        user=saved.user,
        modules=saved.modules,
    )


async def take_snapshot(
    root: Path, *, hooks_as_in: RepoSnapshot | None = None, ledger: Path | None = None
) -> RepoSnapshot:
    """Refs, hooks, ``.git/config``, ``.git/info``, worktrees, alternates and the main
    checkout's status of the repository at ``root``, and the files of the ``ledger``
    directory that steer a round (see :func:`ledger_marks`).

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
    alternates_path = root / ".git" / "objects" / "info" / "alternates"
    return RepoSnapshot(
        refs=refs,
        hooks=_hook_files(root, hooks_config),
        config=config,
        info=_files_under(root / ".git" / "info"),
        alternates=alternates_path.read_bytes() if alternates_path.is_file() else None,
        worktrees=_worktrees(root / ".git" / "worktrees"),
        status=await _status(root),
        ledger=ledger_marks(ledger) if ledger is not None else {},
        user=_user_files(),
        modules=_module_files(root / ".git" / "modules"),
    )


def _user_files() -> dict[str, FileMark]:
    """The user's git configuration and attributes files, as the operator's git reads them
    (the loop's own git reads none of them)."""
    home = Path.home()
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "git"
    paths = [home / ".gitconfig", xdg / "config", xdg / "attributes"]
    if os.environ.get("GIT_CONFIG_GLOBAL"):
        paths.append(Path(os.environ["GIT_CONFIG_GLOBAL"]))
    files: dict[str, FileMark] = {}
    for path in paths:
        try:
            info = path.lstat()
        except OSError:
            continue
        kept = stat.S_ISREG(info.st_mode) and info.st_size <= _HOOKS_CAP
        try:
            data = path.read_bytes() if kept else None
        except OSError:
            data = None
        files[str(path)] = (info.st_mode, info.st_size, info.st_mtime_ns, data)
    return files


#: Files of ``.loop/<slug>/`` that are not compared: the round's worktrees (the role's to
#: change), and what the loop or other commands write during a turn (the lease, a pause or
#: stop request, the turn's own snapshot and breach note, temporary files).
_LEDGER_SKIPPED = frozenset(
    {"worktrees", "LEASE.json", "LEASE.lock", "CONTROL.json", "TURN.json", "BREACH.txt"}
)


def ledger_marks(directory: Path) -> dict[str, str]:
    """A digest of every file of the ledger directory that steers a round (``STATE.json``,
    ``RUNS.jsonl``, ``ORCHESTRATION.md``, ``PLAN.md``, ``LESSONS.md``, ``HANDOFF.md``, the
    receipts under ``rounds/`` and anything else there), by path relative to it."""

    def skipped(entry: Path) -> bool:
        return entry.name.endswith(".tmp") or (
            entry.parent == directory and entry.name in _LEDGER_SKIPPED
        )

    marks: dict[str, str] = {}
    for entry in _walk(directory, skipped):
        name = str(entry.relative_to(directory))
        try:
            marks[name] = _digest(entry)
        except OSError:
            marks[name] = "unreadable"
    return marks


def _walk(directory: Path, skipped: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Every file under ``directory`` but those ``skipped`` (and what is below a skipped
    directory), depth first in sorted order; a symbolic link is a file, never followed, and
    a directory that cannot be listed is passed over."""
    stack = [directory]
    while stack:
        current = stack.pop()
        try:
            entries = sorted(current.iterdir())
        except OSError:
            continue
        for entry in entries:
            if skipped is not None and skipped(entry):
                continue
            try:
                if entry.is_dir() and not entry.is_symlink():
                    stack.append(entry)
                    continue
            except OSError:
                pass  # the caller's own read of it fails and says so
            yield entry


def _digest(path: Path) -> str:
    if path.is_symlink():
        return "symlink " + os.readlink(path)
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _files_under(directory: Path) -> dict[str, FileMark]:
    files: dict[str, FileMark] = {}
    for entry in _walk(directory):
        with contextlib.suppress(OSError):
            files[str(entry)] = _file_mark(entry)
    return files


def _file_mark(path: Path) -> FileMark:
    """Mode, size, mtime and, for a regular file of at most ``_HOOKS_CAP`` bytes, the bytes of
    ``path`` (a symbolic link not followed); OSError if it cannot be read."""
    info = path.lstat()
    kept = stat.S_ISREG(info.st_mode) and info.st_size <= _HOOKS_CAP
    return (info.st_mode, info.st_size, info.st_mtime_ns, path.read_bytes() if kept else None)


def _module_files(modules: Path) -> dict[str, FileMark]:
    """Each submodule's ``config``, hooks, ``info/`` and ``objects/info/alternates`` under
    ``modules`` (a submodule's git directory is where its ``HEAD`` is; its own submodules are
    in its ``modules/``). The operator's next ``git status`` recurses into the submodules and
    runs what their configuration names (``core.fsmonitor``, filters, hooks)."""
    files: dict[str, FileMark] = {}
    stack = [modules]
    while stack:
        current = stack.pop()
        if (current / "HEAD").is_file():
            for path in (current / "config", current / "objects" / "info" / "alternates"):
                with contextlib.suppress(OSError):
                    files[str(path)] = _file_mark(path)
            files.update(_files_under(current / "hooks"))
            files.update(_files_under(current / "info"))
            current = current / "modules"
        try:  # a submodule named a/b has its git directory in modules/a/b
            stack += sorted(
                (p for p in current.iterdir() if p.is_dir() and not p.is_symlink()),
                reverse=True,
            )
        except OSError:
            continue
    return files


def _worktrees(directory: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return found
    for entry in entries:
        kept = []
        for name in ("gitdir", "config.worktree", "commondir"):
            try:
                kept.append(f"{name}={(entry / name).read_text(errors='replace').strip()}")
            except OSError:
                continue
        found[entry.name] = "; ".join(kept)
    return found


async def _status(root: Path) -> str:
    """The main checkout's ``git status`` (ledger excluded) and a digest of each file it
    lists, so that a change to a file already changed shows too."""
    # Submodules: their commits only. Their work trees would need a git run inside each,
    # under a configuration a role may have changed (it is put back after the turn).
    code, out = await git(
        [
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=normal",
            "--ignored=no",
            "--ignore-submodules=dirty",
        ],
        cwd=root,
        check=False,
        content=True,
    )
    if code != 0:
        return f"git status failed ({code})"
    lines: list[str] = []
    for item in out.split("\0"):
        if len(item) < 4:
            continue
        path = root / item[3:]
        try:
            mark = _digest(path) if path.is_file() else "not a file"
        except OSError:
            mark = "unreadable"
        lines.append(f"{item} {mark}")
    return "\n".join(lines)


def _hook_dirs(root: Path, config: bytes | None) -> list[Path]:
    """``.git/hooks`` and a ``core.hooksPath`` the config names (relative to the root)."""
    dirs = [root / ".git" / "hooks"]
    for line in (config or b"").decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "hookspath":
            dirs.append(root / os.path.expanduser(value.strip().strip('"')))
    return dirs


def _hook_files(root: Path, config: bytes | None) -> dict[str, FileMark]:
    files: dict[str, FileMark] = {}
    for directory in _hook_dirs(root, config):
        try:
            entries = sorted(directory.iterdir())
        except OSError:
            continue
        for entry in entries:
            with contextlib.suppress(OSError):
                files[str(entry)] = _file_mark(entry)
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
    found += [
        f"hook {Path(path).name} {what}" for path, what in _changed(before.hooks, after.hooks)
    ]
    if before.config != after.config:
        found.append(".git/config changed")
    found += [
        f".git/info/{Path(path).name} {what}" for path, what in _changed(before.info, after.info)
    ]
    if before.alternates != after.alternates:
        found.append(".git/objects/info/alternates changed")
    found += [
        f"the user's git configuration {path} {what}"
        for path, what in _changed(before.user, after.user)
    ]
    found += [
        f".git/{path.partition('/.git/')[2]} {what}"
        for path, what in _changed(before.modules, after.modules)
    ]
    found += [
        f"linked worktree {name} {what}"
        for name, what in _changed(before.worktrees, after.worktrees, ("added", "removed"))
    ]
    if before.status != after.status:
        found.append(f"the main checkout changed ({_status_change(before.status, after.status)})")
    found += [
        f"ledger file {name} {what} (only the loop writes the ledger)"
        for name, what in _changed(before.ledger, after.ledger)
    ]
    return found


def _changed(
    before: Mapping[str, object],
    after: Mapping[str, object],
    words: tuple[str, str] = ("created", "deleted"),
) -> list[tuple[str, str]]:
    """Each key whose value differs, by name, with what happened to it: ``words`` for one
    that appeared or went, ``changed`` otherwise."""
    found = []
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if old != new:
            found.append(
                (name, words[0] if old is None else words[1] if new is None else "changed")
            )
    return found


def _status_change(before: str, after: str) -> str:
    old, new = set(before.splitlines()), set(after.splitlines())
    paths = sorted({line[3:].rsplit(" ", 1)[0] for line in old ^ new})
    return ", ".join(paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")


def _short(value: str | None) -> str:
    if value is None:
        return "none"
    return value if value.startswith("ref: ") else value[:12]


async def undo(
    root: Path, before: RepoSnapshot, after: RepoSnapshot, slug: str, *, live: set[str]
) -> list[str]:
    """Put back refs (not HEAD), hook files, ``.git/config``, ``.git/info``,
    ``objects/info/alternates`` and the submodules' git files as ``before`` had them.

    Returns what could not be put back, one line each: the main working tree's HEAD,
    remote-tracking refs, the main checkout's files, linked worktrees and the ledger's
    files (which the operator checks before resuming).
    """
    own = f"refs/heads/loop/{slug}/"
    left: list[str] = []
    others = tuple(f"refs/heads/loop/{name}/" for name in live)
    if before.config != after.config:
        # First: a changed config could change what the ref commands below do.
        _restore_file(root / ".git" / "config", before.config, left)
    if before.alternates != after.alternates:
        _restore_file(root / ".git" / "objects" / "info" / "alternates", before.alternates, left)
    _undo_files(before.info, after.info, left, ".git/info/")
    _undo_files(before.user, after.user, left, "the user's git configuration ")
    _undo_files(before.modules, after.modules, left, "submodule git file ")
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
    _undo_files(before.hooks, after.hooks, left, "hook ")
    if before.status != after.status:
        # A moved branch shows in the status too, and is put back above: look again.
        now = await _status(root)
        if now != before.status:
            left.append(f"the main checkout ({_status_change(before.status, now)})")
    left += [
        f"linked worktree {name}"
        for name in sorted(before.worktrees.keys() | after.worktrees.keys())
        if before.worktrees.get(name) != after.worktrees.get(name)
    ]
    changed = [
        name
        for name in sorted(before.ledger.keys() | after.ledger.keys())
        if before.ledger.get(name) != after.ledger.get(name)
    ]
    if changed:
        left.append(f"ledger files {', '.join(changed)} (check them before resuming)")
    return left


def _undo_files(
    before: Mapping[str, FileMark], after: Mapping[str, FileMark], left: list[str], label: str
) -> None:
    for path in sorted(before.keys() | after.keys()):
        old_file, new_file = before.get(path), after.get(path)
        if old_file == new_file:
            continue
        target = Path(path)
        if old_file is None:
            try:
                target.unlink()
            except OSError as exc:
                left.append(f"{label}{target.name} ({exc.strerror})")
        elif old_file[3] is not None:
            _restore_file(target, old_file[3], left, mode=stat.S_IMODE(old_file[0]))
        else:
            left.append(f"{label}{target.name}")


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
