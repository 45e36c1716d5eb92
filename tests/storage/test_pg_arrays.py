"""The binary arrays a PostgreSQL group commit sends (storage/_pg_arrays.py) read back on
the server as the values they were built from."""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest

from loopactors.storage._pg_arrays import (
    BinaryArray,
    bytea_array,
    float8_array,
    int4_array,
    int8_array,
    register_arrays,
    text_array,
)


def read_back(url: str, array: BinaryArray, sql_type: str, **connect: Any) -> Any:
    with psycopg.connect(url, autocommit=True, **connect) as conn:
        register_arrays(conn)
        row = conn.execute(
            f"SELECT %b::{sql_type}, cardinality(%b::{sql_type})", (array, array)
        ).fetchone()
    assert row is not None
    assert row[1] == len(row[0])
    return row[0]


def test_each_element_type_reads_back_as_built(postgres_url: str) -> None:
    text = ["loop-1", "", "héllo ✓", "x" * 10_000]
    assert read_back(postgres_url, text_array(text, "utf-8"), "text[]") == text
    # bytea holds what text cannot: NUL, bytes that are not UTF-8.
    data = [b"\x00\xff{}", b"", bytes(range(256))]
    assert read_back(postgres_url, bytea_array(data), "bytea[]") == data
    ints = [0, -1, 2**31 - 1, -(2**31)]
    assert read_back(postgres_url, int4_array(ints), "int4[]") == ints
    longs = [0, 2**63 - 1, -(2**63)]
    assert read_back(postgres_url, int8_array(longs), "int8[]") == longs
    floats = [0.0, -0.0, 1.5, 1e300, math.inf, -math.inf, 3]
    assert read_back(postgres_url, float8_array(floats), "float8[]") == floats
    [nan] = read_back(postgres_url, float8_array([math.nan]), "float8[]")
    assert math.isnan(nan)


def test_null_and_empty_arrays(postgres_url: str) -> None:
    assert read_back(postgres_url, text_array([None, "a", None], "utf-8"), "text[]") == [
        None,
        "a",
        None,
    ]
    for array, sql_type in [
        (text_array([], "utf-8"), "text[]"),
        (bytea_array([]), "bytea[]"),
        (int4_array([]), "int4[]"),
        (int8_array([]), "int8[]"),
        (float8_array([]), "float8[]"),
    ]:
        assert read_back(postgres_url, array, sql_type) == []


def test_text_goes_in_the_connections_client_encoding(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, client_encoding="LATIN1") as conn:
        encoding = conn.info.encoding
    assert encoding != "utf-8"
    array = text_array(["café"], encoding)
    assert read_back(postgres_url, array, "text[]", client_encoding="LATIN1") == ["café"]


def test_a_value_out_of_range_is_refused_naming_its_type() -> None:
    with pytest.raises(ValueError, match="does not fit a PostgreSQL int8"):
        int8_array([2**63])
    with pytest.raises(ValueError, match="does not fit a PostgreSQL int4"):
        int4_array([2**31])
    with pytest.raises(ValueError, match="does not fit a PostgreSQL float8"):
        float8_array(["1.5"])  # type: ignore[list-item]
