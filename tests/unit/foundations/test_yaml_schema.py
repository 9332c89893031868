"""Typed parsing of YAML values into frozen dataclasses (``recsys_dist/yaml_schema.py``):
each supported annotation, each field rule, and each rejection's message (file, line, key
path, the bad value and what is allowed)."""

from __future__ import annotations

import dataclasses
import datetime
import pathlib
import re
from dataclasses import field
from typing import Literal

import pytest

from recsys_dist.errors import ConfigError
from recsys_dist.yaml_loader import LocatedYaml, load_yaml
from recsys_dist.yaml_schema import did_you_mean, parse_dataclass, parse_value
from tests.support.configs import line_of, write_yaml


@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    dim: int = field(metadata={"min": 1, "max": 512})


@dataclasses.dataclass(frozen=True)
class Run:
    title: str
    rate: float = field(default=0.5, metadata={"min": 0.0, "max": 1.0})
    mode: Literal["fast", "exact"] = "fast"
    strict: bool = False
    seeds: list[int] = field(default_factory=lambda: [0], metadata={"min_items": 1, "item_min": 0})
    tables: dict[str, Table] = field(default_factory=dict, metadata={"key_field": "name"})
    start: datetime.date | None = None
    size: int | str | None = None
    hidden: int = field(default=7, metadata={"internal": True})

    def __post_init__(self):
        if self.mode == "exact" and self.rate != 1.0:
            raise ValueError("mode: exact needs rate: 1.0")


BASE = {
    "title": "t",
    "rate": 0.25,
    "mode": "exact",
    "strict": True,
    "seeds": [1, 2],
    "tables": {"ads": {"dim": 8}},
    "start": "2026-01-07",
    "size": "big",
}


def load(tmp_path, doc: dict) -> tuple[LocatedYaml, str]:
    path = write_yaml(tmp_path / "run.yaml", doc)
    return load_yaml(path), path


def parse(tmp_path, changes: dict):
    doc, _ = load(tmp_path, {**BASE, "mode": "fast", **changes})
    return parse_dataclass(Run, doc.data, doc, "")


def test_every_annotation_is_parsed_into_its_type(tmp_path):
    run = parse(tmp_path, {})
    assert run == Run(
        title="t",
        rate=0.25,
        mode="fast",
        strict=True,
        seeds=[1, 2],
        tables={"ads": Table("ads", 8)},
        start=datetime.date(2026, 1, 7),
        size="big",
    )
    assert (
        parse(tmp_path, {"rate": 1}).rate == 1.0
        and type(parse(tmp_path, {"rate": 1}).rate) is float
    )
    assert parse(tmp_path, {"size": 3}).size == 3 and parse(tmp_path, {"size": None}).size is None


def test_defaults_fill_the_keys_left_out_and_internal_fields_are_not_keys(tmp_path):
    doc, _ = load(tmp_path, {"title": "only"})
    run = parse_dataclass(Run, doc.data, doc, "")
    assert (run.rate, run.mode, run.seeds, run.tables, run.start, run.hidden) == (
        0.5,
        "fast",
        [0],
        {},
        None,
        7,
    )
    with pytest.raises(
        ConfigError,
        match="unknown key; allowed keys are "
        "mode, rate, seeds, size, start, strict, tables, "
        r"title\.",
    ):
        parse(tmp_path, {"hidden": 3})


def test_a_null_mapping_takes_the_defaults_and_still_needs_the_required_keys(tmp_path):
    doc, _ = load(tmp_path, {"title": "t", "tables": {"ads": None}})
    with pytest.raises(
        ConfigError,
        match=r"tables\.ads\.dim: missing required key; "
        "expected an integer$",
    ):
        parse_dataclass(Run, doc.data, doc, "")
    with pytest.raises(ConfigError, match="title: missing required key; expected a string$"):
        parse_dataclass(Run, None, doc, "")


def test_an_unknown_key_names_file_line_path_and_the_closest_key(tmp_path):
    doc, path = load(tmp_path, {**BASE, "tables": {"ads": {"dim": 8, "dims": 4}}})
    with pytest.raises(ConfigError) as raised:
        parse_dataclass(Run, doc.data, doc, "")
    error, line = raised.value, line_of(pathlib.Path(path).read_text(), "dims")
    assert (error.file, error.path, error.line) == (path, "tables.ads.dims", line)
    assert str(error) == (
        f'{path}:{line}: tables.ads.dims: unknown key; allowed keys are dim. Did you mean "dim"?'
    )


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"title": ""}, "title: got '' (of type str); expected a non-empty string"),
        ({"title": 3}, "title: got 3 (of type int); expected a non-empty string"),
        ({"rate": "high"}, "rate: got 'high' (of type str); expected a number"),
        ({"rate": True}, "rate: got True (of type bool); expected a number"),
        ({"rate": 1.5}, "rate: got 1.5; expected a value <= 1.0"),
        ({"rate": -0.1}, "rate: got -0.1; expected a value >= 0.0"),
        (
            {"mode": "exakt"},
            "mode: got 'exakt'; expected one of 'fast', 'exact'. Did you mean \"exact\"?",
        ),
        ({"strict": "yes"}, "strict: got 'yes' (of type str); expected true or false"),
        ({"strict": 1}, "strict: got 1 (of type int); expected true or false"),
        ({"seeds": 3}, "seeds: got 3 (of type int); expected a list of an integer"),
        ({"seeds": []}, "seeds: got 0 item(s); expected at least 1"),
        ({"seeds": [1, -2]}, r"seeds[1]: got -2; expected a value >= 0"),
        ({"seeds": [1, 2.5]}, r"seeds[1]: got 2.5 (of type float); expected an integer"),
        ({"seeds": [True]}, r"seeds[0]: got True (of type bool); expected an integer"),
        (
            {"tables": ["ads"]},
            "tables: got ['ads'] (of type list); expected a mapping of name to a mapping",
        ),
        ({"tables": {"ads": {"dim": 0}}}, "tables.ads.dim: got 0; expected a value >= 1"),
        ({"tables": {"ads": {"dim": 1024}}}, "tables.ads.dim: got 1024; expected a value <= 512"),
        ({"tables": {"ads": 8}}, "tables.ads: got 8 (of type int); expected a mapping"),
        ({"tables": {1: {"dim": 8}}}, r"tables[1]: names must be strings, got 1 (of type int)"),
        ({"start": "2026-13-45"}, "start: got '2026-13-45'; expected a date YYYY-MM-DD"),
        ({"size": 2.5}, "size: got 2.5 (of type float); expected an integer or a string or null"),
        ({"mode": "exact"}, ": mode: exact needs rate: 1.0"),
    ],
)
def test_each_rejection_names_the_key_the_value_and_what_is_allowed(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=re.escape(message) + "$") as raised:
        parse(tmp_path, changes)
    assert str(raised.value).startswith(str(tmp_path / "run.yaml") + ":")


def test_a_missing_required_key_and_a_value_that_is_not_a_mapping(tmp_path):
    doc, path = load(tmp_path, {"rate": 0.1})
    with pytest.raises(
        ConfigError, match=re.escape(f"{path}: title: missing required key; expected a string")
    ):
        parse_dataclass(Run, doc.data, doc, "")
    with pytest.raises(ConfigError, match=r"run: got \[1\] \(of type list\); expected a mapping"):
        parse_dataclass(Run, [1], doc, "run")


def test_a_literal_of_strings_is_not_matched_by_a_bool_and_the_reverse(tmp_path):
    doc, _ = load(tmp_path, {})
    assert parse_value(Literal[True, False], True, doc, "flag") is True
    with pytest.raises(ConfigError, match=r"flag: got 1; expected one of True, False\.$"):
        parse_value(Literal[True, False], 1, doc, "flag")
    with pytest.raises(ConfigError, match=r"n: got True; expected one of 1, 2\.$"):
        parse_value(Literal[1, 2], True, doc, "n")


def test_an_error_from_a_set_names_the_set_instead_of_the_file(tmp_path):
    path = write_yaml(tmp_path / "run.yaml", {"title": "t"})
    loaded = load_yaml(path)
    doc = LocatedYaml(path, {"title": "t", "rate": 2.0}, loaded.lines, {"rate": "--set rate=2"})
    with pytest.raises(
        ConfigError, match=re.escape("--set rate=2: rate: got 2.0; expected a value <= 1.0")
    ):
        parse_dataclass(Run, doc.data, doc, "")


def test_an_unsupported_annotation_is_a_programming_error(tmp_path):
    doc, _ = load(tmp_path, {})
    with pytest.raises(TypeError, match="unsupported config annotation <class 'bytes'> at x"):
        parse_value(bytes, b"", doc, "x")


def test_did_you_mean_suggests_only_a_close_word():
    assert (
        did_you_mean("embeding_dim", ["embedding_dim", "rows"]) == ' Did you mean "embedding_dim"?'
    )
    assert did_you_mean("zzz", ["embedding_dim", "rows"]) == ""
    assert did_you_mean(3, [1, 2, 3]) == ' Did you mean "3"?'
