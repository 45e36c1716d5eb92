"""Runtime configuration: defaults, finding and reading `loopactors.toml` or
`[tool.loopactors]`, errors that name the key and the file, and flag overrides."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from loopactors.errors import ConfigError
from loopactors.gateway import GatewaySettings, gateway_settings
from loopactors.runtime import forget_section, register_section
from loopactors.runtime._config import BreakerSettings, RuntimeConfig, find_config, load_config
from tests.hang import HANG


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _config_error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value)


# --- defaults ---------------------------------------------------------------------------------


def test_defaults() -> None:
    config = RuntimeConfig()
    assert config.state_dir == Path(".loopactors")
    assert config.store == "sqlite"
    assert config.worker == "scripted"
    assert config.max_live_loops == 10_000
    assert config.max_tree_loops == 30
    assert config.max_concurrent_rounds == 1_000
    assert config.max_concurrent_per_kind == {}
    assert config.round_timeout == 900.0
    assert config.inter_round_delay == 0.0
    assert config.seed_cap == 8000
    assert config.kill_grace == 5.0
    assert config.shutdown_grace == 10.0
    assert config.event_queue_size == 1000
    assert config.breaker == BreakerSettings()
    assert config.breaker.max_consecutive_failures == 3
    assert config.breaker.stale_rounds_limit == 2
    assert config.breaker.max_tokens is None
    assert config.breaker.max_seconds is None
    assert config.max_restarts == 10
    assert config.max_restart_seconds == 10.0
    assert config.loop_max_restarts == 1_000
    assert config.retention_days is None


def test_no_file_gives_the_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config(search=False) == RuntimeConfig()
    assert find_config() is None
    assert load_config() == RuntimeConfig()


def test_an_empty_file_gives_the_defaults_with_state_dir_next_to_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "loopactors.toml", "")
    config = load_config(path)
    assert config == RuntimeConfig(state_dir=tmp_path / ".loopactors")


# --- finding the file -------------------------------------------------------------------------


def test_loopactors_toml_is_found_from_a_nested_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "loopactors.toml", "max_live_loops = 7\n")
    nested = tmp_path / "a" / "b" / "c"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)

    assert find_config() == path.resolve()
    config = load_config()
    assert config.max_live_loops == 7
    assert config.state_dir == tmp_path.resolve() / ".loopactors"


def test_find_config_accepts_an_explicit_start(tmp_path: Path) -> None:
    path = _write(tmp_path / "loopactors.toml", "")
    nested = tmp_path / "x" / "y"
    nested.mkdir(parents=True)
    assert find_config(nested) == path.resolve()


def test_the_nearest_file_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "loopactors.toml", "worker = 'outer'\n")
    inner = _write(tmp_path / "inner" / "loopactors.toml", "worker = 'inner'\n")
    monkeypatch.chdir(inner.parent)
    assert find_config() == inner.resolve()
    assert load_config().worker == "inner"


def test_tool_loopactors_in_pyproject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(
        tmp_path / "pyproject.toml",
        "[project]\nname = 'x'\n\n"
        "[tool.loopactors]\nworker = 'command:./agent.sh'\nstore = 'memory'\n\n"
        "[tool.loopactors.breaker]\nmax_tokens = 100\n\n"
        "[tool.other]\nanything = 1\n",
    )
    nested = tmp_path / "src"
    nested.mkdir()
    monkeypatch.chdir(nested)

    assert find_config() == path.resolve()
    config = load_config()
    assert config.worker == "command:./agent.sh"
    assert config.store == "memory"
    assert config.breaker.max_tokens == 100
    assert config.state_dir == tmp_path.resolve() / ".loopactors"


def test_a_pyproject_without_tool_loopactors_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outer = _write(tmp_path / "loopactors.toml", "max_tree_loops = 4\n")
    _write(tmp_path / "pkg" / "pyproject.toml", "[tool.ruff]\nline-length = 100\n")
    monkeypatch.chdir(tmp_path / "pkg")
    assert find_config() == outer.resolve()
    assert load_config().max_tree_loops == 4


def test_loopactors_toml_wins_over_pyproject_in_the_same_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = _write(tmp_path / "loopactors.toml", "worker = 'from-loopactors-toml'\n")
    _write(tmp_path / "pyproject.toml", "[tool.loopactors]\nworker = 'from-pyproject'\n")
    monkeypatch.chdir(tmp_path)
    assert find_config() == toml.resolve()
    assert load_config().worker == "from-loopactors-toml"


def test_an_explicit_pyproject_without_the_table_gives_the_defaults(tmp_path: Path) -> None:
    path = _write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")
    assert load_config(path) == RuntimeConfig(state_dir=tmp_path / ".loopactors")


# --- errors name the key and the file ---------------------------------------------------------


def test_an_unknown_key_names_the_key_and_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "loopactors.toml", "max_live_loops = 3\nmax_liev_loops = 4\n")
    message = _config_error(path)
    assert "max_liev_loops" in message
    assert str(path) in message


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("max_liev_loops = 4\n", "max_liev_loops (did you mean max_live_loops?)"),
        (
            "[breaker]\nstale_round_limit = 3\n",
            "breaker: unknown key(s) stale_round_limit (did you mean stale_rounds_limit?)",
        ),
        (
            "stale_round_limit = 3\n",
            "stale_round_limit (did you mean [breaker] stale_rounds_limit?)",
        ),
        ("bogus_option = 1\n", "unknown key(s) bogus_option; accepted: state_dir, store,"),
    ],
)
def test_a_misspelt_key_is_told_the_key_it_likely_meant(
    tmp_path: Path, text: str, said: str
) -> None:
    assert said in _config_error(_write(tmp_path / "loopactors.toml", text))


def test_a_misspelt_runtime_option_is_told_the_one_it_likely_meant() -> None:
    with pytest.raises(ConfigError, match=r"retention_day \(did you mean retention_days\?\)"):
        RuntimeConfig().replace(retention_day=3)


def test_an_unknown_key_in_pyproject_names_the_key_and_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "pyproject.toml", "[tool.loopactors]\nbogus_option = true\n")
    message = _config_error(path)
    assert "bogus_option" in message
    assert str(path) in message


def test_a_wrong_type_names_the_key_and_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "loopactors.toml", 'max_live_loops = "many"\n')
    message = _config_error(path)
    assert "max_live_loops" in message
    assert str(path) in message


def test_a_store_that_does_not_exist_names_the_key(tmp_path: Path) -> None:
    path = _write(tmp_path / "loopactors.toml", 'store = "postgres"\n')
    message = _config_error(path)
    assert "store" in message
    assert str(path) in message


def test_per_kind_concurrency_is_a_table_of_ints(tmp_path: Path) -> None:
    good = _write(tmp_path / "a" / "loopactors.toml", "max_concurrent_per_kind = {command = 4}\n")
    assert load_config(good).max_concurrent_per_kind == {"command": 4}
    bad = _write(tmp_path / "b" / "loopactors.toml", "max_concurrent_per_kind = {command = 'x'}\n")
    message = _config_error(bad)
    assert "max_concurrent_per_kind" in message
    assert str(bad) in message


def test_a_nested_breaker_section(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "loopactors.toml",
        "seed_cap = 100\n\n[breaker]\nmax_consecutive_failures = 5\nstale_rounds_limit = 4\n"
        "max_tokens = 20000\nmax_seconds = 3600.0\n",
    )
    config = load_config(path)
    assert config.seed_cap == 100
    assert config.breaker == BreakerSettings(
        max_consecutive_failures=5, stale_rounds_limit=4, max_tokens=20000, max_seconds=3600.0
    )


def test_an_unknown_key_in_the_breaker_section_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path / "loopactors.toml", "[breaker]\nmax_tokenz = 5\n")
    message = _config_error(path)
    assert "max_tokenz" in message
    assert "breaker" in message
    assert str(path) in message


def test_a_wrong_type_in_the_breaker_section_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path / "loopactors.toml", "[breaker]\nstale_rounds_limit = 'two'\n")
    message = _config_error(path)
    assert "breaker.stale_rounds_limit" in message
    assert str(path) in message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("max_live_loops = -1", "max_live_loops"),
        ("max_tree_loops = 0", "max_tree_loops"),
        ("round_timeout = -5.0", "round_timeout"),
        ("inter_round_delay = -0.5", "inter_round_delay"),
        ("seed_cap = -1", "seed_cap"),
        ("event_queue_size = 0", "event_queue_size"),
        ("max_restarts = -1", "max_restarts"),
        ("[breaker]\nmax_tokens = -5", "max_tokens"),
        ("[breaker]\nmax_consecutive_failures = 0", "max_consecutive_failures"),
        ("retention_days = 0", "retention_days"),
        ("retention_days = -7", "retention_days"),
        ("retention_days = 1e-9", "retention_days"),  # under a minute: pruned at once
        ("retention_days = inf", "retention_days"),
        ("retention_days = nan", "retention_days"),
        ("retention_days = 40000", "retention_days"),
    ],
)
def test_validators_reject_bad_values_naming_the_key_and_the_file(
    tmp_path: Path, text: str, key: str
) -> None:
    path = _write(tmp_path / "loopactors.toml", text + "\n")
    message = _config_error(path)
    assert key in message
    assert str(path) in message


def test_retention_days_from_pyproject(tmp_path: Path) -> None:
    path = _write(tmp_path / "pyproject.toml", "[tool.loopactors]\nretention_days = 30\n")
    assert load_config(path).retention_days == 30.0
    _write(path, "[tool.loopactors]\nretention_days = 0.5\n")
    assert load_config(path).retention_days == 0.5


def test_retention_days_of_the_wrong_type_names_the_key_and_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "loopactors.toml", 'retention_days = "30d"\n')
    message = _config_error(path)
    assert "retention_days: invalid value for type, expected float | None" in message
    assert str(path) in message


def test_config_errors_name_the_key_first_and_never_end_in_a_bare_path(tmp_path: Path) -> None:
    path = _write(tmp_path / "loopactors.toml", '[breaker]\nstale_rounds_limit = "x"\n')
    message = _config_error(path)
    assert message.endswith("breaker.stale_rounds_limit: invalid value for type, expected int")
    _write(path, "round_timeout = -1\n")
    message = _config_error(path)
    assert message.endswith("round_timeout must be a finite number > 0, got -1.0")
    assert "@" not in message


def test_zero_is_allowed_where_the_value_only_has_to_be_non_negative(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "loopactors.toml",
        "inter_round_delay = 0\nseed_cap = 0\nkill_grace = 0\nmax_restarts = 0\n",
    )
    config = load_config(path)
    assert config.inter_round_delay == 0
    assert config.seed_cap == 0
    assert config.kill_grace == 0
    assert config.max_restarts == 0


def test_validators_guard_direct_construction() -> None:
    with pytest.raises(ValueError, match="max_live_loops must be a finite number > 0"):
        RuntimeConfig(max_live_loops=0)
    with pytest.raises(ValueError, match="seed_cap must be a finite number >= 0"):
        RuntimeConfig(seed_cap=-1)
    with pytest.raises(ValueError, match="max_seconds must be a finite number > 0"):
        BreakerSettings(max_seconds=-1.0)


def test_unreadable_toml_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "loopactors.toml", "max_live_loops = = 3\n")
    message = _config_error(path)
    assert "cannot read configuration file" in message
    assert str(path) in message


def test_a_missing_explicit_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "loopactors.toml"
    assert str(path) in _config_error(path)


def test_a_broken_pyproject_met_while_searching_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "pyproject.toml", "[tool.loopactors\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="cannot read configuration file") as info:
        find_config()
    assert str(path.resolve()) in str(info.value)


# --- state_dir --------------------------------------------------------------------------------


def test_a_relative_state_dir_is_relative_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "project" / "loopactors.toml", "state_dir = 'var/state'\n")
    elsewhere = tmp_path / "project" / "deep" / "down"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    config = load_config()
    assert config.state_dir == (tmp_path / "project").resolve() / "var" / "state"
    assert config.state_dir.is_absolute()


def test_a_relative_state_dir_in_pyproject_is_relative_to_pyproject(tmp_path: Path) -> None:
    path = _write(tmp_path / "pyproject.toml", "[tool.loopactors]\nstate_dir = 'st'\n")
    assert load_config(path).state_dir == tmp_path / "st"


def test_an_absolute_state_dir_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "state"
    path = _write(tmp_path / "cfg" / "loopactors.toml", f"state_dir = '{target.as_posix()}'\n")
    assert load_config(path).state_dir == target


# --- replace ----------------------------------------------------------------------------------


def test_replace_applies_given_values_and_ignores_none() -> None:
    base = RuntimeConfig(worker="scripted", max_live_loops=50)
    changed = base.replace(worker=None, max_live_loops=5, store=None, seed_cap=0)
    assert changed.worker == "scripted"
    assert changed.max_live_loops == 5
    assert changed.store == "sqlite"
    assert changed.seed_cap == 0
    assert base.max_live_loops == 50


def test_replace_with_only_none_is_an_equal_copy() -> None:
    base = RuntimeConfig(worker="w")
    assert base.replace(worker=None, state_dir=None) == base


def test_replace_turns_a_state_dir_string_into_a_path() -> None:
    assert RuntimeConfig().replace(state_dir="/var/lib/loops").state_dir == Path("/var/lib/loops")


def test_replace_rejects_unknown_options_naming_them() -> None:
    with pytest.raises(ConfigError, match="unknown runtime option"):
        RuntimeConfig().replace(max_live_loops=3, max_loops=4, colour="red")
    with pytest.raises(ConfigError) as info:
        RuntimeConfig().replace(colour="red", max_loops=4)
    assert "colour" in str(info.value)
    assert "max_loops" in str(info.value)


def test_replace_ignores_an_unknown_option_given_as_none() -> None:
    # A flag that was not given is None whatever its name: it is dropped before checking.
    assert RuntimeConfig().replace(colour=None) == RuntimeConfig()


def test_replace_validates_values() -> None:
    with pytest.raises(ConfigError, match="round_timeout"):
        RuntimeConfig().replace(round_timeout=-1.0)
    with pytest.raises(ConfigError, match="max_live_loops"):
        RuntimeConfig().replace(max_live_loops=0)


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('round_timeout = "5"', "round_timeout"),
        ("max_live_loops = 2.5", "max_live_loops"),
        ("worker = 7", "worker"),
        ("max_live_loops = true", "max_live_loops"),
    ],
)
def test_values_of_the_wrong_type_are_refused_not_coerced(
    tmp_path: Path, line: str, key: str
) -> None:
    path = tmp_path / "loopactors.toml"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError, match=key) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_options_given_in_code_are_type_checked_too() -> None:
    with pytest.raises(ConfigError, match="round_timeout"):
        RuntimeConfig().replace(round_timeout=True)
    with pytest.raises(ConfigError, match="max_live_loops"):
        RuntimeConfig().replace(max_live_loops="5")
    assert RuntimeConfig().replace(state_dir=Path("x")).state_dir == Path("x")


def test_the_ledger_breaker_settings_are_configurable(tmp_path: Path) -> None:
    path = tmp_path / "loopactors.toml"
    path.write_text("[breaker]\nstagnation_threshold = 5\nsimilarity_threshold = 0.9\n")
    config = load_config(path)
    assert config.breaker.stagnation_threshold == 5
    assert config.breaker.similarity_threshold == 0.9
    path.write_text("[breaker]\nsimilarity_threshold = 85\n")
    with pytest.raises(ConfigError, match="similarity_threshold must be > 0 and <= 1"):
        load_config(path)


def test_the_node_table(tmp_path: Path) -> None:
    (tmp_path / "loopactors.toml").write_text(
        '[node]\nhost = "::1"\nport = 9000\nslow_subscriber = "disconnect"\n'
        'token_file = "secrets/node.token"\nmax_subscriptions = 8\n'
    )
    node = gateway_settings(load_config(tmp_path / "loopactors.toml"))
    assert (node.host, node.port, node.slow_subscriber) == ("::1", 9000, "disconnect")
    assert node.token_file == tmp_path / "secrets" / "node.token"  # next to the file
    assert node.max_subscriptions == 8
    assert node.replace(port=1, host=None).port == 1  # flags over the file
    for bad, key in [
        ('[node]\nport = "9000"\n', "port"),
        ('[node]\nslow_subscriber = "drop"\n', "slow_subscriber"),
        ("[node]\nlisten = 1\n", "listen"),
        ("[node]\nmax_connections = 0\n", "max_connections"),
    ]:
        (tmp_path / "loopactors.toml").write_text(bad)
        with pytest.raises(ConfigError, match=key):
            load_config(tmp_path / "loopactors.toml")


def test_the_node_table_is_read_without_the_gateway_server(tmp_path: Path) -> None:
    # The gateway owns [node]; reading it loads its settings module alone (start-up cost).
    config = _write(tmp_path / "loopactors.toml", "[node]\nport = 9001\n")
    code = (
        "import sys; from pathlib import Path; from loopactors.runtime import load_config; "
        f"c = load_config(Path({str(config)!r})); "
        "from loopactors.gateway import gateway_settings; print(gateway_settings(c).port); "
        "print(sorted(m for m in ('trio', 'loopactors.gateway._node', 'wsproto') "
        "if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG, check=True
    )
    assert result.stdout.split("\n")[:2] == ["9001", "[]"]


def test_a_config_given_the_node_table_in_python_protects_its_token_file(tmp_path: Path) -> None:
    token = tmp_path / "elsewhere" / "node.token"
    config = RuntimeConfig(state_dir=tmp_path / "st").replace(
        node=GatewaySettings(token_file=token), round_timeout=5.0
    )
    assert gateway_settings(config).token_file == token
    assert config.protected_paths() == (tmp_path / "st", token)
    assert config.replace(worker="command:true").sections == config.sections  # kept
    assert RuntimeConfig().protected_paths() == (Path(".loopactors"),)


@attrs.frozen
class _ShelfSettings:
    """A table another package owns, as a third party's would."""

    shelves: int = attrs.field(default=2, validator=attrs.validators.gt(0))
    label: str = "main"


@pytest.fixture
def shelf_table() -> Any:
    register_section("shelf", _ShelfSettings)
    yield
    forget_section("shelf")


@pytest.mark.usefixtures("shelf_table")
def test_a_package_owns_its_own_table(tmp_path: Path) -> None:
    path = _write(tmp_path / "loopactors.toml", '[shelf]\nshelves = 5\nlabel = "x"\n')
    config = load_config(path)
    assert config.section("shelf", _ShelfSettings) == _ShelfSettings(shelves=5, label="x")
    assert RuntimeConfig().section("shelf", _ShelfSettings) == _ShelfSettings()  # defaults
    with pytest.raises(TypeError, match=r"\[shelf\] holds a _ShelfSettings, not a GatewaySettings"):
        config.section("shelf", GatewaySettings)
    # Checked like the runtime's own tables: the key named, and what is accepted.
    _write(path, '[shelf]\nshelves = "5"\nshelfs = 1\n')
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert "shelf.shelves: invalid value for type, expected int" in str(raised.value)
    assert "shelf: unknown key(s) shelfs (did you mean shelves?)" in str(raised.value)
    _write(path, "shelves = 3\n")
    with pytest.raises(ConfigError, match=r"did you mean \[shelf\] shelves\?"):
        load_config(path)
    with pytest.raises(ValueError, match="'worker' is one of the runtime's own options"):
        register_section("worker", _ShelfSettings)
    with pytest.raises(ValueError, match="'shelf' is already registered"):
        register_section("shelf", _ShelfSettings)


def test_node_settings_from_the_runtime_names_where_it_went() -> None:
    # The gateway owns the [node] table: the old import says where to import it from now.
    with pytest.raises(ImportError, match=r"NodeSettings has moved: .* from loopactors\.gateway"):
        from loopactors.runtime import NodeSettings  # noqa: F401
    from loopactors import gateway, runtime

    assert gateway.NodeSettings is GatewaySettings
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        runtime.NoSuchName  # noqa: B018


def test_sections_is_no_key_of_a_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "loopactors.toml", "[sections]\nnode = 1\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) sections; accepted: state_dir"):
        load_config(path)


@pytest.mark.parametrize(
    "line",
    [
        "round_timeout = inf",
        "inter_round_delay = inf",
        "kill_grace = inf",
        "shutdown_grace = inf",
        "[node]\nhello_timeout = inf",
        "[breaker]\nmax_seconds = inf",
        "kill_grace = nan",
    ],
)
def test_an_infinite_time_is_refused(tmp_path: Path, line: str) -> None:
    # An infinite timeout or delay would make a loop (or a stop) that never finishes.
    message = _config_error(_write(tmp_path / "loopactors.toml", line + "\n"))
    assert "must be a finite number" in message
    assert line.rpartition("\n")[2].split(" =")[0] in message


def test_an_infinite_timeout_or_delay_of_one_loop_is_refused() -> None:
    from loopactors.errors import LoopSyntaxError
    from loopactors.runtime._spec import build_spec

    for option in ("round_timeout", "inter_round_delay", "max_seconds"):
        options: dict[str, Any] = {option: float("inf")}
        with pytest.raises(LoopSyntaxError, match=f"{option} must be a finite number"):
            build_spec(RuntimeConfig(), "|loop:2| task", **options)


@pytest.mark.parametrize("name", ["loopactors.toml", "pyproject.toml"])
def test_a_config_file_that_is_not_utf8_is_a_clear_error(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"# caf\xe9\n[tool.loopactors]\nstore = 'memory'\n")
    with pytest.raises(ConfigError, match="not UTF-8 text") as info:
        load_config(find_config(tmp_path) if name == "pyproject.toml" else path)
    assert str(path) in str(info.value)
    assert "byte 0xe9 at offset 5" in str(info.value)


def test_output_settings_and_a_bool_that_is_not_one(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "loopactors.toml", "max_output_bytes = 4096\nkeep_full_outputs = true\n"
    )
    config = load_config(path)
    assert (config.max_output_bytes, config.keep_full_outputs) == (4096, True)
    message = _config_error(_write(tmp_path / "loopactors.toml", "keep_full_outputs = 1\n"))
    assert "keep_full_outputs" in message
    assert "expected bool" in message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('child_workers = "command:./agent.sh"\n', "child_workers"),
        ('[notify]\nurls = "json://me:hunter2@127.0.0.1:9/x"\n', "notify.urls"),
        ('[notify]\nevents = "loop_finished"\n', "notify.events"),
    ],
)
def test_a_string_where_a_list_belongs_is_refused_not_split_into_letters(
    tmp_path: Path, text: str, key: str
) -> None:
    # TOML `urls = "json://..."` instead of `urls = ["json://..."]`: said as such, never
    # taken letter by letter (a URL "j", an event "l"), and a URL's secret not shown.
    problem = _config_error(_write(tmp_path / "loopactors.toml", text))
    assert f"{key}: expected a list of strings" in problem
    assert 'e.g. ["' in problem
    assert "hunter2" not in problem
