"""The base of every model of the zoo, and how a registered model finds its class.

Shape letters: B batch size, F number of id-valued (sparse) features in a group, D
embedding dim, T number of labels.

A model is registered once (:func:`~recsys_dist.config.model_registry.register_model`): its
name, params, input groups and class, which is a :class:`RankingModel` given as the class
or as ``"module:Class"``. :func:`model_class` imports the class when the model is built::

    class DCNv2(RankingModel):
        def __init__(self, features, inputs, labels, params=None, seed=0, placement=None): ...
        def compute_logits(self, embedded, features, training=False): ...

    register_model("dcn_v2", params=DCNv2Params, model_class="recsys_dist.models.zoo.dcn_v2:DCNv2")

The helpers below (:func:`common_dim`, :func:`concat_inputs`, :func:`logit_head`) are the
small pieces several models share.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, Mapping
from typing import Any

import tensorflow as tf

from recsys_dist.config.model_inputs import one_dim_problem
from recsys_dist.config.model_registry import (
    MODEL_REGISTRY,
    RegisteredModel,
    registration_of_class,
)
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.blocks import derive_seed, seeded_initializer
from recsys_dist.models.collection import EmbeddedBatch, EmbeddingCollection
from recsys_dist.models.dynamic_table import ModelTables
from recsys_dist.models.embedding import example_features
from recsys_dist.models.sharding import Placement


class RankingModel(tf.keras.Model):
    """Base of the zoo: ``call(features) -> {label: logits [B]}``.

    A subclass is the ``model_class`` of one registration, builds its parts in
    ``__init__`` and implements :meth:`compute_logits`. ``build_model`` checks its inputs
    and labels first (:func:`~recsys_dist.config.model_inputs.model_input_problem`, the
    check ``validate`` runs).

    Every embedding table is built through :attr:`embedding_collection` (one per model,
    placed by the ``placement`` the model is built with), which :meth:`call` looks up
    once per batch and hands to :meth:`compute_logits` as one view per group
    (:class:`~recsys_dist.models.collection.EmbeddedBatch`). A subclass keeps each group
    it builds in an attribute (where checkpoints save it). The tables' weights, the
    per-id weights of linear parts included, are :attr:`embedding_variables`;
    everything else trainable is :attr:`dense_variables`. The two lists partition
    ``trainable_variables``, so each can have its own optimizer (e.g. Adagrad or FTRL
    for the tables, Adam for the towers).

    Args:
      features: The feature config.
      inputs: Input group -> feature names; holds the model's groups.
      labels: Labels to predict, T of them.
      placement: Where the tables live and each dynamic table's shard count (default:
        this process, one shard).

    Raises:
      ValueError: The class is the class of no registered model.
    """

    def __init__(
        self,
        features: FeatureConfig,
        inputs: dict[str, list[str]],
        labels: list[str],
        placement: Placement | None = None,
    ):
        spec = self.registration()
        super().__init__(name=spec.name)
        self.feature_config = features
        self.input_groups = {g: list(inputs[g]) for g in spec.input_groups}
        self.label_names = list(labels)
        self.embedding_collection = EmbeddingCollection(features, placement)

    @classmethod
    def registration(cls) -> RegisteredModel:
        """The registration whose ``model_class`` this class is."""
        return registration_of_class(cls)

    @property
    def model_name(self) -> str:
        """The model's registered name."""
        return self.registration().name

    @property
    def placement(self) -> Placement:
        """The placement the model was built with."""
        return self.embedding_collection.placement

    @property
    def model_tables(self) -> ModelTables:
        """What the model's embedding groups share (placement, dynamic shard group)."""
        return self.embedding_collection.tables

    def call(self, features: dict[str, Any], training: bool = False) -> dict[str, tf.Tensor]:
        features = self.batch_to_look_up(features)
        embedded = self.embedding_collection.lookup(features, bool(training))
        logits = self.compute_logits(embedded, features, training=training)
        return {label: logits[:, i] for i, label in enumerate(self.label_names)}

    def batch_to_look_up(self, features: dict[str, Any]) -> dict[str, Any]:
        """The batch the model looks up: ``features`` itself, unless a subclass keeps
        only part of it (e.g. the history items a search keeps)."""
        return features

    def compute_logits(
        self, embedded: EmbeddedBatch, features: dict[str, Any], training: bool = False
    ) -> tf.Tensor:
        """Returns ``[B, T]`` logits, column t for ``label_names[t]``, from each group's
        lookup of the batch (``embedded[self.<group>]``) and the batch ``features``."""
        raise NotImplementedError

    def create_variables(self) -> None:
        """Creates every variable now by calling the model on a one-row batch of zeros.

        Under ``ParameterServerStrategy`` call this inside ``strategy.scope()`` before
        scheduling any step, so that all variables are placed on the parameter servers
        (tables are already created when the model is constructed; dense layers are
        built here).
        """
        names = list(dict.fromkeys(n for group in self.input_groups.values() for n in group))
        self(example_features(self.feature_config, names), training=False)
        kept = {v.ref() for v in self.trainable_variables}
        for group in self.embedding_collection.groups:
            if any(v.ref() not in kept for v in group.trainable_variables):
                raise TypeError(
                    f"model {self.model_name!r} built the embedding group {group.name!r} "
                    "but keeps it in no attribute, so it would be neither trained nor saved"
                )

    @property
    def embedding_variables(self) -> list[tf.Variable]:
        """Trainable weights of every embedding table (the shards, when partitioned)."""
        return _distinct(v for g in self.embedding_collection.groups for v in g.trainable_variables)

    @property
    def linear_variables(self) -> list[tf.Variable]:
        """The part of :attr:`embedding_variables` that holds per-id weights of linear
        parts: ``train.linear_optimizer`` updates these."""
        collection = self.embedding_collection
        return _distinct(
            v for g in collection.groups if collection.is_linear(g) for v in g.trainable_variables
        )

    @property
    def dynamic_tables(self) -> dict[str, list]:
        """Dynamic table name -> its :class:`DynamicTable` in each group that reads it."""
        return self.embedding_collection.dynamic_tables

    def count_sightings(self, on: bool) -> None:
        """:meth:`DynamicTable.count_sightings` of every dynamic table of every group: on in
        a run's first pass over its rows, off in the passes after it."""
        for tables in self.dynamic_tables.values():
            for table in tables:
                table.count_sightings(on)

    @property
    def dense_variables(self) -> list[tf.Variable]:
        """Every trainable variable that is not in :attr:`embedding_variables`."""
        embedding = {v.ref() for v in self.embedding_variables}
        return [v for v in self.trainable_variables if v.ref() not in embedding]


def _distinct(variables) -> list[tf.Variable]:
    seen: set = set()
    return [v for v in variables if not (v.ref() in seen or seen.add(v.ref()))]


def model_class(spec: RegisteredModel) -> type[RankingModel]:
    """The class of a registration, imported now when it is given as ``"module:Class"``.

    Raises:
      ValueError: The module or the class does not import.
      TypeError: It is not a RankingModel subclass.
    """
    found: Any = spec.model_class
    if isinstance(found, str):
        module, _, qualname = found.partition(":")
        try:
            found = functools.reduce(getattr, qualname.split("."), importlib.import_module(module))
        except (ImportError, AttributeError) as exc:
            raise ValueError(
                f"model {spec.name!r} names class {found!r}, which does not import: {exc}"
            ) from exc
    if not (isinstance(found, type) and issubclass(found, RankingModel)):
        raise TypeError(
            f"model {spec.name!r}: its model_class {spec.class_path!r} is not a "
            "RankingModel subclass"
        )
    return found


class _Models(Mapping[str, type[RankingModel]]):
    """Model name -> model class, for every registered model in registration order; a
    class given as ``"module:Class"`` is imported when it is looked up."""

    def __getitem__(self, name: str) -> type[RankingModel]:
        spec = MODEL_REGISTRY.get(name)
        if spec is None:
            raise KeyError(name)
        return model_class(spec)

    def __contains__(self, name: object) -> bool:
        return name in MODEL_REGISTRY

    def __iter__(self) -> Iterator[str]:
        return iter(list(MODEL_REGISTRY))

    def __len__(self) -> int:
        return len(MODEL_REGISTRY)

    def __repr__(self) -> str:
        return repr({name: spec.class_path for name, spec in MODEL_REGISTRY.items()})


#: Model name -> model class (a view of the registry).
MODELS: Mapping[str, type[RankingModel]] = _Models()


def common_dim(features: FeatureConfig, names: list[str], model: str) -> int:
    """The one embedding dim D shared by the tables of ``names``; raises ValueError with
    the message ``validate`` gives (:func:`recsys_dist.config.model_inputs.one_dim_problem`)."""
    problem = one_dim_problem(model, features, names)
    if problem is not None:
        raise ValueError(problem.message)
    tables = (features.features[n].table_name for n in names)
    return next(features.tables[t].dim for t in tables if t is not None)


def concat_inputs(sparse: dict[str, tf.Tensor], dense: tf.Tensor | None) -> tf.Tensor:
    """``[B, sum(D) + n_dense]``: the sparse embeddings in order, then the dense numerics
    (the two outputs of :class:`FeatureEmbeddings`)."""
    return tf.concat([*sparse.values(), *([] if dense is None else [dense])], axis=1)


def logit_head(num_outputs: int, seed: int, name: str = "head") -> tf.keras.layers.Dense:
    """The final linear layer: ``num_outputs`` logits, its kernel seeded from ``seed``."""
    return tf.keras.layers.Dense(
        num_outputs,
        name=name,
        kernel_initializer=seeded_initializer("glorot_uniform", derive_seed(seed, name)),
    )
