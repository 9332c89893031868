"""Model params (``model.params``): schema defaults, parsed values, bounds with their
location, and a module that imports without TensorFlow."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from recsys_dist.config.model_params import (
    MODEL_PARAMS,
    DCNv2Params,
    MMoEParams,
    WideDeepParams,
)
from recsys_dist.errors import ConfigError
from recsys_dist.yaml_loader import load_yaml
from recsys_dist.yaml_schema import parse_dataclass
from tests.support.paths import REPO as PROJECT_ROOT


def _params_doc(tmp_path: pathlib.Path, text: str):
    path = tmp_path / "model.yaml"
    path.write_text(textwrap.dedent(text))
    return load_yaml(path)


@pytest.mark.parametrize("name", list(MODEL_PARAMS))
def test_params_parse_with_schema_defaults(tmp_path, name):
    doc = _params_doc(tmp_path, "params: {}\n")
    parsed = parse_dataclass(MODEL_PARAMS[name], doc.data["params"], doc, "model.params")
    assert parsed == MODEL_PARAMS[name]()


def test_params_parse_values_and_report_bounds_with_location(tmp_path):
    doc = _params_doc(
        tmp_path,
        """\
        good: {cross_layers: 2, low_rank: 8, structure: parallel, hidden_units: [32]}
        bad:
          cross_layers: 0
        """,
    )
    good = parse_dataclass(DCNv2Params, doc.data["good"], doc, "good")
    assert good == DCNv2Params(cross_layers=2, low_rank=8, structure="parallel", hidden_units=[32])
    with pytest.raises(
        ConfigError,
        match=r"model.yaml:3: bad.cross_layers: got 0; "
        r"expected a value >= 1",
    ):
        parse_dataclass(DCNv2Params, doc.data["bad"], doc, "bad")


@pytest.mark.parametrize(
    "cls, kwargs, match",
    [
        (
            DCNv2Params,
            {"cross_layers": 0},
            r"DCNv2Params.cross_layers: got 0; expected a value >= 1",
        ),
        (DCNv2Params, {"structure": "tower"}, r"structure: got 'tower'; expected one of 'stacked'"),
        (
            WideDeepParams,
            {"hidden_units": []},
            r"WideDeepParams.hidden_units: got 0 item\(s\); expected at least 1",
        ),
        (
            WideDeepParams,
            {"hidden_units": [64, 0]},
            r"WideDeepParams.hidden_units\[1\]: got 0; expected a value >= 1",
        ),
        (DCNv2Params, {"low_rank": 0}, r"DCNv2Params.low_rank: got 0; expected a value >= 1"),
        (DCNv2Params, {"structure": "stacked", "low_rank": None}, None),
        (MMoEParams, {"dropout": 1.0}, r"MMoEParams.dropout: got 1.0; expected a value <= 0.99"),
    ],
)
def test_params_reject_bad_values_in_python(cls, kwargs, match):
    """A params object built in Python is checked by the schema's rules, with its
    messages (``check_fields`` in ``yaml_schema.py``, the one owner of bounds)."""
    if match is None:
        assert cls(**kwargs) == cls()
        return
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_params_module_imports_without_tensorflow():
    code = (
        "import sys; import recsys_dist.config.model_params; "
        "assert 'tensorflow' not in sys.modules, 'params imported tensorflow'"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )


def test_docs_quality_has_the_defaults_row_of_every_model():
    """docs/quality.md's defaults table is each model's params defaults and linear part,
    in registration order (:func:`defaults_row`), so the table follows the dataclasses."""
    from recsys_dist.config.model_params import defaults_row

    text = (PROJECT_ROOT / "docs" / "quality.md").read_text()
    section = text.split("\n## Defaults\n", 1)[1].split("\n## ", 1)[0]
    rows = [
        line
        for line in section.splitlines()
        if line.startswith("| `") and line.split("`")[1] in MODEL_PARAMS
    ]
    assert rows == [defaults_row(name) for name in MODEL_PARAMS]


def test_the_linear_rate_follows_the_canned_estimators_rule():
    from recsys_dist.config.model_params import default_linear_learning_rate

    assert default_linear_learning_rate(1) == 0.5 and default_linear_learning_rate(4) == 0.5
    assert default_linear_learning_rate(6) == pytest.approx(1 / 6**0.5)
    assert default_linear_learning_rate(39) == pytest.approx(1 / 39**0.5)
    assert default_linear_learning_rate(0) == 0.5
