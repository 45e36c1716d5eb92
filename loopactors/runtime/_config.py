"""Runtime configuration: defaults, `loopactors.toml` or `[tool.loopactors]`, then flags.

The file is structured with cattrs into frozen attrs classes; an unknown key or a wrong type is
a :class:`ConfigError` that names the key and the file.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.v import format_exception

from .._plugins import Registry
from .._util import closest, did_you_mean
from .._util import positive_setting as _positive
from .._workspaces import trust_config, untrusted_config
from ..errors import ConfigError
from ..loops import (
    LIMIT_DEFAULTS,
    MAX_ROUNDS,
    NOTIFY_EVENTS,
    ROUNDS_CEILING,
    SIMILARITY_DEFAULT,
    redact_notify_url,
)
from ..storage import DURABILITIES, Durability, check_store
from ._transports import check_transport, redact_url

__all__ = [
    "BreakerSettings",
    "BudgetSettings",
    "NotifySettings",
    "RuntimeConfig",
    "find_config",
    "forget_section",
    "load_config",
    "register_section",
]

CONFIG_FILE = "loopactors.toml"

T = TypeVar("T")

#: Tables of the configuration file that another package owns, by name, to that package's
#: settings class (an attrs class whose every field has a default), given as
#: ``"module:Class"`` and imported only when a file has the table or the package asks.
_SECTIONS: Registry[type] = Registry("configuration table", group="loopactors.config_sections")
_SECTIONS.register("node", "loopactors.gateway._settings:GatewaySettings")


def register_section(name: str, settings: str | type) -> None:
    """Let a package own the configuration's ``[name]`` table: it is structured into
    ``settings`` (a class, or ``"module:Class"``) with the same checks as the runtime's own,
    and read back with :meth:`RuntimeConfig.section`.

    Raises:
        ValueError: ``name`` is taken (by a table or one of the runtime's own options).
    """
    if name in _OWN_NAMES:
        raise ValueError(f"{name!r} is one of the runtime's own options")
    _SECTIONS.register(name, settings)


def forget_section(name: str) -> None:
    """Undo :func:`register_section` (a test's own table)."""
    _SECTIONS.unregister(name)


#: The shortest and longest ``retention_days``: a minute, a hundred years.
MIN_RETENTION_DAYS = 1 / 1440
MAX_RETENTION_DAYS = 36_500.0


def _retention(_: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not MIN_RETENTION_DAYS <= value <= MAX_RETENTION_DAYS:
        raise ValueError(
            f"{attribute.name} must be from one minute (1/1440 = 0.000694... days; 0.000695 "
            f"will do) to {MAX_RETENTION_DAYS:.0f} days, got {value!r}"
        )


def _fraction(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{attribute.name} must be > 0 and <= 1, got {value!r}")


def _not_negative(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


def _rounds_cap(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if not 1 <= value <= ROUNDS_CEILING:
        raise ValueError(f"{attribute.name} must be from 1 to {ROUNDS_CEILING}, got {value!r}")


def _transport(_: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    check_transport(value)


def _store(_: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    check_store(value)


def _durability(_: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in DURABILITIES:
        raise ValueError(
            f"{attribute.name} must be one of {', '.join(DURABILITIES)}, got {value!r}"
        )


#: What a node's name may be: it names Redis keys and appears in logs and tables.
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _node_name(_: Any, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and not NODE_NAME.fullmatch(value):
        raise ValueError(
            f"{attribute.name} must be 1 to 64 letters, digits, '.', '_' or '-' (not first), "
            f"got {value!r}"
        )


#: A node label: what a loop tied to it asks of the node that runs it.
NODE_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9:._-]{0,63}")


def _node_labels(_: Any, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for label in value:
        if not NODE_LABEL.fullmatch(label):
            raise ValueError(
                f"{attribute.name}: each label must be 1 to 64 letters, digits, ':', '.', '_' "
                f"or '-' (not first), got {label!r}"
            )


def _redacted(url: str) -> str:
    return repr(redact_url(url))  # a config in a log or traceback shows no password


@attrs.frozen
class BreakerSettings:
    """Defaults of the checks run before each round (each loop may override them)."""

    # Each default is the trigger's own (loops.LIMIT_DEFAULTS), written once there.
    max_consecutive_failures: int = attrs.field(
        default=int(LIMIT_DEFAULTS["max_consecutive_failures"]), validator=_positive
    )
    stale_rounds_limit: int = attrs.field(
        default=int(LIMIT_DEFAULTS["stale_rounds_limit"]), validator=_positive
    )
    max_tokens: int | None = attrs.field(default=None, validator=_positive)
    max_seconds: float | None = attrs.field(default=None, validator=_positive)
    #: The run ledger's breaker (loop-context's rules), see docs/ledger.md.
    stagnation_threshold: int = attrs.field(
        default=int(LIMIT_DEFAULTS["stagnation_threshold"]), validator=_positive
    )
    frustration_threshold: int = attrs.field(
        default=int(LIMIT_DEFAULTS["frustration_threshold"]), validator=_positive
    )
    similarity_threshold: float = attrs.field(default=SIMILARITY_DEFAULT, validator=_fraction)
    #: US dollars a loop may spend (``max_cost_usd``), and claims of done in a row that its
    #: ``until`` check may refute, before the loop escalates.
    max_cost_usd: float | None = attrs.field(default=None, validator=_positive)
    max_unverified_claims: int = attrs.field(
        default=int(LIMIT_DEFAULTS["max_unverified_claims"]), validator=_positive
    )


def _hour(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if not 0 <= value <= 23:
        raise ValueError(f"{attribute.name} must be an hour from 0 to 23, got {value!r}")


@attrs.frozen
class BudgetSettings:
    """Daily dollar budgets shared by every loop of the node (``[budget]``, docs/loops.md):
    per account (worker kind and key), for all accounts together, and the local hour a
    budget day starts at."""

    daily_cost_usd: float | None = attrs.field(default=None, validator=_positive)
    daily_total_cost_usd: float | None = attrs.field(default=None, validator=_positive)
    reset_hour: int = attrs.field(default=0, validator=_hour)


def _notify_urls(_: Any, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for url in value:
        if "://" not in url:
            raise ValueError(
                f"{attribute.name}: {redact_notify_url(url)!r} is not a URL: write SCHEME://..., "
                "e.g. json://host:port/path, mailto://..., ntfy://topic"
            )


def _notify_events(_: Any, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    unknown = sorted(set(value) - set(NOTIFY_EVENTS))
    if unknown:
        raise ValueError(
            f"{attribute.name}: unknown event(s) {', '.join(unknown)}; accepted: "
            f"{', '.join(NOTIFY_EVENTS)}"
        )


def _shown_urls(urls: tuple[str, ...]) -> str:
    return repr(tuple(redact_notify_url(url) for url in urls))


@attrs.frozen(kw_only=True)
class NotifySettings:
    """Notifications (``[notify]``, docs/notifications.md): the node's default URLs and
    events for loops that name none, and how the queue is delivered."""

    #: apprise URLs every loop notifies unless it names its own (``notify=``).
    urls: tuple[str, ...] = attrs.field(default=(), validator=_notify_urls, repr=_shown_urls)
    #: The events that notify (empty: all of them).
    events: tuple[str, ...] = attrs.field(default=(), validator=_notify_events)
    #: ``check_failing`` goes out after this many failing ``until`` checks in a row.
    check_failures: int = attrs.field(default=3, validator=_positive)
    #: A notification not delivered within this many seconds is dropped (logged, counted).
    max_age: float = attrs.field(default=86_400.0, validator=_positive)
    #: The first retry after this many seconds, doubling up to ``retry_max``.
    retry_first: float = attrs.field(default=5.0, validator=_positive)
    retry_max: float = attrs.field(default=600.0, validator=_positive)
    #: Seconds one delivery may take (apprise runs in a worker thread), and how many run at once.
    timeout: float = attrs.field(default=30.0, validator=_positive)
    max_parallel: int = attrs.field(default=4, validator=_positive)


@attrs.frozen
class RuntimeConfig:
    """Everything a runtime can be told; every field has a working default."""

    state_dir: Path = Path(".loopactors")
    #: Where loops are kept: ``sqlite`` (a file in ``state_dir``), ``sqlite:DIR``,
    #: ``memory`` (nothing kept after exit), ``postgresql://USER:PASSWORD@HOST/DB`` (a
    #: database several nodes share, docs/multinode.md) or a registered scheme.
    store: str = attrs.field(default="sqlite", validator=_store, repr=_redacted)
    #: How hard each commit is pushed to disk: ``normal`` survives a crash or SIGKILL of the
    #: process, ``full`` an OS crash or power loss too (docs/loops.md, "Durability").
    durability: Durability = attrs.field(default="normal", validator=_durability)
    #: Seconds a node's lease on a shared store (PostgreSQL) lasts unless renewed; renewed
    #: every fifth of it (docs/multinode.md).
    lease_ttl: float = attrs.field(default=10.0, validator=_positive)
    #: This node's name among nodes that share one Redis transport: each name has its own
    #: results stream, so such nodes never take each other's reports (docs/scale-out.md).
    #: None: the one unnamed node of its Redis.
    node_name: str | None = attrs.field(default=None, validator=_node_name)
    #: Labels this node carries on a shared store, beside ``host:HOSTNAME``: it takes over a
    #: loop tied to a label only if it carries it; ``shared-fs`` says every node sees the
    #: same files, so no loop admitted here is tied to this machine (docs/multinode.md).
    labels: tuple[str, ...] = attrs.field(default=(), validator=_node_labels)
    #: Worker spec for loops that do not name one.
    worker: str = "scripted"
    #: The ``until`` check of loops that do not give one, and the checks' timeout (seconds).
    until: str | None = None
    until_timeout: float = attrs.field(default=600.0, validator=_positive)
    #: Worker specs a model may choose for a child loop it starts (``loop_start``); a child
    #: without one, or a model's choice not listed, runs its parent's own spec. A listed spec
    #: still may not widen its parent (docs/security.md, agent tools).
    child_workers: tuple[str, ...] = ()
    max_live_loops: int = attrs.field(default=10_000, validator=_positive)
    #: The most rounds a loop of this node may ask for; more is refused at admission.
    max_rounds: int = attrs.field(default=MAX_ROUNDS, validator=_rounds_cap)
    max_tree_loops: int = attrs.field(default=30, validator=_positive)
    max_concurrent_rounds: int = attrs.field(default=1_000, validator=_positive)
    #: Concurrency slots per worker kind, e.g. ``{command = 4}``.
    max_concurrent_per_kind: dict[str, int] = attrs.field(factory=dict)
    round_timeout: float = attrs.field(default=900.0, validator=_positive)
    inter_round_delay: float = attrs.field(default=0.0, validator=_not_negative)
    seed_cap: int = attrs.field(default=8000, validator=_not_negative)
    #: Seconds a subprocess worker gets between SIGTERM and SIGKILL.
    kill_grace: float = attrs.field(default=5.0, validator=_not_negative)
    #: Seconds between two looks whether the worker of a loop waiting for it (recovered, its
    #: worker not buildable) can be built now.
    worker_retry: float = attrs.field(default=30.0, validator=_positive)
    #: Bytes of a round's output kept (the end of it, after a line saying what was cut);
    #: the store, ``status`` and the next round's seed never see more.
    max_output_bytes: int = attrs.field(default=1 << 20, validator=_positive)
    #: Also write every output that was cut, whole, to ``<state_dir>/outputs/``.
    keep_full_outputs: bool = False
    shutdown_grace: float = attrs.field(default=10.0, validator=_not_negative)
    event_queue_size: int = attrs.field(default=1000, validator=_positive)
    breaker: BreakerSettings = attrs.field(factory=BreakerSettings)
    budget: BudgetSettings = attrs.field(factory=BudgetSettings)
    #: Restart intensity of the node's supervisor and of the loop supervisor.
    max_restarts: int = attrs.field(default=10, validator=_not_negative)
    max_restart_seconds: float = attrs.field(default=10.0, validator=_positive)
    loop_max_restarts: int = attrs.field(default=1_000, validator=_not_negative)
    #: Where rounds run: ``inprocess`` (default), or ``redis://[:PASSWORD@]HOST:PORT/DB``
    #: (``rediss://`` for TLS) to hand them to `loopactors worker` processes (docs/scale-out.md).
    transport: str = attrs.field(default="inprocess", validator=_transport, repr=_redacted)
    #: Days a finished loop (with its rounds and events) is kept in the store; None keeps
    #: everything. Pruned at the start, then hourly (or every tenth of this if shorter, at most
    #: once a minute).
    retention_days: float | None = attrs.field(default=None, validator=_retention)
    #: Notifications of loops (``[notify]``).
    notify: NotifySettings = attrs.field(factory=NotifySettings)
    #: The tables other packages own, by name, as their settings classes (``[node]``: the
    #: gateway's listening address and limits, docs/node.md); read with :meth:`section`.
    sections: Mapping[str, Any] = attrs.field(factory=dict)

    def section(self, name: str, kind: type[T]) -> T:
        """The ``[name]`` table as ``kind`` (the settings class of the package that owns it):
        as configured, or ``kind``'s defaults.

        Raises:
            TypeError: the table was given as another class.
        """
        value = self.sections.get(name)
        if value is None:
            return kind()
        if not isinstance(value, kind):
            raise TypeError(f"[{name}] holds a {type(value).__name__}, not a {kind.__name__}")
        return value

    def protected_paths(self) -> tuple[Path, ...]:
        """Files and directories no worker may touch: the state directory, and what each
        table names (its ``protected_paths()``, e.g. the gateway's token file)."""
        paths = [self.state_dir]
        for value in self.sections.values():
            paths.extend(getattr(value, "protected_paths", tuple)())
        return tuple(paths)

    def replace(self, **changes: Any) -> RuntimeConfig:
        """A copy with ``changes``; ``None`` values are ignored (flags that were not given).
        A table another package owns is given by its name (``node=GatewaySettings(...)``)."""
        given = {k: v for k, v in changes.items() if v is not None}
        tables = {k: given.pop(k) for k in list(given) if k not in _OWN_NAMES and k in _SECTIONS}
        unknown = sorted(set(given) - _OWN_NAMES)
        if unknown:
            names = sorted(_OWN_NAMES - {"sections"})
            described = ", ".join(f"{key}{did_you_mean(key, names)}" for key in unknown)
            raise ConfigError(f"unknown runtime option(s): {described}")
        if isinstance(given.get("state_dir"), Path):
            given["state_dir"] = str(given["state_dir"])
        # Through the same strict converter as a file, so an option of the wrong type is
        # refused here too, naming the option.
        data = {**_converter.unstructure(self), **given}
        del data["sections"]  # kept as they are, their classes checked them
        sections = {**self.sections, **tables}
        config = structure_config(data, "the given options")
        return attrs.evolve(config, sections=sections) if sections else config


#: The runtime's own options (and ``sections``, which holds the others' tables).
_OWN_NAMES = frozenset(a.name for a in attrs.fields(RuntimeConfig))

_converter = cattrs.Converter(forbid_extra_keys=True)


def _strict(kind: type, accepted: tuple[type, ...]) -> Any:
    """A structure hook that refuses values of another type instead of coercing them: a
    TOML ``"5"`` is a string, and ``2.5`` is not an integer (cattrs would convert both)."""

    def structure(value: Any, _: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, accepted):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
        return kind(value)

    return structure


_converter.register_structure_hook(int, _strict(int, (int,)))
_converter.register_structure_hook(float, _strict(float, (int, float)))
_converter.register_structure_hook(str, _strict(str, (str,)))


def _bool(value: Any, _: Any) -> bool:
    if not isinstance(value, bool):  # a TOML `true`, never 1 or "yes"
        raise TypeError(f"expected true or false, got {type(value).__name__} {value!r}")
    return value


_converter.register_structure_hook(bool, _bool)


class _Said(TypeError):
    """Said as it is (cattrs' own wording would be "expected tuple", "expected Literal")."""


def _strings(value: Any, _: Any) -> tuple[str, ...]:
    # A bare TOML string is iterable too: cattrs would take it letter by letter. The value
    # is not shown: it may be a notification URL with its secret.
    if not isinstance(value, list | tuple):
        raise _Said(f'expected a list of strings, e.g. ["..."], got {type(value).__name__}')
    return tuple(_strict(str, (str,))(item, str) for item in value)


_converter.register_structure_hook_func(lambda type_: type_ == tuple[str, ...], _strings)


def _durability_value(value: Any, _: Any) -> str:
    # A string, its value checked by the field's validator: both name the accepted values.
    if not isinstance(value, str):
        raise _Said(f"expected one of {', '.join(DURABILITIES)}, got {type(value).__name__}")
    return value


_converter.register_structure_hook_func(lambda type_: type_ == Durability, _durability_value)
_converter.register_structure_hook(Path, lambda value, _: Path(_strict(str, (str,))(value, _)))


def _describe(exc: BaseException, type_: type | None) -> str:
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return _unknown_keys(sorted(exc.extra_fields), exc.cl)
    # A validator's ValueError (raised by the attrs class itself, so with no target type)
    # carries the only text that names the offending key: keep it.
    if isinstance(exc, ValueError) and type_ is None and str(exc):
        return str(exc)
    if isinstance(exc, _Said):
        return str(exc)
    return format_exception(exc, type_)


def _unknown_keys(keys: list[str], cl: type) -> str:
    """Each unknown key with the one it likely meant: a close name in the same table, or the
    table a key of that name belongs in."""
    fields = attrs.fields(attrs.resolve_types(cl)) if attrs.has(cl) else ()
    names = [f.name for f in fields if f.name != "sections"]
    sections = {f.name: f.type for f in fields if isinstance(f.type, type) and attrs.has(f.type)}
    if cl is RuntimeConfig:  # and the tables other packages own
        names.extend(_SECTIONS.names())
        sections.update({name: _SECTIONS[name] for name in _SECTIONS.names()})
    described = []
    for key in keys:
        hint = did_you_mean(key, names)
        if not hint:
            for section, kind in sections.items():
                found = closest(key, [f.name for f in attrs.fields(kind)])
                if found is not None:
                    hint = f" (did you mean [{section}] {found}?)"
                    break
        described.append(f"{key}{hint}")
    return f"unknown key(s) {', '.join(described)}; accepted: {', '.join(names)}"


def _key_first(problem: str) -> str:
    """``message @ loopactors.breaker.key`` as ``breaker.key: message``; the file itself
    (``@ loopactors``) is already named, so a problem of the whole file is its message."""
    message, at, path = problem.rpartition(" @ ")
    if not at:
        return problem
    key = path.removeprefix("loopactors").lstrip(".")
    return f"{key}: {message}" if key else message


def _structured(data: Any, kind: type[T], path: str) -> tuple[T | None, str]:
    """``data`` as ``kind``, or the problems found, each led by its key."""
    try:
        return _converter.structure(data, kind), ""
    except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
        if isinstance(exc, cattrs.BaseValidationError):
            problems = cattrs.transform_error(exc, path=path, format_exception=_describe)
            return None, "; ".join(_key_first(problem) for problem in problems)
        prefix = path.removeprefix("loopactors").lstrip(".")
        return None, f"{prefix}: {exc}" if prefix else str(exc)


def structure_config(data: Mapping[str, Any], source: str) -> RuntimeConfig:
    own = dict(data)
    sections: dict[str, Any] = {}
    problems = []
    if "sections" in own:  # the field that holds the tables, not a key of a file
        del own["sections"]
        problems.append(_unknown_keys(["sections"], RuntimeConfig))
    for name in [key for key in own if key not in _OWN_NAMES and key in _SECTIONS]:
        table = own.pop(name)
        section, problem = _structured(table, _SECTIONS[name], f"loopactors.{name}")
        if problem:
            problems.append(problem)
        sections[name] = section
    config, problem = _structured(own, RuntimeConfig, "loopactors")
    if problem:
        problems.insert(0, problem)
    if problems or config is None:
        raise ConfigError(f"invalid configuration in {source}: {'; '.join(problems)}")
    return attrs.evolve(config, sections=sections) if sections else config


def find_config(start: Path | None = None) -> Path | None:
    """``loopactors.toml``, or a ``pyproject.toml`` with ``[tool.loopactors]``, in ``start``
    (default: the working directory) or the nearest parent that has one."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            return candidate
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "loopactors" in _read_toml(pyproject).get("tool", {}):
            return pyproject
    return None


def load_config(path: Path | None = None, *, search: bool = True) -> RuntimeConfig:
    """Defaults, overlaid with the file at ``path`` (or the one :func:`find_config` finds).

    A file found by search where an agent may have written it is refused unless the operator
    named that version of it before (docs/configuration.md, "Files").

    Raises:
        ConfigError: the file cannot be read, is invalid, or is not trusted.
    """
    if path is None and search:
        path = find_config()
        if path is not None:
            untrusted = untrusted_config(path)
            if untrusted is not None:
                raise ConfigError(untrusted)
    elif path is not None:
        trust_config(path)  # named by the operator: this version is theirs
    if path is None:
        return RuntimeConfig()
    data = _read_toml(path)
    if path.name == "pyproject.toml":
        data = data.get("tool", {}).get("loopactors", {})
    config = structure_config(data, str(path))
    if not config.state_dir.is_absolute():
        # A relative state directory is relative to the file that names it.
        config = attrs.evolve(config, state_dir=path.parent / config.state_dir)
    # So are the paths a table names (the gateway's token file).
    sections = {
        name: value.relative_to(path.parent) if hasattr(value, "relative_to") else value
        for name, value in config.sections.items()
    }
    return attrs.evolve(config, sections=sections) if sections else config


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"cannot read configuration file {path}: it is not UTF-8 text (byte "
            f"0x{exc.object[exc.start]:02x} at offset {exc.start}); TOML files must be UTF-8"
        ) from None
