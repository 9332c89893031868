"""Reading YAML with the line of every key (``recsys_dist/yaml_loader.py``): the line
map, dates kept as text, and the file errors (missing, a directory, not text, invalid YAML,
a key given twice, a key that is not a scalar), each naming the file and line."""

from __future__ import annotations

import re

import pytest

from recsys_dist.errors import ConfigError
from recsys_dist.yaml_loader import LocatedYaml, load_yaml

TEXT = """\
# a comment
model:
  name: dcn_v2
  params:
    layers: [64, 32]
features:
  - name: ad
    dim: 8
  - name: site
    combiner: mean
train:
  dates: 2026-01-01..2026-01-03
  day: 2026-01-07
  bad_day: 2026-13-45
"""


@pytest.fixture
def doc(tmp_path) -> LocatedYaml:
    path = tmp_path / "config.yaml"
    path.write_text(TEXT)
    return load_yaml(path)


def test_values_are_plain_python_and_dates_stay_text(doc):
    assert doc.data == {
        "model": {"name": "dcn_v2", "params": {"layers": [64, 32]}},
        "features": [{"name": "ad", "dim": 8}, {"name": "site", "combiner": "mean"}],
        "train": {"dates": "2026-01-01..2026-01-03", "day": "2026-01-07", "bad_day": "2026-13-45"},
    }


def test_every_key_path_has_its_line(doc):
    assert {
        path: doc.lines[path]
        for path in (
            "model",
            "model.name",
            "model.params.layers",
            "model.params.layers[1]",
            "features[0]",
            "features[0].dim",
            "features[1].combiner",
            "train.bad_day",
        )
    } == {
        "model": 2,
        "model.name": 3,
        "model.params.layers": 5,
        "model.params.layers[1]": 5,
        "features[0]": 7,
        "features[0].dim": 8,
        "features[1].combiner": 10,
        "train.bad_day": 14,
    }


def test_a_path_without_a_line_takes_its_nearest_ancestors(doc):
    assert doc.line("features[1].combiner") == 10
    assert doc.line("features[1].pooling") == 9  # not in the file: its mapping's line
    assert doc.line("model.params.heads.size") == 4
    assert doc.line("unknown.key") is None


def test_an_error_names_file_line_and_key_or_the_set_that_gave_the_value(doc):
    error = doc.error("features[0].dim", "got 8; expected 4")
    assert isinstance(error, ConfigError)
    assert str(error) == f"{doc.file}:8: features[0].dim: got 8; expected 4"
    with_set = LocatedYaml(
        doc.file, doc.data, doc.lines, {"model.params": "--set model.params.layers=[1]"}
    )
    assert (
        str(with_set.error("model.params.layers", "bad"))
        == "--set model.params.layers=[1]: model.params.layers: bad"
    )
    assert with_set.override("model.name") is None


def test_an_empty_file_is_an_empty_mapping(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing yet\n")
    assert load_yaml(path).data == {}


def write(tmp_path, text: str | bytes):
    path = tmp_path / "bad.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def test_a_key_given_twice_names_its_second_line(tmp_path):
    path = write(tmp_path, "model:\n  name: lr\n  name: dcn_v2\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}:3: model.name: duplicate key")):
        load_yaml(path)


def test_a_key_that_is_not_a_scalar_is_refused(tmp_path):
    path = write(tmp_path, "model:\n  ? [a, b]\n  : 1\n")
    with pytest.raises(
        ConfigError,
        match=re.escape(f"{path}:2: model: mapping keys must be scalars, got ['a', 'b']"),
    ):
        load_yaml(path)


def test_invalid_yaml_names_the_line_of_the_problem(tmp_path):
    path = write(tmp_path, "model:\n  name: lr\n   bad: indent\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}:3: invalid YAML: ")):
        load_yaml(path)


def test_a_missing_file_a_folder_and_a_binary_file_are_named(tmp_path):
    with pytest.raises(
        ConfigError, match=re.escape(f"{tmp_path / 'none.yaml'}: config file not found")
    ):
        load_yaml(tmp_path / "none.yaml")
    with pytest.raises(
        ConfigError, match=re.escape(f"{tmp_path}: cannot read config file: Is a directory")
    ):
        load_yaml(tmp_path)
    path = write(tmp_path, b"model: \xff\xfe\n")
    with pytest.raises(
        ConfigError,
        match=re.escape(
            f"{path}: not a text file (byte 0xff at offset 7 is not UTF-8); expected a YAML config"
        ),
    ):
        load_yaml(path)
