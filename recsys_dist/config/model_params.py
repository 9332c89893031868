"""Hyper-parameters of each model of the zoo, as frozen dataclasses, each registered as its
model with ``@register_model`` (:mod:`recsys_dist.config.model_registry`): its name, its
input groups and what else a config must give it. The first line of a class's docstring
is the model's summary in docs/config.md.

The classes parse from YAML with :func:`recsys_dist.yaml_schema.parse_dataclass`
(``"min"``, ``"max"`` and ``"min_items"`` metadata are checked there, with file and
line). Constructing one in Python checks the same bounds, plus ``"item_min"`` (a bound on
every list item, which the YAML parser does not know), and raises ``ValueError``::

    params = parse_dataclass(MODEL_PARAMS["dcn_v2"], {"cross_layers": 2}, doc, "model.params")
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import field
from typing import Any, ClassVar, Literal

from recsys_dist.config.model_registry import MODEL_PARAMS as MODEL_PARAMS  # re-exported
from recsys_dist.config.model_registry import register_model

_UNITS = {"min_items": 1, "item_min": 1}
_DROPOUT = {"min": 0.0, "max": 0.99}


def _units(*default: int, min_items: int = 1) -> Any:
    return field(default_factory=lambda: list(default), metadata={**_UNITS, "min_items": min_items})


def _check_bounds(params: Any) -> None:
    """Raises ValueError when a field breaks its ``Literal`` type or its
    ``min``/``max``/``min_items``/``item_min`` metadata."""
    hints = typing.get_type_hints(type(params))
    for spec in dataclasses.fields(params):
        value, meta = getattr(params, spec.name), spec.metadata
        where = f"{type(params).__name__}.{spec.name}"
        if value is None:
            continue
        if typing.get_origin(hints[spec.name]) is Literal:
            allowed = typing.get_args(hints[spec.name])
            if value not in allowed:
                raise ValueError(
                    f"{where}: got {value!r}; expected one of "
                    + ", ".join(repr(a) for a in allowed)
                )
            continue
        if isinstance(value, list):
            if len(value) < meta.get("min_items", 0):
                raise ValueError(
                    f"{where}: got {value!r}; expected at least {meta['min_items']} item(s)"
                )
            low = meta.get("item_min")
            if low is not None and any(item < low for item in value):
                raise ValueError(f"{where}: got {value!r}; every item must be >= {low}")
            continue
        if "min" in meta and value < meta["min"]:
            raise ValueError(f"{where}: got {value!r}; expected a value >= {meta['min']}")
        if "max" in meta and value > meta["max"]:
            raise ValueError(f"{where}: got {value!r}; expected a value <= {meta['max']}")


#: The largest default learning rate of linear weights (TensorFlow's canned linear
#: estimators use the same cap).
LINEAR_RATE_CAP = 0.2


def default_linear_learning_rate(num_features: int) -> float:
    """The default learning rate of per-id linear weights fed by ``num_features``
    features: ``min(0.2, 1 / sqrt(num_features))``, the rule of TensorFlow's canned
    ``LinearClassifier`` and of ``DNNLinearCombinedClassifier``'s linear part.

    Each feature adds one weight to the logit, and a per-coordinate (Adagrad) step moves
    each weight by about the rate, so the logit moves by about ``rate * sqrt(F)`` for
    weights moving independently: the rule keeps that step near 1 whatever the number of
    features, and caps the rate for few features.

    Example::

        default_linear_learning_rate(39)  # 0.160...
    """
    return min(LINEAR_RATE_CAP, 1.0 / max(num_features, 1) ** 0.5)


class _Params:
    """Checks the bounds of every field when a params object is built in Python.

    Class attributes (not keys of ``model.params``):
      linear_inputs: The input group whose features feed the model's per-id linear
        weights (``lr``, the wide part of ``wide_deep``, the first-order part of
        ``deepfm``), or None when it has no linear part. The config gives such a model a
        ``train.linear_optimizer`` by default (``config/experiment.py``,
        :func:`default_linear_learning_rate`).
    """

    linear_inputs: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        _check_bounds(self)

    def input_problem(
        self, model: str, features: Any, inputs: dict[str, list[str]]
    ) -> InputProblem | None:
        """What model ``model`` with these params cannot read among ``inputs`` (input
        group -> names of features of the feature config ``features``), or None.

        The model's constructor refuses the same with a ``ValueError``, but only once a
        command has started its cluster, as a traceback; the config check asks here
        first (:func:`check_model_inputs`), so ``validate`` refuses it.
        """
        return None


def check_model_inputs(doc: Any, model: Any, inputs: dict[str, list[str]], features: Any) -> None:
    """Raises a ConfigError (``doc.error``) for what the model of ``model`` (the config's
    ``model`` section, its params parsed) would refuse among its ``inputs``: its params'
    :meth:`~_Params.input_problem` (one dim for all tables, a dense feature, each
    history's targets, attention heads that divide a history's dim), naming the key."""
    check = getattr(model.params, "input_problem", None)  # a params class of the zoo's kind
    problem = check(model.name, features, inputs) if check is not None else None
    if problem is None:
        return
    where = "model.inputs" if model.inputs is not None else "model.name"
    raise doc.error(problem.key or where, problem.message)


@dataclasses.dataclass(frozen=True)
class InputProblem:
    """Why a model cannot read its inputs: the message, and the config key to name
    (None: the model's inputs, ``model.inputs`` or ``model.name`` when it has none)."""

    message: str
    key: str | None = None


def one_dim_problem(model: str, features: Any, names: list[str]) -> InputProblem | None:
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


def history_problem(model: str, features: Any, names: list[str]) -> InputProblem | None:
    """Every sequence of a history among ``names`` has a ``target`` (a model comparing
    histories with their candidates: ``check_histories`` in ``models/behaviour.py``). The
    targets and main sequences are among ``names`` already: these models read one input
    group, and every feature must be in a group."""
    for group in features.sequence_groups(names):
        for sequence, target in zip(group.sequences, group.targets):
            if target is None:
                return InputProblem(
                    f"model {model!r} compares sequence {sequence!r} with its candidate: "
                    f"set features.{sequence}.target in {features.file} to the "
                    "candidate's feature"
                )
    return None


@register_model("lr", input_groups=("wide",))
@dataclasses.dataclass(frozen=True)
class LRParams(_Params):
    """Logistic regression: a weight per id and per dense value, for each label.

    It has no hyper-parameters beyond its optimizers.
    """

    linear_inputs: ClassVar[str | None] = "wide"


@dataclasses.dataclass(frozen=True)
class _DeepTowerParams(_Params):
    """A deep tower.

    Attributes:
      hidden_units: Widths of the deep tower.
      dropout: Dropout rate in the deep tower.
      batch_norm: Batch norm in the deep tower.
    """

    hidden_units: list[int] = _units(256, 128)
    dropout: float = field(default=0.0, metadata=_DROPOUT)
    batch_norm: bool = False


@register_model("wide_deep", input_groups=("wide", "deep"))
@dataclasses.dataclass(frozen=True)
class WideDeepParams(_DeepTowerParams):
    """Wide & Deep (Cheng et al., 2016): a linear wide part plus a deep tower.

    Attributes: those of the deep tower.
    """

    linear_inputs: ClassVar[str | None] = "wide"


@register_model("deepfm")
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


@register_model("dcn_v2")
@dataclasses.dataclass(frozen=True)
class DCNv2Params(_Params):
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


@register_model("dlrm")
@dataclasses.dataclass(frozen=True)
class DLRMParams(_Params):
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


@register_model("mmoe", min_labels=2)
@dataclasses.dataclass(frozen=True)
class MMoEParams(_Params):
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


@register_model("din", needs_sequence=True)
@dataclasses.dataclass(frozen=True)
class DINParams(_Params):
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
      sequence_pooling: ``attention``; or, as baselines of the same network, ``mean``
        (each history mean-pooled over its real positions) or ``none`` (the histories
        are not read).
      hidden_units: Widths of the MLP.
      activation: Activation of the MLP: ``relu``, ``prelu`` or ``dice``.
      dropout: Dropout rate in the MLP.
      batch_norm: Batch norm in the MLP.
    """

    attention_units: list[int] = _units(80, 40)
    attention_activation: Literal["dice", "prelu", "relu", "sigmoid"] = "dice"
    attention_normalization: Literal["none", "softmax"] = "none"
    sequence_pooling: Literal["attention", "mean", "none"] = "attention"
    hidden_units: list[int] = _units(256, 128, 64)
    activation: Literal["relu", "prelu", "dice"] = "relu"
    dropout: float = field(default=0.0, metadata=_DROPOUT)
    batch_norm: bool = False

    def input_problem(
        self, model: str, features: Any, inputs: dict[str, list[str]]
    ) -> InputProblem | None:
        """Each history is compared with its candidates, so they are all inputs."""
        return history_problem(model, features, inputs["deep"])


@register_model("bst", needs_sequence=True)
@dataclasses.dataclass(frozen=True)
class BSTParams(_Params):
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


def defaults_row(name: str) -> str:
    """Model ``name``'s row of the defaults table in docs/quality.md: its ``model.params``
    defaults and the default optimizer of its linear weights (a test keeps the table
    equal to these rows).

    Example::

        defaults_row("lr")  # "| `lr` | none | Adagrad min(0.2, 1/sqrt(F)), F = `wide` features |"
    """
    params = MODEL_PARAMS[name]
    values = [
        f"{spec.name}: {_yaml_value(getattr(params(), spec.name))}"
        for spec in dataclasses.fields(params)
    ]
    group = params.linear_inputs
    linear = (
        f"Adagrad min(0.2, 1/sqrt(F)), F = `{group}` features"
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
