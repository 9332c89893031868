"""The model zoo: CTR / ranking models chosen by name.

Shape letters: B batch size, F number of id-valued (sparse) features in a group, D
embedding dim, T number of labels.

Every model maps a batch (see :mod:`recsys_dist.models.embedding`) to ``{label: [B]}``
logits and predicts every label it is built for. Models without per-task structure
share one representation across labels and end in a linear head with T outputs (the
same as one linear head per label); MMoE has a gate, tower and head per label.

A model is registered once (``register_model`` in ``recsys_dist/config/model_params.py``
for the built-in ones): its name, params, input groups and class, a :class:`RankingModel`
of a module of this package named as ``"module:Class"``. :func:`build_model` imports the
class when it builds the model; :data:`MODELS` maps every registered name to its class.
"""

from __future__ import annotations

from typing import Any

from recsys_dist.config.experiment import ExperimentConfig
from recsys_dist.config.model_inputs import model_input_problem
from recsys_dist.config.model_registry import registered_model
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.dynamic_table import shared_across_layers
from recsys_dist.models.sharding import current_placement, dynamic_table_shards
from recsys_dist.models.zoo.ranking_model import MODELS, RankingModel, model_class

__all__ = ["MODELS", "RankingModel", "build_from_config", "build_model", "model_class"]


def build_model(
    name: str,
    features: FeatureConfig,
    inputs: dict[str, list[str]],
    labels: list[str],
    params: Any = None,
    seed: int = 0,
) -> RankingModel:
    """Builds model ``name`` of the zoo.

    Args:
      name: A registered model (a key of :data:`MODELS`).
      features: The feature config.
      inputs: Input group -> feature names (the groups of its registration).
      labels: Labels the model predicts.
      params: An instance of its registered params class; None uses its defaults.
      seed: Seed of every random initial weight; the same seed builds the same weights.

    Returns:
      The model. Its embedding tables exist already; call
      :meth:`RankingModel.create_variables` to build the rest.

    Example:
      >>> model = build_model("dcn_v2", feature_config, {"deep": ["C1", "C2", "I1"]}, ["click"])
      >>> model.create_variables()          # under strategy.scope() on a cluster
      >>> model(batch)["click"].shape
      TensorShape([512])

    Raises:
      ValueError: Unknown model name, a class that does not import, or inputs, labels
        or params the model cannot use (the check ``validate`` runs:
        :func:`~recsys_dist.config.model_inputs.model_input_problem`).
      TypeError: ``params`` is not the model's params class.
    """
    spec = registered_model(name)
    cls = model_class(spec)
    if params is None:
        params = spec.params()
    if not isinstance(params, spec.params):
        raise TypeError(
            f"model {name!r} takes {spec.params.__name__} params, got {type(params).__name__}"
        )
    problem = model_input_problem(spec, params, features, inputs, list(labels))
    if problem is not None:
        raise ValueError(problem.message)
    # One shard group for all the model's dynamic tables, and one id index per table for
    # every layer that reads it: a step resolves each id of every layer (e.g. the wide
    # part and the tower) once, in one admission per server.
    with shared_across_layers():
        return cls(features, inputs, labels, params=params, seed=seed)


def build_from_config(config: ExperimentConfig, dynamic_shards: int | None = None) -> RankingModel:
    """Builds the experiment's model with all its variables, seeded by ``train.seed``.

    The variables go where the placement in force puts them (``models/sharding.py``;
    build under ``cluster.placement.building_under(strategy)`` on a cluster).

    Args:
      config: The experiment config (its features, inputs, labels, model and seed).
      dynamic_shards: Shards of each dynamic table. To restore a checkpoint, the count it
        was saved with (:func:`~recsys_dist.checkpoint.signature.saved_dynamic_shards`),
        whatever the number of parameter servers now; by default one per parameter
        server of the placement, else 1.
    """
    shards = dynamic_shards or current_placement().server_count() or 1
    with dynamic_table_shards(shards):
        model = build_model(
            config.model.name,
            config.features,
            config.inputs,
            config.labels,
            config.model.params,
            seed=config.train.seed,
        )
    model.create_variables()
    return model
