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
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo.ranking_model import MODELS, RankingModel, model_class

__all__ = ["MODELS", "RankingModel", "build_from_config", "build_model", "model_class"]


def build_model(
    name: str,
    features: FeatureConfig,
    inputs: dict[str, list[str]],
    labels: list[str],
    params: Any = None,
    seed: int = 0,
    placement: Placement | None = None,
) -> RankingModel:
    """Builds model ``name`` of the zoo.

    Args:
      name: A registered model (a key of :data:`MODELS`).
      features: The feature config.
      inputs: Input group -> feature names (the groups of its registration).
      labels: Labels the model predicts.
      params: An instance of its registered params class; None uses its defaults.
      seed: Seed of every random initial weight; the same seed builds the same weights.
      placement: Where the tables live and each dynamic table's shard count (default:
        this process, one shard); under a distribution strategy the caller's
        (``cluster.placement.placement_for``), built inside ``strategy.scope()``.

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
    return cls(features, inputs, labels, params=params, seed=seed, placement=placement)


def build_from_config(config: ExperimentConfig, placement: Placement | None = None) -> RankingModel:
    """Builds the experiment's model with all its variables, seeded by ``train.seed``.

    Args:
      config: The experiment config (its features, inputs, labels, model and seed).
      placement: Where the variables go (default: this process). On a cluster the
        strategy's (``cluster.placement.placement_for``), and build inside
        ``strategy.scope()``. Its ``dynamic_shards``: to restore a checkpoint, the count
        it was saved with (:func:`~recsys_dist.checkpoint.signature.saved_dynamic_shards`),
        whatever the number of parameter servers now.
    """
    model = build_model(
        config.model.name,
        config.features,
        config.inputs,
        config.labels,
        config.model.params,
        seed=config.train.seed,
        placement=placement,
    )
    model.create_variables()
    return model
