"""Model and training configs (``configs/*.yaml``), which point at a feature config.

Example::

    features: ../features/criteo_synth.yaml
    data:
      path: ../data/demo              # root holding dt=YYYY-MM-DD/ partitions
      train: {dates: 2026-01-01..2026-01-06}
      eval: {dates: 2026-01-07}
    input: {batch_size: 512}
    model: {name: dcn_v2}
    cluster: {mode: local, workers: 2, ps: 1}

:func:`load_config` parses the file, loads the feature config it names and checks the
cross-references between them. ``--set key=value`` overrides go through
:func:`apply_overrides` before parsing, so they are validated like the file.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import logging
import os
from collections.abc import Mapping
from typing import Any

import yaml

from recsys_dist.config import model_params  # noqa: F401  registers the built-in models
from recsys_dist.config.chosen_defaults import CARVE_MIN_DAYS, with_model_and_data_defaults
from recsys_dist.config.model_inputs import model_input_problem
from recsys_dist.config.model_registry import (
    MODEL_INPUT_GROUPS as MODEL_INPUT_GROUPS,  # re-exported: model name -> its input groups
)
from recsys_dist.config.model_registry import (
    MODEL_PARAMS,
    RegisteredModel,
    registered_model,
)
from recsys_dist.config.sections import (
    OPTIMIZER_KEYS,
    ClusterSpec,
    DataSpec,
    EvaluationSpec,
    FollowSpec,
    InputSpec,
    ModelSpec,
    OptimizerSpec,
    RetrainSpec,
    TrainSpec,
)
from recsys_dist.config.strategy import check_strategy
from recsys_dist.errors import ConfigError
from recsys_dist.features.config import FeatureConfig, load_feature_config
from recsys_dist.yaml_loader import LocatedYaml, TextDatesLoader, load_yaml
from recsys_dist.yaml_schema import did_you_mean, parse_dataclass

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class _ConfigFile:
    features: str
    model: ModelSpec
    data: DataSpec | None = None
    input: InputSpec = InputSpec()
    cluster: ClusterSpec = ClusterSpec()
    train: TrainSpec = TrainSpec()
    evaluation: EvaluationSpec = EvaluationSpec()
    retrain: RetrainSpec | None = None
    follow: FollowSpec | None = None


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """A parsed, cross-checked model/training config with its feature config.

    Attributes:
      file: Path of the config YAML.
      features: The feature config it points at.
      data, input, model, cluster, train: The config's sections.
      inputs: Resolved feature names per model input group.
      labels: Resolved label names the model predicts.
      raw: The config as plain data after overrides (written next to models).
    """

    file: str
    features: FeatureConfig
    data: DataSpec | None
    input: InputSpec
    model: ModelSpec
    cluster: ClusterSpec
    train: TrainSpec
    inputs: dict[str, list[str]]
    labels: list[str]
    raw: dict[str, Any]
    evaluation: EvaluationSpec = EvaluationSpec()
    retrain: RetrainSpec | None = None
    follow: FollowSpec | None = None

    def with_data_path(self, path: str | None) -> "ExperimentConfig":
        """This config reading ``path`` (``--data``): a root of date partitions (the
        splits' dates apply), a directory, one file or a glob. ``None``: unchanged.

        Only this command reads it: ``raw`` (the resolved config written next to a
        model) keeps the file's ``data.path``."""
        if path is None:
            return self
        data = self.data if self.data is not None else DataSpec(path=path)
        return dataclasses.replace(
            self, data=dataclasses.replace(data, path=path, path_from_command_line=True)
        )


def apply_overrides(doc: LocatedYaml, overrides: list[str]) -> LocatedYaml:
    """Applies ``key.path=value`` overrides (values parsed as YAML) to a loaded config.

    Raises:
      ConfigError: an override is not ``key=value`` or walks into a non-mapping.
    """
    values = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(doc.file, key, f"--set {item!r}: expected key.path=value")
        try:
            value = yaml.load(text, Loader=TextDatesLoader)
        except yaml.YAMLError:
            value = text
        values[key.strip()] = (value, f"--set {item}")
    return _set(doc, values)


def set_values(doc: LocatedYaml, values: Mapping[str, Any], source: str) -> LocatedYaml:
    """Sets config values from code, e.g. ``{"data.eval": {"dates": "2026-01-03"}}``: the
    typed form of ``--set``. An error in one of them names ``source`` and the key."""
    return _set(doc, {key: (value, f"{source}: {key}={value!r}") for key, value in values.items()})


def _set(doc: LocatedYaml, values: Mapping[str, tuple[Any, str]]) -> LocatedYaml:
    """``doc`` with each ``key.path`` set to its value; the label names the setter."""
    data = copy.deepcopy(doc.data) if isinstance(doc.data, dict) else {}
    given: dict[str, str] = dict(doc.overrides)
    for key, (value, label) in values.items():
        node = data
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(
                    doc.file, ".".join(parts[: depth + 1]), f"{label}: {child!r} is not a mapping"
                )
            node = child
        node[parts[-1]] = value
        given[key] = label
    _drop_params_of_the_other_model(doc, data, given)
    return LocatedYaml(doc.file, data, doc.lines, given)


def _drop_params_of_the_other_model(doc: LocatedYaml, data: dict, given: dict[str, str]) -> None:
    """After ``--set model.name=OTHER``, drops the file's ``model.params`` keys that OTHER
    does not take (they were written for the file's model), with a note on stderr."""
    model = data.get("model")
    if "model.name" not in given or not isinstance(model, dict):
        return
    params, name = model.get("params"), model.get("name")
    if not isinstance(params, dict) or name not in MODEL_PARAMS:
        return
    takes = {spec.name for spec in dataclasses.fields(MODEL_PARAMS[name])}
    given_here = LocatedYaml(doc.file, data, doc.lines, given)
    dropped = [
        key
        for key in params
        if key not in takes and given_here.override(f"model.params.{key}") is None
    ]
    if dropped:
        model["params"] = {k: v for k, v in params.items() if k not in dropped}
        log.info(
            "note: %s: dropped model.params %s of %s, which %s does not take",
            given["model.name"],
            ", ".join(dropped),
            doc.file,
            name,
        )


def _resolve_inputs(
    doc: LocatedYaml, model: ModelSpec, spec: RegisteredModel, features: FeatureConfig
) -> dict[str, list[str]]:
    """The config's ``model.inputs``; without it, every feature in the model's one group."""
    groups = spec.input_groups
    if model.inputs is None:
        if len(groups) > 1:
            raise doc.error(
                "model.inputs",
                f"model {model.name!r} needs its input groups "
                + ", ".join(groups)
                + " listed, e.g. inputs: {wide: [...], deep: [...]}",
            )
        return {groups[0]: list(features.features)}
    return {group: list(names) for group, names in model.inputs.items()}


def _check_model_inputs(
    doc: LocatedYaml,
    parsed: _ConfigFile,
    spec: RegisteredModel,
    inputs: dict[str, list[str]],
    labels: list[str],
    features: FeatureConfig,
) -> dict[str, list[str]]:
    """The one check of a model's inputs (:func:`model_input_problem`), naming the key of
    the problem, then: every feature is read by some group. Returns the inputs in the
    order of the model's groups."""
    problem = model_input_problem(spec, parsed.model.params, features, inputs, labels)
    if problem is not None:
        where = "model.inputs" if parsed.model.inputs is not None else "model.name"
        raise doc.error(problem.key or where, problem.message)
    used = {n for names in inputs.values() for n in names}
    for name in features.features:
        if name not in used:
            raise doc.error(
                "model.inputs",
                f"feature {name!r} of {features.file} is used by no "
                "model input; add it to a group or remove it from the feature config",
            )
    return {g: inputs[g] for g in spec.input_groups}


def _check_data(doc: LocatedYaml, data: DataSpec | None) -> None:
    if data is None:
        return
    for split_name in ("train", "eval", "validation"):
        split = getattr(data, split_name)
        if split is None:
            continue
        path = f"data.{split_name}"
        if (split.dates is None) == (split.glob is None):
            raise doc.error(path, "set exactly one of 'dates' (FROM..TO) or 'glob'")
        if split.dates is not None:
            try:
                split.date_range()
            except ValueError as exc:
                raise doc.error(path + ".dates", str(exc)) from None


def parse_config(doc: LocatedYaml) -> ExperimentConfig:
    """Parses a loaded model/training config and the feature config it points at."""
    raw = _parse_dates_as_text(doc.data)
    doc = LocatedYaml(doc.file, raw, doc.lines, doc.overrides)
    raw = _resolve_paths(doc, raw)
    model_raw = raw.get("model") if isinstance(raw, dict) else None
    params_raw = model_raw.get("params") if isinstance(model_raw, dict) else None
    without_params = (
        dict(raw, model={k: v for k, v in model_raw.items() if k != "params"})
        if isinstance(model_raw, dict)
        else raw
    )
    parsed = parse_dataclass(_ConfigFile, without_params, doc, "")
    spec = registered_model(parsed.model.name, doc, "model.name")
    params = parse_dataclass(spec.params, params_raw, doc, "model.params")
    parsed = dataclasses.replace(parsed, model=dataclasses.replace(parsed.model, params=params))
    features_file = parsed.features
    if not os.path.exists(features_file):
        raise doc.error("features", f"feature config {features_file!r} does not exist")
    features = load_feature_config(features_file)
    _check_data(doc, parsed.data)
    labels = parsed.model.labels or list(features.labels)
    inputs = _resolve_inputs(doc, parsed.model, spec, features)
    inputs = _check_model_inputs(doc, parsed, spec, inputs, labels, features)
    parsed, raw = with_model_and_data_defaults(parsed, raw, spec, inputs)
    _check_optimizers(doc, raw, parsed.train)
    _check_early_stopping(doc, parsed, labels)
    check_strategy(doc, parsed, features)
    return ExperimentConfig(
        doc.file,
        features,
        parsed.data,
        parsed.input,
        parsed.model,
        parsed.cluster,
        parsed.train,
        inputs,
        labels,
        raw,
        parsed.evaluation,
        parsed.retrain,
        parsed.follow,
    )


#: The keys that hold paths. In a file they are relative to the file's directory; given
#: with ``--set`` they are relative to the working directory, as ``--data`` is.
PATH_KEYS = ("features", "data.path", "retrain.root", "follow.root")


def _resolve_paths(doc: LocatedYaml, raw: Any) -> Any:
    """``raw`` with every relative local path of :data:`PATH_KEYS` made absolute, so the
    resolved config written next to a model means the same wherever it is read."""
    if not isinstance(raw, dict):
        return raw
    raw = copy.deepcopy(raw)
    for key in PATH_KEYS:
        *parents, leaf = key.split(".")
        node = raw
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        value = node.get(leaf) if isinstance(node, dict) else None
        if not isinstance(value, str) or not value or "://" in value or os.path.isabs(value):
            continue
        base = os.getcwd() if doc.override(key) else os.path.dirname(os.path.abspath(doc.file))
        node[leaf] = os.path.normpath(os.path.join(base, value))
    return raw


def _check_optimizers(doc: LocatedYaml, raw: dict, train: TrainSpec) -> None:
    section = raw.get("train") or {}
    for key in ("embedding_optimizer", "dense_optimizer", "linear_optimizer"):
        spec: OptimizerSpec | None = getattr(train, key)
        if spec is None:
            continue
        given = section.get(key) or {}
        for name in given:
            if name not in ("name", "learning_rate") and name not in OPTIMIZER_KEYS[spec.name]:
                raise doc.error(
                    f"train.{key}.{name}",
                    f"does not apply to optimizer "
                    f"{spec.name!r}; it reads "
                    + (", ".join(sorted(OPTIMIZER_KEYS[spec.name])) or "only learning_rate"),
                )
    for key in ("embedding_optimizer", "linear_optimizer"):
        spec = getattr(train, key)
        if spec is not None and spec.name == "adam":
            raise doc.error(
                f"train.{key}.name",
                "got 'adam'; embedding tables take "
                "'adagrad', 'ftrl' or 'sgd' (Adam's dense moments would double "
                "the parameter-server memory and update every row's slots)",
            )


def _check_early_stopping(doc: LocatedYaml, parsed: "_ConfigFile", labels: list[str]) -> None:
    spec = parsed.train.early_stopping
    if spec is None:
        return
    if parsed.data is None or parsed.data.validation is None:
        raise doc.error(
            "train.early_stopping",
            "needs a validation split to score after "
            "every pass: set data.validation.dates (FROM..TO) or "
            "data.validation.glob, days apart from data.train and data.eval (a "
            f"data.train.dates window of {CARVE_MIN_DAYS} or more days gets its last tenth "
            "when data.validation is left out)",
        )
    if parsed.train.epochs < 2:
        raise doc.error(
            "train.early_stopping",
            f"needs train.epochs of at least 2 (got "
            f"{parsed.train.epochs}): it stops between passes",
        )
    if spec.label is not None and spec.label not in labels:
        raise doc.error(
            "train.early_stopping.label",
            f"got {spec.label!r}; the model "
            "predicts " + ", ".join(labels) + "." + did_you_mean(spec.label, labels),
        )


def _parse_dates_as_text(data: Any) -> Any:
    """YAML reads ``2026-01-07`` as a date; config date fields are text, so normalise."""
    if isinstance(data, dict):
        return {k: _parse_dates_as_text(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_parse_dates_as_text(v) for v in data]
    if isinstance(data, datetime.date):
        return data.isoformat()
    return data


def load_config(
    path: str | os.PathLike[str],
    overrides: list[str] | None = None,
    values: Mapping[str, Any] | None = None,
    source: str = "",
) -> ExperimentConfig:
    """Loads a model/training config, applies ``--set`` overrides, then ``values`` (typed
    overrides from code, named ``source`` in errors; see :func:`set_values`), and
    validates it all."""
    doc = load_yaml(path)
    if overrides:
        doc = apply_overrides(doc, overrides)
    if values:
        doc = set_values(doc, values, source)
    return parse_config(doc)


#: The files that hold a run's resolved config, next to its model.
CONFIG_FILE, FEATURES_FILE = "config.yaml", "features.yaml"


def resolved_files(config: ExperimentConfig) -> dict[str, str]:
    """The texts of :data:`CONFIG_FILE` (the config after overrides, its paths absolute,
    pointing at the feature config beside it) and :data:`FEATURES_FILE` (the feature
    config), which ``train`` and ``retrain`` write next to a model."""
    with open(config.features.file, encoding="utf-8") as handle:
        features = handle.read()
    relative = {
        name: spec
        for name, spec in (yaml.safe_load(features).get("features") or {}).items()
        if isinstance(spec, dict)
        and isinstance(spec.get("vocabulary"), str)
        and not os.path.isabs(spec["vocabulary"])
    }
    if relative:  # vocabulary files are relative to the feature config: make them absolute
        data = yaml.safe_load(features)
        base = os.path.dirname(os.path.abspath(config.features.file))
        for name in relative:
            spec = data["features"][name]
            spec["vocabulary"] = os.path.normpath(os.path.join(base, spec["vocabulary"]))
        features = yaml.safe_dump(data, sort_keys=False)
    resolved = dict(config.raw, features=FEATURES_FILE)
    return {CONFIG_FILE: yaml.safe_dump(resolved, sort_keys=False), FEATURES_FILE: features}
