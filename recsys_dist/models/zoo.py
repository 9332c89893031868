"""The model zoo: CTR / ranking models chosen by name.

Shape letters: B batch size, F number of id-valued (sparse) features in a group, D
embedding dim, T number of labels.

Every model maps a batch (see :mod:`recsys_dist.models.embedding`) to ``{label: [B]}``
logits and predicts every label it is built for. Models without per-task structure
share one representation across labels and end in a linear head with T outputs (the
same as one linear head per label); MMoE has a gate, tower and head per label.

Each model reads the input groups :data:`~recsys_dist.config.experiment.MODEL_INPUT_GROUPS`
names (``inputs`` maps group -> feature names) and takes the hyper-parameter dataclass
:data:`~recsys_dist.config.model_params.MODEL_PARAMS` names.

Example:
  >>> model = build_model("dcn_v2", feature_config, {"deep": ["C1", "C2", "I1"]}, ["click"])
  >>> model.create_variables()          # under strategy.scope() on a cluster
  >>> model(batch)["click"].shape
  TensorShape([512])
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from recsys_dist.config.experiment import MODEL_INPUT_GROUPS, ExperimentConfig
from recsys_dist.config.features import FeatureConfig
from recsys_dist.config.model_params import (
    MODEL_PARAMS,
    DCNv2Params,
    DeepFMParams,
    DLRMParams,
    LRParams,
    MMoEParams,
    WideDeepParams,
)
from recsys_dist.config.schema import did_you_mean
from recsys_dist.models.blocks import (
    MLP,
    CrossNetwork,
    DotInteraction,
    FactorizationMachine,
    MixtureOfExperts,
    derive_seed,
    seeded_initializer,
)
from recsys_dist.models.dynamic_table import parameter_server_count, shared_across_layers
from recsys_dist.models.embedding import (
    FeatureEmbeddings,
    FeatureLinear,
    check_feature_names,
    dynamic_tables_resolved_together,
    example_features,
    table_of,
)
from recsys_dist.models.sharding import dynamic_table_shards


class RankingModel(tf.keras.Model):
    """Base of the zoo: ``call(features) -> {label: logits [B]}``.

    A subclass sets ``model_name`` (its key in ``MODEL_INPUT_GROUPS``), builds its parts
    in ``__init__`` and implements :meth:`compute_logits`.

    Embedding tables (every :class:`FeatureEmbeddings` inside the model, including the
    per-id weights of linear parts) are :attr:`embedding_variables`; everything else
    trainable is :attr:`dense_variables`. The two lists partition
    ``trainable_variables``, so each can have its own optimizer (e.g. Adagrad or FTRL
    for the tables, Adam for the towers).

    Args:
      features: The feature config.
      inputs: Input group -> feature names; must hold exactly the model's groups.
      labels: Labels to predict, T of them.

    Raises:
      ValueError: Missing or unknown input groups, bad feature names, bad labels.
    """

    model_name: str = ""

    def __init__(self, features: FeatureConfig, inputs: dict[str, list[str]],
                 labels: list[str]):
        super().__init__(name=self.model_name)
        groups = MODEL_INPUT_GROUPS[self.model_name]
        missing = [g for g in groups if g not in inputs]
        unknown = [g for g in inputs if g not in groups]
        if missing or unknown:
            raise ValueError(f"model {self.model_name!r} reads input group(s) "
                             + ", ".join(groups) + f"; got {sorted(inputs)}")
        for group in groups:
            check_feature_names(features, list(inputs[group]))
        _check_labels(features, labels)
        self.feature_config = features
        self.input_groups = {g: list(inputs[g]) for g in groups}
        self.label_names = list(labels)

    def call(self, features: dict[str, Any], training: bool = False) -> dict[str, tf.Tensor]:
        layers = [m for m in self._flatten_modules(include_self=False)
                  if isinstance(m, FeatureEmbeddings)]
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
        linear = {v.ref() for module in self.submodules if isinstance(module, FeatureLinear)
                  for v in module.embeddings.trainable_variables}
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
            raise ValueError(f"unknown label {label!r}; {features.file} defines "
                             + ", ".join(features.labels) + "."
                             + did_you_mean(label, features.labels))
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels {labels} name a label more than once")


def _common_dim(features: FeatureConfig, names: list[str], model: str) -> int:
    """The one embedding dim D shared by the tables of ``names``; raises ValueError."""
    dims = {t: features.tables[t].dim
            for t in (table_of(features.features[n]) for n in names) if t is not None}
    if not dims:
        raise ValueError(f"model {model!r} needs at least one id-valued feature (categorical, "
                         f"cross, multi_categorical or bucketized numeric); got only {names}")
    if len(set(dims.values())) > 1:
        listing = ", ".join(f"{t!r} (dim {d})" for t, d in dims.items())
        raise ValueError(f"model {model!r} needs one embedding dim for all its tables; got "
                         f"{listing}. Give these tables the same 'dim' in {features.file}")
    return next(iter(dims.values()))


def _concat(sparse: dict[str, tf.Tensor], dense: tf.Tensor | None) -> tf.Tensor:
    """``[B, sum(D) + n_dense]``: the sparse embeddings in order, then the dense numerics."""
    return tf.concat([*sparse.values(), *([] if dense is None else [dense])], axis=1)


def _head(num_outputs: int, seed: int, name: str = "head") -> tf.keras.layers.Dense:
    return tf.keras.layers.Dense(
        num_outputs, name=name,
        kernel_initializer=seeded_initializer("glorot_uniform", derive_seed(seed, name)))


class LogisticRegression(RankingModel):
    """Logistic regression: per label t, ``sum_f w_t[id_f] + w_t . dense + b_t``.

    Input groups: ``wide``. All weights start at zero.

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`LRParams` (no fields).
      seed: Unused; nothing is random.
    """

    model_name = "lr"

    def __init__(self, features: FeatureConfig, inputs: dict[str, list[str]],
                 labels: list[str], params: LRParams | None = None, seed: int = 0):
        super().__init__(features, inputs, labels)
        del params, seed  # no hyper-parameters; every weight starts at zero
        self.linear = FeatureLinear(features, inputs["wide"], len(labels), name="linear")

    def compute_logits(self, features: dict[str, Any], training: bool = False) -> tf.Tensor:
        return self.linear(features, training=training)


class WideDeep(RankingModel):
    """Wide & Deep: ``linear(wide) + head(MLP(concat(embeddings, dense)))``.

    Input groups: ``wide`` (linear part) and ``deep`` (tower).

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`WideDeepParams`.
      seed: Seed of every random initial weight.
    """

    model_name = "wide_deep"

    def __init__(self, features: FeatureConfig, inputs: dict[str, list[str]],
                 labels: list[str], params: WideDeepParams | None = None, seed: int = 0):
        super().__init__(features, inputs, labels)
        params = params or WideDeepParams()
        self.wide = FeatureLinear(features, inputs["wide"], len(labels), name="wide")
        self.embeddings = FeatureEmbeddings(features, inputs["deep"], name="deep_embeddings",
                                            seed=derive_seed(seed, "embeddings"))
        self.deep = MLP(params.hidden_units, dropout=params.dropout,
                        batch_norm=params.batch_norm, seed=derive_seed(seed, "deep"),
                        name="deep")
        self.head = _head(len(labels), seed)

    def compute_logits(self, features: dict[str, Any], training: bool = False) -> tf.Tensor:
        deep = self.deep(_concat(*self.embeddings(features, training=training)), training=training)
        return self.wide(features, training=training) + self.head(deep)


class DeepFM(RankingModel):
    """DeepFM: ``linear + FM(embeddings) + head(MLP(concat(embeddings, dense)))``.

    The FM's second-order term over the F sparse embeddings ``[B, F, D]`` has no weights
    of its own, so it is the same for every label; linear part and head are per label.

    Input groups: ``deep``. All tables must share one dim D.

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`DeepFMParams`.
      seed: Seed of every random initial weight.

    Raises:
      ValueError: The tables have different dims, or there is no id-valued feature.
    """

    model_name = "deepfm"

    def __init__(self, features: FeatureConfig, inputs: dict[str, list[str]],
                 labels: list[str], params: DeepFMParams | None = None, seed: int = 0):
        super().__init__(features, inputs, labels)
        params = params or DeepFMParams()
        _common_dim(features, inputs["deep"], self.model_name)
        self.embeddings = FeatureEmbeddings(features, inputs["deep"], name="embeddings",
                                            seed=derive_seed(seed, "embeddings"))
        self.linear = FeatureLinear(features, inputs["deep"], len(labels), name="linear")
        self.fm = FactorizationMachine(name="fm")
        self.deep = MLP(params.hidden_units, dropout=params.dropout,
                        batch_norm=params.batch_norm, seed=derive_seed(seed, "deep"),
                        name="deep")
        self.head = _head(len(labels), seed)

    def compute_logits(self, features: dict[str, Any], training: bool = False) -> tf.Tensor:
        sparse, dense = self.embeddings(features, training=training)
        fm = self.fm(tf.stack(list(sparse.values()), axis=1))  # [B]
        deep = self.deep(_concat(sparse, dense), training=training)
        return self.linear(features, training=training) + fm[:, None] + self.head(deep)


class DCNv2(RankingModel):
    """DCN-v2: ``x0 = concat(embeddings, dense)``, a cross network and an MLP, a head.

    ``stacked``: ``head(MLP(cross(x0)))``; ``parallel``: ``head(concat(cross(x0),
    MLP(x0)))``.

    Input groups: ``deep``.

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`DCNv2Params`.
      seed: Seed of every random initial weight.
    """

    model_name = "dcn_v2"

    def __init__(self, features: FeatureConfig, inputs: dict[str, list[str]],
                 labels: list[str], params: DCNv2Params | None = None, seed: int = 0):
        super().__init__(features, inputs, labels)
        params = params or DCNv2Params()
        self.structure = params.structure
        self.embeddings = FeatureEmbeddings(features, inputs["deep"], name="embeddings",
                                            seed=derive_seed(seed, "embeddings"))
        self.cross = CrossNetwork(params.cross_layers, params.low_rank,
                                  seed=derive_seed(seed, "cross"), name="cross")
        self.deep = MLP(params.hidden_units, dropout=params.dropout,
                        batch_norm=params.batch_norm, seed=derive_seed(seed, "deep"),
                        name="deep")
        self.head = _head(len(labels), seed)

    def compute_logits(self, features: dict[str, Any], training: bool = False) -> tf.Tensor:
        x0 = _concat(*self.embeddings(features, training=training))
        if self.structure == "stacked":
            hidden = self.deep(self.cross(x0), training=training)
        else:
            hidden = tf.concat([self.cross(x0), self.deep(x0, training=training)], axis=1)
        return self.head(hidden)


class DLRM(RankingModel):
    """DLRM (TorchRec's layout: sparse, dense, interaction and over arches).

    The bottom MLP maps the dense numerics to ``[B, D]``; DotInteraction takes the
    pairwise dot products of that vector and the F embeddings (``[B, F + 1, D]``); the
    top MLP reads ``concat(bottom, interactions)`` and a head gives the logits.

    Input groups: ``deep``, with at least one dense numeric feature. All tables must
    share one dim D.

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`DLRMParams`.
      seed: Seed of every random initial weight.

    Raises:
      ValueError: The tables have different dims, or the group lacks id-valued or
        dense numeric features.
    """

    model_name = "dlrm"

    def __init__(self, features: FeatureConfig, inputs: dict[str, list[str]],
                 labels: list[str], params: DLRMParams | None = None, seed: int = 0):
        super().__init__(features, inputs, labels)
        params = params or DLRMParams()
        dim = _common_dim(features, inputs["deep"], self.model_name)
        if all(table_of(features.features[n]) is not None for n in inputs["deep"]):
            raise ValueError(f"model 'dlrm' needs at least one dense numeric feature (numeric "
                             f"without transform 'bucketize') for its bottom MLP; got only "
                             f"id-valued features {inputs['deep']}")
        self.embeddings = FeatureEmbeddings(features, inputs["deep"], name="embeddings",
                                            seed=derive_seed(seed, "embeddings"))
        self.bottom = MLP([*params.bottom_units, dim], batch_norm=params.batch_norm,
                          seed=derive_seed(seed, "bottom"), name="bottom")
        self.interaction = DotInteraction(params.self_interaction, name="interaction")
        self.top = MLP(params.top_units, dropout=params.dropout, batch_norm=params.batch_norm,
                       seed=derive_seed(seed, "top"), name="top")
        self.head = _head(len(labels), seed)

    def compute_logits(self, features: dict[str, Any], training: bool = False) -> tf.Tensor:
        sparse, dense = self.embeddings(features, training=training)
        bottom = self.bottom(dense, training=training)  # [B, D]
        interactions = self.interaction(tf.stack([bottom, *sparse.values()], axis=1))
        return self.head(self.top(tf.concat([bottom, interactions], axis=1), training=training))


class MMoE(RankingModel):
    """MMoE: shared ``concat(embeddings, dense)``, experts mixed by one gate per label, then
    one tower MLP and head per label.

    Input groups: ``deep``. Needs at least 2 labels.

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`MMoEParams`.
      seed: Seed of every random initial weight.

    Raises:
      ValueError: Fewer than 2 labels.
    """

    model_name = "mmoe"

    def __init__(self, features: FeatureConfig, inputs: dict[str, list[str]],
                 labels: list[str], params: MMoEParams | None = None, seed: int = 0):
        super().__init__(features, inputs, labels)
        if len(labels) < 2:
            raise ValueError(f"model 'mmoe' is multi-task; it needs at least 2 labels, got "
                             f"{list(labels)}")
        params = params or MMoEParams()
        self.embeddings = FeatureEmbeddings(features, inputs["deep"], name="embeddings",
                                            seed=derive_seed(seed, "embeddings"))
        self.experts = MixtureOfExperts(params.num_experts, params.expert_units, len(labels),
                                        dropout=params.dropout, batch_norm=params.batch_norm,
                                        seed=derive_seed(seed, "experts"), name="experts")
        self.towers = [MLP(params.tower_units, dropout=params.dropout,
                           batch_norm=params.batch_norm, seed=derive_seed(seed, "tower", t),
                           name=f"tower_{t}") for t in range(len(labels))]
        self.heads = [_head(1, seed, name=f"head_{t}") for t in range(len(labels))]

    def compute_logits(self, features: dict[str, Any], training: bool = False) -> tf.Tensor:
        inputs = _concat(*self.embeddings(features, training=training))
        mixed = self.experts(inputs, training=training)
        return tf.concat([head(tower(x, training=training))
                          for x, tower, head in zip(mixed, self.towers, self.heads)], axis=1)


#: Model name -> model class.
MODELS: dict[str, type[RankingModel]] = {
    cls.model_name: cls for cls in (LogisticRegression, WideDeep, DeepFM, DCNv2, DLRM, MMoE)}


def build_model(name: str, features: FeatureConfig, inputs: dict[str, list[str]],
                labels: list[str], params: Any = None, seed: int = 0) -> RankingModel:
    """Builds model ``name`` of the zoo.

    Args:
      name: A key of :data:`MODELS`.
      features: The feature config.
      inputs: Input group -> feature names (groups as in ``MODEL_INPUT_GROUPS[name]``).
      labels: Labels the model predicts.
      params: An instance of ``MODEL_PARAMS[name]``; None uses its defaults.
      seed: Seed of every random initial weight; the same seed builds the same weights.

    Returns:
      The model. Its embedding tables exist already; call
      :meth:`RankingModel.create_variables` to build the rest.

    Raises:
      ValueError: Unknown model name, or inputs/labels the model cannot use.
      TypeError: ``params`` is not the model's params class.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; the zoo has " + ", ".join(MODELS) + "."
                         + did_you_mean(name, MODELS))
    params_class = MODEL_PARAMS[name]
    if params is None:
        params = params_class()
    if not isinstance(params, params_class):
        raise TypeError(f"model {name!r} takes {params_class.__name__} params, got "
                        f"{type(params).__name__}")
    # One shard group for all the model's dynamic tables, and one id index per table for
    # every layer that reads it: a step resolves each id of every layer (e.g. the wide
    # part and the tower) once, in one admission per server.
    with shared_across_layers():
        return MODELS[name](features, inputs, labels, params=params, seed=seed)


def build_from_config(config: ExperimentConfig, dynamic_shards: int | None = None
                      ) -> RankingModel:
    """Builds the experiment's model with all its variables, seeded by ``train.seed``.

    Under a strategy's ``scope()`` the variables are created where the strategy puts
    them (the tables sharded over the parameter servers).

    Args:
      config: The experiment config.
      dynamic_shards: Shards of each dynamic table. To restore a checkpoint, the count it
        was saved with (:func:`~recsys_dist.checkpoint.store.saved_dynamic_shards`),
        whatever the number of parameter servers now; by default
        :func:`default_dynamic_shards`.
    """
    with dynamic_table_shards(dynamic_shards or default_dynamic_shards(config)):
        model = build_model(config.model.name, config.features, config.inputs, config.labels,
                            config.model.params, seed=config.train.seed)
    model.create_variables()
    return model


def default_dynamic_shards(config: ExperimentConfig) -> int:
    """The shards a new run gives each dynamic table: one per parameter server of the
    ``ParameterServerStrategy`` in scope (``cluster.ps``, or the ``TF_CONFIG``'s ps
    tasks), else ``cluster.ps``."""
    return parameter_server_count() or config.cluster.ps
