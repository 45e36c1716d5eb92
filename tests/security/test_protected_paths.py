"""What governs the run stays out of the agent's reach (docs/security.md, agent tools 6 and 7).

The default layout puts the state directory (``.loopactors``: the node's token, its store) and
the configuration (``loopactors.toml``, ``pyproject.toml``'s ``[tool.loopactors]``) in the
directory that is also the default workspace, with git's ``.git/config`` and hooks beside them.
A model with the file tools, or with ``bash=sandbox``, used that to read the token, plant a
``command:`` worker in the configuration or the store, and a ``core.fsmonitor`` in
``.git/config``. Here every such path is refused by every file tool, hidden or read-only in the
sandbox, and configuration an agent could have written is not used by the next run.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from loopactors.agent import ToolContext, ToolError, ToolSet, core_tools
from loopactors.agent._protected import put_back_tables
from loopactors.errors import ConfigError
from loopactors.runtime import load_config
from tests.hang import HANG

from ..agent.chat_server import ChatServer, completion
from ..agent.test_workspace_escapes import needs_bwrap

TOKEN = "node-token-0123456789abcdef"
PYPROJECT = '[project]\nname = "demo"\n\n[tool.loopactors]\nworker = "scripted"\n'


def make_project(root: Path) -> Path:
    """A project as the default layout leaves it: state, configuration and git in the
    workspace, and a second state directory under another name."""
    (root / ".loopactors").mkdir(parents=True)
    (root / ".loopactors" / "node.token").write_text(TOKEN)
    (root / ".loopactors" / "loopactors.db").write_bytes(b"SQLite format 3\0")
    (root / "custom-state").mkdir()
    (root / "custom-state" / "runtime.lock").write_text("")
    (root / "custom-state" / "node.token").write_text(TOKEN)
    (root / "loopactors.toml").write_text('worker = "scripted"\n')
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "sub").mkdir()
    (root / "src.py").write_text("print('task')\n")
    (root / "token_link").symlink_to(".loopactors/node.token")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "sub" / ".git").mkdir()  # a nested repository's internals
    (root / "sub" / ".git" / "config").write_text("[core]\n")
    return root


def context(root: Path, bash: Any = "off", node_paths: tuple[Path, ...] = ()) -> ToolContext:
    return ToolContext(workspace=root, tools=ToolSet(core_tools(bash=bash, node_paths=node_paths)))


async def call(ctx: ToolContext, name: str, **arguments: Any) -> str:
    tool = ctx.tools.get(name)
    assert tool is not None
    with trio.fail_after(HANG):
        return await tool.run(arguments, ctx)


READ_REFUSED = [
    ".loopactors/node.token",
    ".loopactors/loopactors.db",
    "custom-state/node.token",
    "token_link",
    "loopactors.toml",
    ".git/config",
    ".git/hooks/pre-commit.sample",
    "sub/.git/config",
]
WRITE_REFUSED = [
    ".loopactors/node.token",
    ".loopactors/new.txt",
    "custom-state/loops.txt",
    "loopactors.toml",
    "sub/loopactors.toml",
    ".git/config",
    ".git/hooks/post-checkout",
    ".git/info/attributes",
    ".git/HEAD",
    "sub/.git/config",
    "sub/.git",
]


@pytest.mark.parametrize("path", READ_REFUSED)
async def test_read_and_grep_refuse_what_governs_the_run(tmp_path: Path, path: str) -> None:
    root = make_project(tmp_path / "ws")
    ctx = context(root)
    with pytest.raises(ToolError, match="off limits to the tools"):
        await call(ctx, "read", path=path)
    with pytest.raises(ToolError, match="off limits to the tools"):
        await call(ctx, "grep", pattern=".", path=path)


@pytest.mark.parametrize("path", WRITE_REFUSED)
async def test_write_and_edit_refuse_what_governs_the_run(tmp_path: Path, path: str) -> None:
    root = make_project(tmp_path / "ws")
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}
    ctx = context(root)
    with pytest.raises(ToolError, match="off limits to the tools"):
        await call(ctx, "write", path=path, content='worker = "command:touch /tmp/x"\n')
    if (root / path).is_file():
        with pytest.raises(ToolError, match="off limits to the tools"):
            await call(ctx, "edit", path=path, old_string="", new_string="x", replace_all=True)
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}
    assert after == before


async def test_listings_leave_out_the_state_and_the_configuration(tmp_path: Path) -> None:
    root = make_project(tmp_path / "ws")
    ctx = context(root)
    listed = (await call(ctx, "glob", pattern="**/*")).splitlines()
    assert "src.py" in listed
    assert "pyproject.toml" in listed
    assert not [name for name in listed if "state" in name or "loopactors" in name], listed
    assert "token_link" not in listed  # a link to the token is the token
    assert "no match" in await call(ctx, "grep", pattern=TOKEN)
    hits = (await call(ctx, "grep", pattern="scripted", glob="*.toml")).splitlines()
    assert hits == ['pyproject.toml:5:worker = "scripted"']


async def test_the_nodes_own_state_is_refused_whatever_its_name(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "plain").mkdir(parents=True)
    (root / "plain" / "notes.txt").write_text("state\n")
    (root / "secret.txt").write_text(TOKEN)  # a [node] token_file kept in the workspace
    ctx = context(root, node_paths=(root / "plain", root / "secret.txt"))
    for path in ("plain/notes.txt", "secret.txt"):
        with pytest.raises(ToolError, match="the node's own state"):
            await call(ctx, "read", path=path)
    with pytest.raises(ToolError, match="the node's own state"):
        await call(ctx, "write", path="plain/loop.txt", content="x")
    assert "no match" in await call(ctx, "grep", pattern=TOKEN)


async def test_pyproject_is_writable_but_not_its_loopactors_table(tmp_path: Path) -> None:
    root = make_project(tmp_path / "ws")
    ctx = context(root)
    await call(ctx, "edit", path="pyproject.toml", old_string='"demo"', new_string='"demo2"')
    assert 'name = "demo2"' in (root / "pyproject.toml").read_text()
    with pytest.raises(ToolError, match=r"not its \[tool.loopactors\] table"):
        await call(ctx, "edit", path="pyproject.toml", old_string='"scripted"', new_string='"x"')
    with pytest.raises(ToolError, match=r"not its \[tool.loopactors\] table"):
        await call(
            ctx, "write", path="sub/pyproject.toml", content='[tool.loopactors]\nworker = "x"\n'
        )
    with pytest.raises(ToolError, match="would not be valid TOML"):
        await call(ctx, "write", path="pyproject.toml", content="[tool.loopactors\n")
    await call(ctx, "write", path="sub/pyproject.toml", content='[project]\nname = "s"\n')
    assert "[tool.loopactors]" in (root / "pyproject.toml").read_text()


@needs_bwrap
async def test_the_sandbox_hides_the_state_and_keeps_the_configuration_read_only(
    tmp_path: Path,
) -> None:
    root = make_project(tmp_path / "ws")
    (root / "plain").mkdir()
    (root / "plain" / "notes.txt").write_text("state\n")
    (root / "secret.txt").write_text(TOKEN)
    ctx = context(root, bash="sandbox", node_paths=(root / "plain", root / "secret.txt"))
    assert TOKEN not in await call(ctx, "bash", command="cat secret.txt; echo end")
    with pytest.raises(ToolError, match="exit code"):
        await call(ctx, "bash", command="echo planted > secret.txt")
    assert (root / "secret.txt").read_text() == TOKEN
    # The state directories are empty in the sandbox; what is written there goes nowhere.
    listing = await call(ctx, "bash", command="ls -A .loopactors custom-state plain; echo done")
    assert TOKEN not in listing
    assert "node.token" not in listing
    assert "notes" not in listing
    await call(
        ctx,
        "bash",
        command="echo planted > .loopactors/loopactors.db; echo x > plain/loop.txt",
    )
    assert (root / ".loopactors" / "loopactors.db").read_bytes() == b"SQLite format 3\0"
    assert not (root / "plain" / "loop.txt").exists()
    for command in (
        "echo 'worker = \"command:id\"' > loopactors.toml",
        "git config core.fsmonitor 'touch pwned'",
        "echo '#!/bin/sh' > .git/hooks/post-checkout",
        "echo '* filter=x' > .git/info/attributes",
        "echo '[core]' >> sub/.git/config",
        # The nested repository has no hooks or info directory: none can be made.
        "echo '#!/bin/sh' > sub/.git/hooks/pre-commit",
        "echo '* filter=x' > sub/.git/info/attributes",
    ):
        with pytest.raises(ToolError, match="exit code"):
            await call(ctx, "bash", command=command)
    assert (root / "loopactors.toml").read_text() == 'worker = "scripted"\n'
    assert (root / "pyproject.toml").read_text() == PYPROJECT
    assert "fsmonitor" not in (root / ".git" / "config").read_text()
    assert not (root / ".git" / "hooks" / "post-checkout").exists()
    assert not (root / ".git" / "info" / "attributes").exists()
    assert not (root / "sub" / ".git" / "hooks" / "pre-commit").exists()
    assert not (root / "sub" / ".git" / "info" / "attributes").exists()
    # The task's own files stay writable, and git can still be read.
    assert await call(ctx, "bash", command="echo ok >> src.py && git status --short") != ""


DEEP = "a/b/c/d/e/f"  # six levels: the scan stopped at three


@needs_bwrap
async def test_the_sandbox_guards_what_governs_the_run_at_any_depth(tmp_path: Path) -> None:
    """State directories, ``loopactors.toml`` and ``.git`` internals six and more levels
    deep were left alone by the sandbox (its scan went three levels down), while the file
    tools refused them. Now the whole workspace is scanned, and kept: one made by a
    previous command of the same loop is guarded at the next."""
    root = make_project(tmp_path / "ws")
    deep = root / DEEP
    (deep / ".loopactors").mkdir(parents=True)
    (deep / ".loopactors" / "node.token").write_text(TOKEN)
    (deep / "x" / "loopactors.toml").parent.mkdir()
    (deep / "x" / "loopactors.toml").write_text('worker = "scripted"\n')
    await trio.run_process(["git", "init", "-q", str(deep / "x" / "repo")])
    ctx = context(root, bash="sandbox")
    listing = await call(ctx, "bash", command=f"ls -A {DEEP}/.loopactors; echo done")
    assert "node.token" not in listing
    for command in (
        f"echo 'worker = \"command:id\"' > {DEEP}/x/loopactors.toml",
        f"git -C {DEEP}/x/repo config core.fsmonitor 'touch pwned'",
        f"echo '#!/bin/sh' > {DEEP}/x/repo/.git/hooks/post-checkout",
    ):
        with pytest.raises(ToolError, match="exit code"):
            await call(ctx, "bash", command=command)
    # The state directory is an empty private one: what is written there goes nowhere.
    await call(ctx, "bash", command=f"echo planted > {DEEP}/.loopactors/node.token")
    assert (deep / "x" / "loopactors.toml").read_text() == 'worker = "scripted"\n'
    assert "fsmonitor" not in (deep / "x" / "repo" / ".git" / "config").read_text()
    assert (deep / ".loopactors" / "node.token").read_text() == TOKEN
    # Made by one command, guarded at the next (the kept scan reads the changed
    # directories again): a repository, a configuration file and a state directory.
    later = "p/q/r/s/t/u/v"
    await call(
        ctx,
        "bash",
        command=f"mkdir -p {later}/.loopactors && git init -q {later}/repo "
        f"&& echo 'worker = \"scripted\"' > {later}/loopactors.toml "
        f"&& echo {TOKEN} > {later}/.loopactors/node.token",
    )
    listing = await call(ctx, "bash", command=f"cat {later}/.loopactors/node.token; echo done")
    assert TOKEN not in listing
    for command in (
        f"echo 'worker = \"command:id\"' > {later}/loopactors.toml",
        f"git -C {later}/repo config core.fsmonitor 'touch pwned'",
        f"echo '* filter=x' > {later}/repo/.git/info/attributes",
    ):
        with pytest.raises(ToolError, match="exit code"):
            await call(ctx, "bash", command=command)
    assert (root / later / "loopactors.toml").read_text() == 'worker = "scripted"\n'
    assert "fsmonitor" not in (root / later / "repo" / ".git" / "config").read_text()
    assert not (root / later / "repo" / ".git" / "info" / "attributes").exists()


async def test_the_sandbox_guards_the_git_directories_of_submodules(tmp_path: Path) -> None:
    """A submodule's git directory lives under ``.git/modules/`` (nested submodules under
    its own ``modules/``): its ``config``, ``hooks`` and ``info`` steer every git command the
    operator runs in the submodule (``git status`` recurses into it), and were writable from
    the sandbox while the top repository's were not."""
    root = make_project(tmp_path / "ws")
    git = ["git", "-c", "protocol.file.allow=always"]
    lib = tmp_path / "lib"
    await trio.run_process([*git, "init", "-q", str(lib)])
    (lib / "a.txt").write_text("a\n")
    commit = ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "a"]
    await trio.run_process([*git, "-C", str(lib), "add", "a.txt"])
    await trio.run_process([*git, "-C", str(lib), *commit])
    repo = root / "app"
    await trio.run_process([*git, "init", "-q", str(repo)])
    await trio.run_process([*git, "-C", str(repo), "submodule", "-q", "add", str(lib), "libs/lib"])
    module = repo / ".git" / "modules" / "libs" / "lib"
    assert (module / "config").is_file()
    config_before = (module / "config").read_text()
    ctx = context(root, bash="sandbox")
    for command in (
        "git -C app/libs/lib config core.fsmonitor 'touch pwned'",
        "echo '#!/bin/sh' > app/.git/modules/libs/lib/hooks/post-checkout",
        "echo '* filter=x' > app/.git/modules/libs/lib/info/attributes",
    ):
        with pytest.raises(ToolError, match="exit code"):
            await call(ctx, "bash", command=command)
    assert (module / "config").read_text() == config_before
    assert not (module / "hooks" / "post-checkout").exists()
    assert not (module / "info" / "attributes").exists()
    # The submodule's work tree stays the task's: its files are still writable.
    await call(ctx, "bash", command="echo b > app/libs/lib/a.txt")
    assert (repo / "libs" / "lib" / "a.txt").read_text() == "b\n"


def test_the_kept_scan_reads_again_only_the_directories_that_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before each sandboxed command the workspace's directories are ``lstat``-ed and only
    those whose inode, ctime or mtime changed are read again; one changed within the last
    two seconds every time (its timestamp may not move at its next change)."""
    import time
    from types import SimpleNamespace

    from loopactors.agent import _protected

    root = tmp_path / "ws"
    for i in range(20):
        (root / DEEP / str(i)).mkdir(parents=True)
    now = time.time_ns()
    #: Each directory's ctime and mtime as the scan sees them: long ago unless set here
    #: (a ctime cannot be set back, so the test sets what lstat returns).
    times: dict[str, int] = {}
    real_lstat = os.lstat

    def lstat(path: str) -> Any:
        st = real_lstat(path)
        when = times.get(str(path), now - 3600 * 10**9)
        return SimpleNamespace(
            st_mode=st.st_mode, st_ino=st.st_ino, st_ctime_ns=when, st_mtime_ns=when
        )

    reads: list[str] = []
    real_read = _protected._read_dir

    def counted(path: str, inner: bool) -> Any:
        reads.append(path)
        return real_read(path, inner)

    monkeypatch.setattr("os.lstat", lstat)
    monkeypatch.setattr(_protected, "_read_dir", counted)
    assert _protected.sandbox_guards(root).read_only == []
    assert len(reads) == 27  # the root, a to f and the 20 leaves
    reads.clear()
    assert _protected.sandbox_guards(root).read_only == []
    assert reads == []  # nothing changed: nothing read
    leaf = root / DEEP / "7"
    (leaf / "new").mkdir()
    (leaf / "new" / "loopactors.toml").write_text("")
    times[str(leaf)] = now - 3000 * 10**9  # changed since, long ago
    times[str(leaf / "new")] = time.time_ns()  # made just now
    assert _protected.sandbox_guards(root).read_only == [leaf / "new" / "loopactors.toml"]
    assert sorted(reads) == [str(leaf), str(leaf / "new")]
    reads.clear()
    assert _protected.sandbox_guards(root).read_only == [leaf / "new" / "loopactors.toml"]
    assert reads == [str(leaf / "new")]  # too recent to trust: read each time
    times[str(leaf / "new")] = now - 3000 * 10**9
    reads.clear()
    _protected.sandbox_guards(root)
    assert reads == [str(leaf / "new")]  # its times moved: read once more
    reads.clear()
    _protected.sandbox_guards(root)
    assert reads == []


@needs_bwrap
@pytest.mark.parametrize(
    "command",
    [
        "echo '[tool.loopactors]' >> pyproject.toml",
        "sed -i 's/scripted/command:id/' pyproject.toml",
        "echo 'x = [' > pyproject.toml",  # the table can no longer be read
        "rm pyproject.toml",
        "rm pyproject.toml && ln -s ../outside.toml pyproject.toml",
        "rm pyproject.toml && mkfifo pyproject.toml",
    ],
)
async def test_a_sandboxed_command_may_change_a_pyproject_but_not_its_table(
    tmp_path: Path, command: str
) -> None:
    """`uv add` in the sandbox changes `pyproject.toml`: allowed. A change to its
    `[tool.loopactors]` (or one that leaves it unreadable) is put back after the command,
    whatever took the file's place, and the model is told."""
    root = make_project(tmp_path / "ws")
    outside = tmp_path / "outside.toml"
    outside.write_text("kept\n")
    ctx = context(root, bash="sandbox")
    await call(ctx, "bash", command='sed -i \'s/"demo"/"demo2"/\' pyproject.toml')
    changed = PYPROJECT.replace('"demo"', '"demo2"')
    assert (root / "pyproject.toml").read_text() == changed  # `uv add` works
    with pytest.raises(ToolError, match=r"changed the \[tool.loopactors\] table of pyproject"):
        await call(ctx, "bash", command=command)
    assert not (root / "pyproject.toml").is_symlink()
    assert (root / "pyproject.toml").read_text() == changed
    assert outside.read_text() == "kept\n"  # a link put there was removed, not followed


@needs_bwrap
async def test_a_pyproject_table_changed_by_a_command_that_is_stopped_is_put_back(
    tmp_path: Path,
) -> None:
    root = make_project(tmp_path / "ws")
    ctx = context(root, bash="sandbox")
    command = "echo '[tool.loopactors.x]' >> pyproject.toml; touch changed; sleep 3600"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(call, ctx, "bash", command=command))
        with trio.fail_after(HANG):
            while not (root / "changed").exists():
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()  # the round is stopped during the command
    assert (root / "pyproject.toml").read_text() == PYPROJECT


async def test_removing_a_pyproject_without_a_table_is_the_commands_business(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n')
    assert put_back_tables(root, {root / "pyproject.toml": b'[project]\nname = "p"\n'}) == []
    (root / "pyproject.toml").unlink()
    assert put_back_tables(root, {root / "pyproject.toml": b'[project]\nname = "p"\n'}) == []
    assert not (root / "pyproject.toml").exists()


def test_configuration_an_agent_could_have_written_is_not_used_unasked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopactors._workspaces import record_agent_workspace

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state-home"))
    before = tmp_path / "before"
    before.mkdir()
    (before / "loopactors.toml").write_text('worker = "scripted:latency=1"\n')
    record_agent_workspace(before)  # an agent ran there after the file was written
    monkeypatch.chdir(before)
    assert load_config().worker == "scripted:latency=1"
    # Written after an agent first ran there: refused when found, until named.
    workspace = tmp_path / "ws"
    (workspace / "deep").mkdir(parents=True)
    record_agent_workspace(workspace)
    config = workspace / "loopactors.toml"
    config.write_text('worker = "command:touch pwned"\n')
    monkeypatch.chdir(workspace / "deep")
    with pytest.raises(ConfigError, match=r"found by search in .* the workspace of an agent"):
        load_config()
    assert load_config(config).worker == "command:touch pwned"  # the operator named it
    assert load_config().worker == "command:touch pwned"  # that version is now trusted
    config.write_text('worker = "command:touch pwned again"\n')  # changed again: refused
    with pytest.raises(ConfigError, match="--config"):
        load_config()
    (workspace / "pyproject.toml").write_text('[tool.loopactors]\nworker = "x"\n')
    config.unlink()
    with pytest.raises(ConfigError, match=r"pyproject\.toml was found by search"):
        load_config()


@needs_bwrap
def test_a_sandboxed_agent_cannot_configure_the_operators_next_run(tmp_path: Path) -> None:
    """End to end: the model of a ``bash=sandbox`` agent run by ``loopactors run`` in a
    project reads the token, plants a configuration and a loop in the store; the next
    ``loopactors run`` there runs none of it and says why."""
    project = tmp_path / "project"
    project.mkdir()
    pwned = tmp_path / "pwned"
    replies = [
        completion(
            calls=[
                ("t", "bash", {"command": "ls -A .loopactors"}),
                (
                    "c",
                    "bash",
                    {"command": f"echo 'worker = \"command:touch {pwned}\"' > loopactors.toml"},
                ),
                ("r", "read", {"path": ".loopactors/loopactors.db"}),
            ]
        ),
        completion("done"),
    ]
    env = {**os.environ, "LOOPACTORS_LLM_API_KEY": "k"}
    with ChatServer(replies) as server:
        spec = f"agent:model=m,base_url={server.base_url},bash=sandbox"
        first = subprocess.run(
            [sys.executable, "-m", "loopactors", "run", "|loop:1| work", "--worker", spec],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG,
            check=False,
        )
    assert first.returncode == 0, first.stderr
    tool_results = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_results[0]["content"] == "(no output)"  # nothing of the state directory
    assert "off limits" in tool_results[2]["content"]
    assert (project / "loopactors.toml").exists()  # a new file in the workspace: made
    second = subprocess.run(
        [sys.executable, "-m", "loopactors", "run", "|loop:1| next"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG,
        check=False,
    )
    assert second.returncode == 1
    assert "the workspace of an agent loop" in second.stderr
    assert not pwned.exists()
    with sqlite3.connect(project / ".loopactors" / "loopactors.db") as db:
        assert db.execute("select count(*) from loops").fetchone() == (1,)


async def test_the_runtime_names_its_state_and_token_file_to_the_agents_tools(
    tmp_path: Path,
) -> None:
    """In a runtime, the agent's tools are told the node's own paths: a token file kept in
    the workspace under any name is refused, like the state directory."""
    from loopactors.agent import Transcript
    from loopactors.gateway import GatewaySettings
    from loopactors.runtime import RuntimeConfig, open_runtime

    workspace = tmp_path / "ws"
    workspace.mkdir()
    token = workspace / "token.txt"
    token.write_text(TOKEN)
    replies = [
        completion(calls=[("t", "read", {"path": "token.txt"}), ("s", "glob", {"pattern": "*"})]),
        completion("done"),
    ]
    config = RuntimeConfig(state_dir=workspace / "st", shutdown_grace=5.0).replace(
        node=GatewaySettings(token_file=token)
    )
    with ChatServer(replies) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={workspace},bash=off"
        async with open_runtime(config) as runtime:
            loop = runtime.handle(await runtime.start("|loop:1| look", worker=spec))
            await loop.wait()
            history = await loop.history()
    results = {
        e.message.tool_call_id: e.message
        for e in Transcript.from_builtins(history[0].transcript).entries
        if e.message.role == "tool"
    }
    assert results["t"].is_error
    assert "the node's own state" in results["t"].content
    assert results["s"].content == "no file matches '*'"


async def test_a_workspace_list_that_cannot_be_written_is_said_once_and_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from loopactors.runtime import RuntimeConfig, open_runtime

    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocked))  # the list's folder cannot be made
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with ChatServer([completion("one"), completion("two")]) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={workspace},bash=off"
        async with open_runtime(RuntimeConfig(store="memory", shutdown_grace=5.0)) as runtime:
            loop = runtime.handle(await runtime.start("|loop:2,fresh| work", worker=spec))
            state = await loop.wait()
    assert (state.phase, state.completed_rounds) == ("complete", 2)
    said = [r for r in caplog.records if "cannot list" in r.getMessage()]
    assert len(said) == 1
    assert "configuration files found there will not be checked" in said[0].getMessage()
