"""The registry every axis of change plugs its variants into: by call or by entry point,
imported on first use."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopactors._plugins import Registry, load_target


@pytest.fixture
def on_path(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path`` on ``sys.path``, its modules forgotten afterwards."""
    sys.path.insert(0, str(tmp_path))
    before = set(sys.modules)
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in set(sys.modules) - before:
            if name.startswith("plug_"):
                del sys.modules[name]


def test_a_target_by_path_is_imported_on_first_use_only(on_path: Path) -> None:
    (on_path / "plug_lazy.py").write_text("class Thing:\n    value = 7\n")
    registry: Registry[type] = Registry("thing")
    registry.register("lazy", "plug_lazy:Thing")
    assert "plug_lazy" not in sys.modules  # registering imports nothing
    assert "lazy" in registry
    assert registry.names() == ("lazy",)
    thing = registry["lazy"]
    assert thing.value == 7  # type: ignore[attr-defined]
    assert registry.get("lazy") is thing  # imported once, then kept


def test_an_object_registers_as_itself_and_a_name_only_once() -> None:
    registry: Registry[int] = Registry("number")
    registry.register("seven", 7)
    assert registry["seven"] == 7
    with pytest.raises(ValueError, match="number 'seven' is already registered"):
        registry.register("seven", 8)
    registry.register("seven", 8, replace=True)
    assert registry["seven"] == 8
    registry.unregister("seven")
    assert registry.get("seven") is None
    with pytest.raises(ValueError, match="needs a name"):
        registry.register("", 1)


def test_an_unknown_name_is_an_error_naming_the_accepted_ones() -> None:
    registry: Registry[int] = Registry("worker kind")
    registry.register("b", 2)
    registry.register("a", 1)
    with pytest.raises(KeyError, match="unknown worker kind 'c'; accepted: a, b"):
        registry["c"]
    assert "c" not in registry


def test_a_bad_target_fails_when_used_naming_it(on_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'package\.module:attr', got 'nocolon'"):
        load_target("nocolon")
    registry: Registry[object] = Registry("thing")
    registry.register("missing", "plug_absent_module:X")
    with pytest.raises(ModuleNotFoundError, match="plug_absent_module"):
        registry.get("missing")
    (on_path / "plug_attrs.py").write_text("class A:\n    class B:\n        c = 3\n")
    assert load_target("plug_attrs:A.B").c == 3  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        load_target("plug_attrs:A.Nope")


def test_an_installed_distribution_registers_through_its_entry_points(on_path: Path) -> None:
    (on_path / "plug_dist.py").write_text("VALUE = 'from an entry point'\n")
    info = on_path / "plug_dist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plug-dist\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[loopactors.test_things]\nfromdist = plug_dist:VALUE\nbuiltin = plug_dist:VALUE\n"
    )
    registry: Registry[object] = Registry("thing", group="loopactors.test_things")
    by_call = object()
    registry.register("builtin", by_call)
    assert registry["fromdist"] == "from an entry point"
    assert registry["builtin"] is by_call  # a registration by call wins
    assert registry.names() == ("builtin", "fromdist")
