"""A thin layer over the real ``git`` command (``trio.run_process``, never a shell).

Every ref it writes is checked to be under ``loop/<slug>/``: main and every other branch are
never touched, and nothing is ever pushed. No hook, fsmonitor, filter or diff driver runs in
the loop's own git commands, and they read neither the user's nor the system's configuration. The
repository root is found through the common git directory, so a call from inside a linked
worktree finds the main working tree's ``.loop/`` (CodeShell 6).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import attrs
import trio

from ..errors import GitError
from ._model import round_name

__all__ = ["LoopGit", "git", "main_root"]

_ERROR_TAIL = 1500
#: The loop's own git commands run no hook and no fsmonitor command a worker may have planted
#: (``git worktree add`` would run ``post-checkout``, ``git status`` an fsmonitor), and read
#: no attributes file but the repository's own (``core.attributesFile`` may be a user's).
_NO_HOOKS = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.attributesFile=/dev/null",
)
#: Nor any user's or the system's configuration (where a worker could define a filter that
#: runs in the loop's ``git worktree add``, docs/security.md).
_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_ATTR_NOSYSTEM": "1",
}
#: Filter and diff drivers named in the repository's configuration.
_DRIVER = re.compile(r"^(filter|diff)\.(.+)\.[A-Za-z]+$")


async def _run(args: list[str], cwd: Path) -> tuple[int, bytes, bytes]:
    env = {**os.environ, **_ENV}
    try:
        done = await trio.run_process(
            ["git", *_NO_HOOKS, *args],
            cwd=cwd,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )
    except OSError as exc:
        raise GitError(f"cannot run git in {cwd}: {exc}") from None
    return done.returncode, done.stdout, done.stderr


async def no_drivers(cwd: Path) -> list[str]:
    """``-c`` options that turn off every filter and diff driver the repository's
    configuration defines: a command that checks files out or compares them (``worktree
    add``, ``status``, ``diff``) then runs no program a worker may have named."""
    code, out, _ = await _run(["config", "--name-only", "--get-regexp", r"^(filter|diff)\."], cwd)
    drivers: set[tuple[str, str]] = set()
    for line in out.decode("utf-8", "replace").splitlines() if code == 0 else []:
        found = _DRIVER.match(line.strip())
        if found is not None:
            drivers.add((found.group(1), found.group(2)))
    options: list[str] = []
    for kind, driver in sorted(drivers):
        keys = ("smudge", "clean", "process") if kind == "filter" else ("textconv", "command")
        options += [item for key in keys for item in ("-c", f"{kind}.{driver}.{key}=")]
        if kind == "filter":
            options += ["-c", f"filter.{driver}.required=false"]
    return options


async def git(
    args: list[str], *, cwd: Path, check: bool = True, content: bool = False
) -> tuple[int, str]:
    """Run ``git args`` in ``cwd``; return (exit code, stdout). A failure with ``check`` is a
    :class:`GitError` carrying git's own message. ``content``: the command checks files out
    or compares them, so the repository's filter and diff drivers are turned off for it."""
    if content:
        args = [*await no_drivers(cwd), *args]
    code, stdout, stderr = await _run(args, cwd)
    out = stdout.decode("utf-8", errors="replace")
    if check and code != 0:
        err = stderr.decode("utf-8", errors="replace").strip()[-_ERROR_TAIL:]
        raise GitError(f"git {' '.join(args)} failed in {cwd} (exit {code}): {err}")
    return code, out


async def main_root(path: Path) -> Path:
    """The main working tree of the repository ``path`` is in (also from a linked worktree).

    Raises:
        GitError: ``path`` is not in a git repository, or the repository has no main working
            tree (a bare repository).
    """
    code, out = await git(
        ["rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=path, check=False
    )
    if code != 0:
        raise GitError(f"{path} is not inside a git repository")
    return _working_tree_of(Path(out.strip()), path)


def _working_tree_of(git_dir: Path, path: Path) -> Path:
    common = git_dir.resolve()
    root = common.parent
    if common.name != ".git" or not (root / ".git").is_dir():
        raise GitError(
            f"the repository of {path} (git directory {common}) has no main working tree; "
            "code loops need a non-bare repository"
        )
    return root


@attrs.frozen
class LoopGit:
    """The git operations of one loop, confined to its ``loop/<slug>/`` branches."""

    root: Path
    slug: str

    @property
    def candidate(self) -> str:
        return f"loop/{self.slug}/candidate"

    def round_branch(self, number: int) -> str:
        return f"loop/{self.slug}/{round_name(number)}"

    def _own(self, branch: str) -> str:
        if not branch.startswith(f"loop/{self.slug}/") or ".." in branch:
            raise GitError(
                f"refusing to write branch {branch!r}: a code loop only writes loop/{self.slug}/*"
            )
        return branch

    async def _git(
        self, *args: str, cwd: Path | None = None, check: bool = True, content: bool = False
    ) -> str:
        return (await git(list(args), cwd=cwd or self.root, check=check, content=content))[1]

    async def rev(self, ref: str) -> str | None:
        """The commit ``ref`` names, or None if it names none."""
        code, out = await git(
            ["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=self.root, check=False
        )
        return out.strip() if code == 0 else None

    async def head_branch(self) -> str | None:
        code, out = await git(
            ["symbolic-ref", "--quiet", "--short", "HEAD"], cwd=self.root, check=False
        )
        return out.strip() if code == 0 else None

    async def create_branch(self, branch: str, start: str, *, force: bool = False) -> None:
        await self._git(
            "branch", "--no-track", *(["-f"] if force else []), self._own(branch), start
        )

    async def delete_branch(self, branch: str) -> None:
        await self._git("branch", "-D", self._own(branch))

    async def add_worktree(self, path: Path, branch: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        await self._git("worktree", "add", "--quiet", str(path), self._own(branch), content=True)

    async def remove_worktree(self, path: Path) -> None:
        if _exists(path):
            await self._git("worktree", "remove", "--force", str(path))
        await self._git("worktree", "prune")

    async def advance_candidate(self, old: str, new: str) -> None:
        """Move the candidate from ``old`` to ``new`` (a fast-forward, compare-and-swap)."""
        code, _ = await git(["merge-base", "--is-ancestor", old, new], cwd=self.root, check=False)
        if code != 0:
            raise GitError(f"{new[:12]} does not descend from the candidate {old[:12]}")
        await self._git("update-ref", f"refs/heads/{self._own(self.candidate)}", new, old)

    async def commits(self, base: str, tip: str) -> list[str]:
        """``git log --oneline base..tip``, oldest first."""
        out = await self._git("log", "--reverse", "--format=%h %s", f"{base}..{tip}")
        return out.splitlines()

    async def diff_stat(self, base: str, tip: str) -> str:
        return await self._git("diff", "--no-ext-diff", "--stat", base, tip, content=True)

    async def diff(self, base: str, tip: str, *, cap: int = 40_000) -> str:
        out = await self._git("diff", "--no-ext-diff", "--no-textconv", base, tip, content=True)
        return out if len(out) <= cap else out[:cap] + f"\n[diff cut at {cap} characters]\n"

    async def dirty(self, worktree: Path) -> list[str]:
        """Uncommitted changes in a worktree (``git status --porcelain``)."""
        return (await self._git("status", "--porcelain", cwd=worktree, content=True)).splitlines()

    async def loop_branches(self) -> dict[str, str]:
        """Every ``loop/<slug>/*`` branch and its commit."""
        out = await self._git(
            "for-each-ref",
            "--format=%(refname:short) %(objectname)",
            f"refs/heads/loop/{self.slug}/",
        )
        return dict(line.split(" ", 1) for line in out.splitlines() if line)

    async def exclude_ledger(self) -> None:
        """Keep ``.loop/`` out of ``git status`` (``info/exclude``, inside the repository)."""
        exclude = self.root / ".git" / "info" / "exclude"
        text = exclude.read_text() if exclude.exists() else ""
        if "/.loop/" not in text.splitlines():
            exclude.parent.mkdir(parents=True, exist_ok=True)
            with exclude.open("a") as handle:
                handle.write(("" if not text or text.endswith("\n") else "\n") + "/.loop/\n")


def _exists(path: Path) -> bool:
    return path.exists()
