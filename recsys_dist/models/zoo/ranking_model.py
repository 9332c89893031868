"""The base of every model of the zoo, and how a model class joins it.

Shape letters: B batch size, F number of id-valued (sparse) features in a group, D
embedding dim, T number of labels.

A model is registered once, on its params dataclass (``@register_model`` in
``recsys_dist/config/model_params.py``, or in any module for a model of one's own); its
class is bound to that registration with ``@zoo_model(ParamsClass)``, which sets the
class's ``model_name`` and adds it to :data:`MODELS`::

    @zoo_model(DCNv2Params)
    class DCNv2(RankingModel):
        def __init__(self, features, inputs, labels, params=None, seed=0, placement=None): ...
        def compute_logits(self, features, training=False): ...

The helpers below (:func:`common_dim`, :func:`concat_inputs`, :func:`logit_head`) are the
small pieces several models share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import tensorflow as tf

from recsys_dist.config.model_params import one_dim_problem
from recsys_dist.config.model_registry import (
    MODEL_REGISTRY,
    RegisteredModel,
    registered_model,
    registration_of,
)
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.blocks import derive_seed, seeded_initializer
from recsys_dist.models.dynamic_table import ModelTables
from recsys_dist.models.embedding import (
    FeatureEmbeddings,
    FeatureLinear,
    check_feature_names,
    dynamic_tables_resolved_together,
    example_features,
)
from recsys_dist.models.sharding import Placement
from recsys_dist.yaml_schema import did_you_mean


class RankingModel(tf.keras.Model):
    """Base of the zoo: ``call(features) -> {label: logits [B]}``.

    A subclass is bound to its registration with ``@zoo_model(ParamsClass)`` (which sets
    ``model_name`` and ``params_class``), builds its parts in ``__init__`` and implements
    :meth:`compute_logits`. The input groups and the fewest labels come from the
    registration and are checked here.

    Embedding tables (every :class:`FeatureEmbeddings` inside the model, including the
    per-id weights of linear parts) are :attr:`embedding_variables`; everything else
    trainable is :attr:`dense_variables`. The two lists partition
    ``trainable_variables``, so each can have its own optimizer (e.g. Adagrad or FTRL
    for the tables, Adam for the towers).

    Where the tables live is the ``placement`` the model is built with: a subclass passes
    :attr:`model_tables` (the placement, and what its layers' dynamic tables share) to
    every embedding layer it builds.

    Args:
      features: The feature config.
      inputs: Input group -> feature names; must hold exactly the model's groups.
      labels: Labels to predict, T of them.
      placement: Where the tables live and each dynamic table's shard count (default:
        this process, one shard).

    Raises:
      ValueError: Missing or unknown input groups, bad feature names, bad or too few
        labels, or a class bound to no registered model.
    """

    model_name: str = ""
    params_class: type | None = None

    def __init__(
        self,
        features: FeatureConfig,
        inputs: dict[str, list[str]],
        labels: list[str],
        placement: Placement | None = None,
    ):
        spec = self.registration()
        super().__init__(name=spec.name)
        groups = spec.input_groups
        missing = [g for g in groups if g not in inputs]
        unknown = [g for g in inputs if g not in groups]
        if missing or unknown:
            raise ValueError(
                f"model {spec.name!r} reads input group(s) "
                + ", ".join(groups)
                + f"; got {sorted(inputs)}"
            )
        for group in groups:
            check_feature_names(features, list(inputs[group]))
        _check_labels(features, labels)
        too_few = spec.too_few_labels(labels)
        if too_few is not None:
            raise ValueError(too_few)
        self.feature_config = features
        self.input_groups = {g: list(inputs[g]) for g in groups}
        self.label_names = list(labels)
        self.model_tables = ModelTables(placement)

    @classmethod
    def registration(cls) -> RegisteredModel:
        """The registration this class is bound to (``@zoo_model``)."""
        if not cls.model_name:
            raise ValueError(
                f"{cls.__qualname__} is bound to no registered model; decorate "
                "it with @zoo_model(ParamsClass)"
            )
        return registered_model(cls.model_name)

    @property
    def placement(self) -> Placement:
        """The placement the model was built with."""
        return self.model_tables.placement

    def call(self, features: dict[str, Any], training: bool = False) -> dict[str, tf.Tensor]:
        layers = [
            m for m in self._flatten_modules(include_self=False) if isinstance(m, FeatureEmbeddings)
        ]
        with dynamic_tables_resolved_together(layers, features, bool(training)):
            logits = self.compute_logits(features, training=training)
        return {label: logits[:, i] for i, label in enumerate(self.label_names)}

    def compute_logits(self, features: dict[str, Any], training: bool = False) -> tf.Tensor:
        """Returns ``[B, T]`` logits, column t for ``label_names[t]``."""
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

    @property
    def embedding_variables(self) -> list[tf.Variable]:
        """Trainable weights of every embedding table (the shards, when partitioned)."""
        seen: set = set()
        out = []
        for module in self.submodules:
            if isinstance(module, FeatureEmbeddings):
                for variable in module.trainable_variables:
                    if variable.ref() not in seen:
                        seen.add(variable.ref())
                        out.append(variable)
        return out

    @property
    def linear_variables(self) -> list[tf.Variable]:
        """The part of :attr:`embedding_variables` that holds per-id weights of linear
        parts (:class:`FeatureLinear`): ``train.linear_optimizer`` updates these."""
        linear = {
            v.ref()
            for module in self.submodules
            if isinstance(module, FeatureLinear)
            for v in module.embeddings.trainable_variables
        }
        return [v for v in self.embedding_variables if v.ref() in linear]

    @property
    def dynamic_tables(self) -> dict[str, list]:
        """Dynamic table name -> its :class:`DynamicTable` in each layer that reads it."""
        found: dict[str, list] = {}
        for module in self.submodules:
            if isinstance(module, FeatureEmbeddings):
                for name, table in module.dynamic_tables.items():
                    found.setdefault(name, []).append(table)
        return found

    def count_sightings(self, on: bool) -> None:
        """:meth:`DynamicTable.count_sightings` of every dynamic table of every layer: on in
        a run's first pass over its rows, off in the passes after it."""
        for tables in self.dynamic_tables.values():
            for table in tables:
                table.count_sightings(on)

    @property
    def dense_variables(self) -> list[tf.Variable]:
        """Every trainable variable that is not in :attr:`embedding_variables`."""
        embedding = {v.ref() for v in self.embedding_variables}
        return [v for v in self.trainable_variables if v.ref() not in embedding]


def _check_labels(features: FeatureConfig, labels: list[str]) -> None:
    if not labels:
        raise ValueError("a model needs at least one label; got none")
    for label in labels:
        if label not in features.labels:
            raise ValueError(
                f"unknown label {label!r}; {features.file} defines "
                + ", ".join(features.labels)
                + "."
                + did_you_mean(label, features.labels)
            )
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels {labels} name a label more than once")


#: Params class -> the model class bound to it by ``@zoo_model``.
_CLASSES: dict[type, type[RankingModel]] = {}

_Model = TypeVar("_Model", bound=type[RankingModel])


def zoo_model(params_class: type) -> Callable[[_Model], _Model]:
    """Binds the decorated :class:`RankingModel` subclass to the model registered on
    ``params_class``: sets its ``model_name`` and ``params_class`` and adds it to
    :data:`MODELS`. Returns the class.

    Raises:
      ValueError: ``params_class`` is not registered, or its model has a class already.
      TypeError: The decorated class is not a RankingModel.
    """
    spec = registration_of(params_class)

    def bind(cls: _Model) -> _Model:
        if not (isinstance(cls, type) and issubclass(cls, RankingModel)):
            raise TypeError(
                f"@zoo_model({params_class.__qualname__}) decorates a "
                f"RankingModel subclass; got {cls!r}"
            )
        bound = _CLASSES.get(params_class)
        if bound is not None and bound is not cls:
            raise ValueError(f"model {spec.name!r} has a class already: {bound.__qualname__}")
        cls.model_name, cls.params_class = spec.name, params_class
        _CLASSES[params_class] = cls
        return cls

    return bind


def model_class(spec: RegisteredModel) -> type[RankingModel]:
    """The model class bound to a registration.

    Raises:
      ValueError: No class is bound to it (the module defining the class was not imported).
    """
    cls = _CLASSES.get(spec.params)
    if cls is None:
        name = spec.params.__qualname__
        raise ValueError(
            f"model {spec.name!r} is registered (params {name}) but has no model "
            f"class: import the module that defines its RankingModel, decorated "
            f"with @zoo_model({name}), before building it"
        )
    return cls


class _Models(Mapping[str, type[RankingModel]]):
    """Model name -> model class, for every registered model whose class is bound, in
    registration order; always current with the registry."""

    def __getitem__(self, name: str) -> type[RankingModel]:
        spec = MODEL_REGISTRY.get(name)
        if spec is None or spec.params not in _CLASSES:
            raise KeyError(name)
        return _CLASSES[spec.params]

    def __iter__(self) -> Iterator[str]:
        return iter([n for n, spec in MODEL_REGISTRY.items() if spec.params in _CLASSES])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(dict(self))


#: Model name -> model class (a view of the registry and the bound classes).
MODELS: Mapping[str, type[RankingModel]] = _Models()


def common_dim(features: FeatureConfig, names: list[str], model: str) -> int:
    """The one embedding dim D shared by the tables of ``names``; raises ValueError with
    the message ``validate`` gives (:func:`recsys_dist.config.model_params.one_dim_problem`)."""
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
