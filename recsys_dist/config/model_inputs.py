"""The one check of what a model is given to read: its input groups, their features, its
labels, a behaviour sequence when it needs one, and what its params ask of its inputs.

``validate`` (:func:`recsys_dist.config.experiment.parse_config`) and model construction
(``build_model`` in :mod:`recsys_dist.models.zoo`) both call :func:`model_input_problem`;
the config names the key of the problem with file and line, model construction raises its
message as a ``ValueError``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from recsys_dist.config.model_registry import RegisteredModel
from recsys_dist.features.config import FeatureConfig
from recsys_dist.yaml_schema import did_you_mean


@dataclasses.dataclass(frozen=True)
class InputProblem:
    """Why a model cannot read its inputs: the message, and the config key to name
    (None: the model's inputs, ``model.inputs`` or ``model.name`` when it has none)."""

    message: str
    key: str | None = None


def model_input_problem(
    spec: RegisteredModel,
    params: Any,
    features: FeatureConfig,
    inputs: dict[str, list[str]],
    labels: list[str],
) -> InputProblem | None:
    """What model ``spec`` with ``params`` cannot read, or None.

    Args:
      spec: The model's registration (its input groups, fewest labels, sequence need).
      params: Its params; a params class may define ``input_problem(model, features,
        inputs)`` for what it needs of the features (one dim for all tables, a dense
        feature, each history's targets, attention heads that divide a history's dim).
      features: The feature config.
      inputs: Input group -> feature names.
      labels: The labels the model predicts.
    """
    problem = (
        _group_problem(spec, inputs)
        or _feature_problem(features, inputs)
        or _label_problem(spec, features, labels)
        or _sequence_problem(spec, features, inputs)
    )
    if problem is not None:
        return problem
    check = getattr(params, "input_problem", None)
    return check(spec.name, features, inputs) if check is not None else None


def _group_problem(spec: RegisteredModel, inputs: dict[str, list[str]]) -> InputProblem | None:
    groups = spec.input_groups
    reads = f"it reads input group(s) {', '.join(groups)}; got {sorted(inputs)}"
    for group in inputs:
        if group not in groups:
            return InputProblem(
                f"model {spec.name!r} has no input group {group!r}: {reads}."
                + did_you_mean(group, groups),
                f"model.inputs.{group}",
            )
    missing = [g for g in groups if g not in inputs]
    if missing:
        return InputProblem(
            f"model {spec.name!r} needs input group(s) {', '.join(missing)}: {reads}",
            "model.inputs",
        )
    return None


def _feature_problem(features: FeatureConfig, inputs: dict[str, list[str]]) -> InputProblem | None:
    for group, names in inputs.items():
        if not names:
            return InputProblem(f"input group {group!r} lists no feature", f"model.inputs.{group}")
        for i, name in enumerate(names):
            if name not in features.features:
                return InputProblem(
                    f"unknown feature {name!r} (not in {features.file})."
                    + did_you_mean(name, features.features),
                    f"model.inputs.{group}[{i}]",
                )
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            return InputProblem(
                f"lists feature(s) {repeated} more than once", f"model.inputs.{group}"
            )
    return None


def _label_problem(
    spec: RegisteredModel, features: FeatureConfig, labels: list[str]
) -> InputProblem | None:
    if not labels:
        return InputProblem("a model needs at least one label; got none", "model.labels")
    for i, label in enumerate(labels):
        if label not in features.labels:
            return InputProblem(
                f"unknown label {label!r}; {features.file} defines "
                + ", ".join(features.labels)
                + "."
                + did_you_mean(label, features.labels),
                f"model.labels[{i}]",
            )
    if len(set(labels)) != len(labels):
        return InputProblem(f"labels {labels} name a label more than once", "model.labels")
    too_few = spec.too_few_labels(labels)
    return InputProblem(too_few, "model.labels") if too_few is not None else None


def _sequence_problem(
    spec: RegisteredModel, features: FeatureConfig, inputs: dict[str, list[str]]
) -> InputProblem | None:
    """A model registered with ``needs_sequence`` needs a feature of kind ``sequence``
    among its inputs."""
    names = list(dict.fromkeys(n for group in inputs.values() for n in group))
    if not spec.needs_sequence or any(features.features[n].is_sequence for n in names):
        return None
    return InputProblem(
        f"model {spec.name!r} reads a behaviour sequence; its inputs hold no "
        f"feature of kind: sequence (features: {', '.join(names)})"
    )


def one_dim_problem(model: str, features: FeatureConfig, names: list[str]) -> InputProblem | None:
    """The tables of ``names`` must exist and share one dim (a model that interacts the
    embeddings pairwise: ``common_dim`` in ``models/zoo/ranking_model.py``)."""
    dims = {
        t: features.tables[t].dim
        for t in (features.features[n].table_name for n in names)
        if t is not None
    }
    if not dims:
        return InputProblem(
            f"model {model!r} needs at least one id-valued feature (categorical, cross, "
            f"multi_categorical, sequence or bucketized numeric); got only {names}"
        )
    if len(set(dims.values())) > 1:
        listing = ", ".join(f"{t!r} (dim {d})" for t, d in dims.items())
        return InputProblem(
            f"model {model!r} needs one embedding dim for all its tables; got {listing}. "
            f"Give these tables the same 'dim' in {features.file}"
        )
    return None


def history_problem(model: str, features: FeatureConfig, names: list[str]) -> InputProblem | None:
    """A model that compares histories with their candidates (``din``, ``bst``) needs,
    among ``names``, a feature of kind ``sequence``, a ``target`` for every sequence, and
    each target and each ``side_of`` feature among ``names`` too. ``validate`` asks this
    through the model's params, and ``models/behaviour.py`` when it builds the model."""
    for name in names:
        side_of = getattr(features.features[name], "side_of", None)
        if side_of and side_of not in names:
            return InputProblem(
                f"model {model!r}: sequence {name!r} is side_of {side_of!r}, which is not "
                "among the model's inputs"
            )
    groups = features.sequence_groups(names)
    if not groups:
        return InputProblem(
            f"model {model!r} compares a behaviour sequence with the candidate; its inputs "
            f"{names} hold no feature of kind: sequence"
        )
    for group in groups:
        for sequence, target in zip(group.sequences, group.targets):
            if target is None:
                return InputProblem(
                    f"model {model!r} compares sequence {sequence!r} with its candidate: "
                    f"set features.{sequence}.target in {features.file} to the "
                    "candidate's feature"
                )
            if target not in names:
                return InputProblem(
                    f"model {model!r}: the target {target!r} of sequence {sequence!r} is "
                    f"not among the model's inputs {names}"
                )
    return None
