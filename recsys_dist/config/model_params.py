"""The built-in models: each one's hyper-parameters as a frozen dataclass and its one
:func:`~recsys_dist.config.model_registry.register_model` call, which names its class in
``recsys_dist/models/zoo/`` (imported when the model is built). The first line of a params
class's docstring is the model's summary in docs/config.md.

The classes parse from YAML with :func:`recsys_dist.yaml_schema.parse_dataclass`, which
checks the ``"min"``, ``"max"``, ``"min_items"`` and ``"item_min"`` metadata with file and
line; one built in Python is checked by the same rules (:class:`ModelParams`)::

    params = parse_dataclass(MODEL_PARAMS["dcn_v2"], {"cross_layers": 2}, doc, "model.params")
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, ClassVar, Literal

from recsys_dist.config.model_inputs import InputProblem, history_problem, one_dim_problem
from recsys_dist.config.model_registry import MODEL_PARAMS as MODEL_PARAMS  # re-exported
from recsys_dist.config.model_registry import register_model
from recsys_dist.features.config import FeatureConfig
from recsys_dist.yaml_schema import check_fields

_UNITS = {"min_items": 1, "item_min": 1}
_DROPOUT = {"min": 0.0, "max": 0.99}
_ZOO = "recsys_dist.models.zoo"


def _units(*default: int, min_items: int = 1) -> Any:
    return field(default_factory=lambda: list(default), metadata={**_UNITS, "min_items": min_items})


#: The largest default learning rate of linear weights (TensorFlow's canned linear
#: estimators cap theirs at 0.2).
LINEAR_RATE_CAP = 0.5


def default_linear_learning_rate(num_features: int) -> float:
    """The default learning rate of per-id linear weights fed by ``num_features``
    features: ``min(0.5, 1 / sqrt(num_features))``, the rule of TensorFlow's canned
    ``LinearClassifier`` (and of ``DNNLinearCombinedClassifier``'s linear part) with its
    cap raised from 0.2 to 0.5.

    Each feature adds one weight to the logit, and a per-coordinate (Adagrad) step moves
    each weight by about the rate, so the logit moves by about ``rate * sqrt(F)`` for
    weights moving independently: the rule keeps that step near 1 whatever the number of
    features, and caps the rate for few features. The cap was chosen leaving one public
    dataset out (docs/quality.md): at 0.2, a linear part of a few features stops short of
    the optimum a convex solver reaches.

    Example::

        default_linear_learning_rate(39)  # 0.160...
    """
    return min(LINEAR_RATE_CAP, 1.0 / max(num_features, 1) ** 0.5)


class ModelParams:
    """A base for a model's params dataclass: one built in Python is checked by the
    schema's rules (:func:`~recsys_dist.yaml_schema.check_fields`), as one read from YAML.

    Class attributes (not keys of ``model.params``):
      linear_inputs: The input group whose features feed the model's per-id linear
        weights (``lr``, the wide part of ``wide_deep``, the first-order part of
        ``deepfm``), or None when it has no linear part. The config gives such a model a
        ``train.linear_optimizer`` by default (``config/experiment.py``,
        :func:`default_linear_learning_rate`).
    """

    linear_inputs: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        check_fields(self)

    def input_problem(
        self, model: str, features: FeatureConfig, inputs: dict[str, list[str]]
    ) -> InputProblem | None:
        """What model ``model`` with these params cannot read among ``inputs`` (input
        group -> names of features of ``features``), or None; part of the one check of a
        model's inputs (:func:`~recsys_dist.config.model_inputs.model_input_problem`)."""
        return None


@dataclasses.dataclass(frozen=True)
class LRParams(ModelParams):
    """Logistic regression: a weight per id and per dense value, for each label.

    It has no hyper-parameters beyond its optimizers.
    """

    linear_inputs: ClassVar[str | None] = "wide"


register_model(
    "lr", params=LRParams, model_class=f"{_ZOO}.lr:LogisticRegression", input_groups=("wide",)
)


@dataclasses.dataclass(frozen=True)
class _DeepTowerParams(ModelParams):
    """A deep tower.

    Attributes:
      hidden_units: Widths of the deep tower.
      dropout: Dropout rate in the deep tower.
      batch_norm: Batch norm in the deep tower.
    """

    hidden_units: list[int] = _units(256, 128)
    dropout: float = field(default=0.0, metadata=_DROPOUT)
    batch_norm: bool = False


@dataclasses.dataclass(frozen=True)
class WideDeepParams(_DeepTowerParams):
    """Wide & Deep (Cheng et al., 2016): a linear wide part plus a deep tower.

    Attributes: those of the deep tower.
    """

    linear_inputs: ClassVar[str | None] = "wide"


register_model(
    "wide_deep",
    params=WideDeepParams,
    model_class=f"{_ZOO}.wide_deep:WideDeep",
    input_groups=("wide", "deep"),
)


@dataclasses.dataclass(frozen=True)
class DeepFMParams(_DeepTowerParams):
    """DeepFM (Guo et al., 2017): linear part, factorization machine and deep tower.

    The three share the embeddings. Attributes: those of the deep tower.
    """

    linear_inputs: ClassVar[str | None] = "deep"

    def input_problem(
        self, model: str, features: Any, inputs: dict[str, list[str]]
    ) -> InputProblem | None:
        """Its factorization machine takes dot products: one dim for all tables."""
        return one_dim_problem(model, features, inputs["deep"])


register_model("deepfm", params=DeepFMParams, model_class=f"{_ZOO}.deepfm:DeepFM")


@dataclasses.dataclass(frozen=True)
class DCNv2Params(ModelParams):
    """DCN-v2 (Wang et al., 2021): a cross network and an MLP over the embeddings.

    Attributes:
      cross_layers: Number of cross layers.
      low_rank: Rank of each cross layer's weight matrix; null for full rank.
      structure: ``stacked`` (cross network, then MLP) or ``parallel`` (both on x0,
        outputs concatenated).
      hidden_units: Widths of the MLP.
      dropout: Dropout rate in the MLP.
      batch_norm: Batch norm in the MLP.
    """

    cross_layers: int = field(default=3, metadata={"min": 1, "max": 16})
    low_rank: int | None = field(default=None, metadata={"min": 1})
    structure: Literal["stacked", "parallel"] = "stacked"
    hidden_units: list[int] = _units(256, 128)
    dropout: float = field(default=0.0, metadata=_DROPOUT)
    batch_norm: bool = False


register_model("dcn_v2", params=DCNv2Params, model_class=f"{_ZOO}.dcn_v2:DCNv2")


@dataclasses.dataclass(frozen=True)
class DLRMParams(ModelParams):
    """DLRM (Naumov et al., 2019): bottom MLP, pairwise dot interactions, top MLP.

    Attributes:
      bottom_units: Hidden widths of the bottom MLP over the dense features; a last
        layer of width D (the common embedding dim) is always appended, so this may be
        empty.
      top_units: Widths of the top MLP over the interactions.
      self_interaction: Include each vector's dot product with itself.
      dropout: Dropout rate in the top MLP.
      batch_norm: Batch norm in both MLPs.
    """

    bottom_units: list[int] = _units(64, min_items=0)
    top_units: list[int] = _units(256, 128)
    self_interaction: bool = False
    dropout: float = field(default=0.0, metadata=_DROPOUT)
    batch_norm: bool = False

    def input_problem(
        self, model: str, features: Any, inputs: dict[str, list[str]]
    ) -> InputProblem | None:
        """Dot products need one dim for all tables, the bottom MLP a dense feature."""
        names = inputs["deep"]
        problem = one_dim_problem(model, features, names)
        if problem is None and all(features.features[n].table_name is not None for n in names):
            problem = InputProblem(
                f"model {model!r} needs at least one dense numeric feature (numeric "
                f"without transform 'bucketize') for its bottom MLP; got only "
                f"id-valued features {names}"
            )
        return problem


register_model("dlrm", params=DLRMParams, model_class=f"{_ZOO}.dlrm:DLRM")


@dataclasses.dataclass(frozen=True)
class MMoEParams(ModelParams):
    """MMoE (Ma et al., 2018): shared experts, one gate and one tower per label.

    Attributes:
      num_experts: Number of expert MLPs.
      expert_units: Widths of every expert.
      tower_units: Widths of every label's tower.
      dropout: Dropout rate in experts and towers.
      batch_norm: Batch norm in experts and towers.
    """

    num_experts: int = field(default=4, metadata={"min": 1, "max": 64})
    expert_units: list[int] = _units(128, 64)
    tower_units: list[int] = _units(64)
    dropout: float = field(default=0.0, metadata=_DROPOUT)
    batch_norm: bool = False


register_model("mmoe", params=MMoEParams, model_class=f"{_ZOO}.mmoe:MMoE", min_labels=2)


@dataclasses.dataclass(frozen=True)
class DINParams(ModelParams):
    """DIN (Zhou et al., 2018): each history item weighed by its relevance to the candidate.

    Every history (a ``sequence`` feature with its sides) is compared with its ``target``
    by DIN's activation unit, an MLP over ``[q, k, q - k, q * k]`` at each position; the
    weighted sum of the history, the other embeddings and the dense numerics feed an MLP.

    Attributes:
      attention_units: Widths of the activation unit's hidden layers.
      attention_activation: Activation of the activation unit: ``dice`` (the paper's),
        ``prelu``, ``relu`` or ``sigmoid``.
      attention_normalization: ``none`` (the paper's: the weights keep the intensity of
        the user's interest) or ``softmax`` over the real positions.
      attention_positions: Give the activation unit each position's recency: a learned
        embedding of the position (0 the newest) joins its input, so the weight of an
        item can depend on how recent it is. ``False``: DIN as published, blind to order.
      sequence_pooling: ``attention``; or, as baselines of the same network, ``mean``
        (each history mean-pooled over its real positions) or ``none`` (the histories
        are not read).
      search_by: SIM's hard search for long histories: a sequence of a history (the
        main one or a side, e.g. the categories); only the positions whose id there is
        the candidate's (that sequence's ``target``) are read, the newest
        ``search_top_k`` of them. ``None``: every position up to ``max_length``.
      search_top_k: The most positions the hard search keeps per row.
      hidden_units: Widths of the MLP.
      activation: Activation of the MLP: ``relu``, ``prelu`` or ``dice``.
      dropout: Dropout rate in the MLP.
      batch_norm: Batch norm in the MLP.
    """

    attention_units: list[int] = _units(80, 40)
    attention_activation: Literal["dice", "prelu", "relu", "sigmoid"] = "dice"
    attention_normalization: Literal["none", "softmax"] = "none"
    attention_positions: bool = True
    sequence_pooling: Literal["attention", "mean", "none"] = "attention"
    search_by: str | None = None
    search_top_k: int = field(default=50, metadata={"min": 1})
    hidden_units: list[int] = _units(256, 128, 64)
    activation: Literal["relu", "prelu", "dice"] = "relu"
    dropout: float = field(default=0.0, metadata=_DROPOUT)
    batch_norm: bool = False

    def input_problem(
        self, model: str, features: Any, inputs: dict[str, list[str]]
    ) -> InputProblem | None:
        """Each history is compared with its candidates, so they are all inputs; the
        hard search reads a sequence of one of them."""
        problem = history_problem(model, features, inputs["deep"])
        if problem is not None or self.search_by is None:
            return problem
        read = [n for g in features.sequence_groups(inputs["deep"]) for n in g.sequences]
        if self.search_by not in read:
            return InputProblem(
                f"model {model!r}: search_by {self.search_by!r} is not a sequence of a "
                f"history among the model's inputs; choose one of {read}",
                "model.params.search_by",
            )
        return None


register_model("din", params=DINParams, model_class=f"{_ZOO}.din:DIN", needs_sequence=True)


@dataclasses.dataclass(frozen=True)
class BSTParams(ModelParams):
    """BST (Chen et al., 2019): a transformer over the history and the candidate.

    Each history and its candidate form one sequence ``[candidate, newest, ..., oldest]``
    with learned position embeddings; transformer layers (multi-head self-attention over
    the real positions, feed-forward, residuals, layer norm, dropout) encode it; the
    candidate's output and the mean of the history's outputs, the other embeddings and
    the dense numerics feed an MLP.

    Attributes:
      num_heads: Attention heads; each history position's dim (its sequences' dims
        summed) must be divisible by it.
      transformer_layers: Transformer layers stacked.
      ffn_units: Width of the feed-forward layer; null for 4 times the position's dim.
      attention_dropout: Dropout rate inside the transformer layers.
      hidden_units: Widths of the MLP.
      dropout: Dropout rate in the MLP.
      batch_norm: Batch norm in the MLP.
    """

    num_heads: int = field(default=2, metadata={"min": 1, "max": 64})
    transformer_layers: int = field(default=1, metadata={"min": 1, "max": 8})
    ffn_units: int | None = field(default=None, metadata={"min": 1})
    attention_dropout: float = field(default=0.1, metadata=_DROPOUT)
    hidden_units: list[int] = _units(256, 128, 64)
    dropout: float = field(default=0.0, metadata=_DROPOUT)
    batch_norm: bool = False

    def input_problem(
        self, model: str, features: Any, inputs: dict[str, list[str]]
    ) -> InputProblem | None:
        """As DIN's, and the heads split each history position's dim evenly."""
        names = inputs["deep"]
        problem = history_problem(model, features, names)
        if problem is not None:
            return problem
        for group in features.sequence_groups(names):
            dim = sum(features.tables[features.features[n].table_name].dim for n in group.sequences)
            if dim % self.num_heads:
                return InputProblem(
                    f"model {model!r}: a position of history {group.main!r} has dim {dim} "
                    f"(its sequences' dims summed), which num_heads={self.num_heads} does "
                    "not divide",
                    "model.params.num_heads",
                )
        return None


register_model("bst", params=BSTParams, model_class=f"{_ZOO}.bst:BST", needs_sequence=True)


@dataclasses.dataclass(frozen=True)
class DIENParams(ModelParams):
    """DIEN (Zhou et al., 2019): the interest followed through the history in time order.

    A GRU over each history (oldest first) extracts an interest state per position,
    trained by an auxiliary loss to tell the next behaviour from another user's; DIN's
    activation unit scores each state against the candidate (softmax), and a GRU whose
    update gate the score scales (AUGRU) evolves the interest; its final state, the other
    embeddings and the dense numerics feed an MLP.

    Attributes:
      attention_units: Widths of the activation unit's hidden layers.
      attention_activation: Activation of the activation unit: ``dice``, ``prelu``,
        ``relu`` or ``sigmoid``.
      auxiliary_loss_weight: Weight of the auxiliary loss in the training loss; 0 (the
        default, which measured better on both sets it was tried on) turns it off.
      auxiliary_units: Widths of the auxiliary network's sigmoid layers.
      hidden_units: Widths of the MLP.
      dropout: Dropout rate in the MLP.
      batch_norm: Batch norm in the MLP.
    """

    attention_units: list[int] = _units(80, 40)
    attention_activation: Literal["dice", "prelu", "relu", "sigmoid"] = "dice"
    auxiliary_loss_weight: float = field(default=0.0, metadata={"min": 0.0})
    auxiliary_units: list[int] = _units(100, 50)
    hidden_units: list[int] = _units(256, 128, 64)
    dropout: float = field(default=0.0, metadata=_DROPOUT)
    batch_norm: bool = False

    def input_problem(
        self, model: str, features: Any, inputs: dict[str, list[str]]
    ) -> InputProblem | None:
        """Each history is compared with its candidates, so they are all inputs."""
        return history_problem(model, features, inputs["deep"])


register_model("dien", params=DIENParams, model_class=f"{_ZOO}.dien:DIEN", needs_sequence=True)


def defaults_row(name: str) -> str:
    """Model ``name``'s row of the defaults table in docs/quality.md: its ``model.params``
    defaults and the default optimizer of its linear weights (a test keeps the table
    equal to these rows).

    Example::

        defaults_row("lr")  # "| `lr` | none | Adagrad min(0.5, 1/sqrt(F)), F = `wide` features |"
    """
    params = MODEL_PARAMS[name]
    values = [
        f"{spec.name}: {_yaml_value(getattr(params(), spec.name))}"
        for spec in dataclasses.fields(params)
    ]
    group = params.linear_inputs
    linear = (
        f"Adagrad min({LINEAR_RATE_CAP:g}, 1/sqrt(F)), F = `{group}` features"
        if group is not None
        else "no linear part"
    )
    return f"| `{name}` | {', '.join(values) or 'none'} | {linear} |"


def _yaml_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
