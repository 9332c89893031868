"""The registry of models: each model is registered once, by one :func:`register_model` call.

A registration names the model, its hyper-parameter dataclass (``model.params``), the input
groups it reads (``model.inputs``), what else a config must give it, and its class. The
class is a ``RankingModel`` of ``recsys_dist/models/``, given as the class itself or as
``"module:Class"``, imported only when the model is built, so the config layer never imports
TensorFlow. Everything else that lists models derives from :data:`MODEL_REGISTRY`: the names
``model.name`` accepts, :data:`MODEL_PARAMS`, :data:`MODEL_INPUT_GROUPS`, the check of a
model's inputs (:mod:`recsys_dist.config.model_inputs`), ``build_model`` and the model list
of docs/config.md.

The built-in models are registered by :mod:`recsys_dist.config.model_params`, which
:mod:`recsys_dist.config.experiment` imports.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Generic, TypeVar

from recsys_dist.yaml_loader import LocatedYaml
from recsys_dist.yaml_schema import did_you_mean

#: ``"package.module:Class"``: where a model class is imported from when it is built.
_CLASS_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclasses.dataclass(frozen=True)
class RegisteredModel:
    """One registered model.

    Attributes:
      name: The model's name in ``model.name``.
      params: Its hyper-parameter dataclass (``model.params``).
      model_class: Its ``RankingModel`` class, or ``"module:Class"`` to import when built.
      input_groups: The input groups it reads (``model.inputs``), e.g. ``("wide", "deep")``.
      min_labels: The fewest labels it predicts (2 for a multi-task model).
      needs_sequence: It reads a behaviour sequence: a config must give it a feature of
        kind ``sequence`` in its inputs.
      summary: One line for docs: the first line of the params class's docstring.
    """

    name: str
    params: type
    model_class: type | str
    input_groups: tuple[str, ...] = ("deep",)
    min_labels: int = 1
    needs_sequence: bool = False
    summary: str = ""

    @property
    def class_path(self) -> str:
        """``"module:Class"`` of :attr:`model_class`, whichever way it was given."""
        return class_path(self.model_class)

    def too_few_labels(self, labels: Sequence[str]) -> str | None:
        """Why ``labels`` are too few for this model, or None when they are enough."""
        if len(labels) >= self.min_labels:
            return None
        kind = "is multi-task; it " if self.min_labels > 1 else ""
        return (
            f"model {self.name!r} {kind}needs at least {self.min_labels} "
            f"label{'s' if self.min_labels > 1 else ''}, got {list(labels)}"
        )


#: Model name -> its registration, in the order the models were registered.
MODEL_REGISTRY: dict[str, RegisteredModel] = {}


def class_path(model_class: type | str) -> str:
    """``"module:Class"`` of a class, or the path itself."""
    if isinstance(model_class, str):
        return model_class
    return f"{model_class.__module__}:{model_class.__qualname__}"


def register_model(
    name: str,
    *,
    params: type,
    model_class: type | str,
    input_groups: Sequence[str] = ("deep",),
    min_labels: int = 1,
    needs_sequence: bool = False,
) -> RegisteredModel:
    """Registers model ``name``: the one place that says what the model is.

    Args:
      name: The model's name in ``model.name``.
      params: Its hyper-parameter dataclass; ``model.params`` parses into it, and the first
        line of its docstring is the model's summary in docs/config.md.
      model_class: Its ``RankingModel`` subclass, or ``"package.module:Class"``, imported
        when the model is built (the built-in models name theirs this way, so that
        ``validate`` does not import TensorFlow).
      input_groups: The input groups the model reads; a config lists features per group
        in ``model.inputs`` (optional when there is one group: every feature goes there).
      min_labels: The fewest labels the model predicts.
      needs_sequence: The model reads a behaviour sequence (a feature of kind
        ``sequence`` must be among its inputs).

    Returns:
      The registration.

    Raises:
      ValueError: ``name`` or its class is registered already, or an argument is out of
        range.
      TypeError: ``params`` is not a dataclass, or ``model_class`` neither a class nor a
        ``"module:Class"`` path.

    Example::

        @dataclasses.dataclass(frozen=True)
        class ToyMLPParams(ModelParams):
            '''A toy MLP over the embeddings (this line is its summary in docs/config.md).'''

            hidden_units: list[int] = dataclasses.field(default_factory=lambda: [16])

        register_model("toy_mlp", params=ToyMLPParams, model_class="my_models.toy:ToyMLP")
    """
    groups = tuple(input_groups)
    if not name or not groups or len(set(groups)) != len(groups) or min_labels < 1:
        raise ValueError(
            f"register_model({name!r}): needs a name, distinct input groups "
            f"and min_labels >= 1; got input_groups={groups}, "
            f"min_labels={min_labels}"
        )
    if not (isinstance(params, type) and dataclasses.is_dataclass(params)):
        raise TypeError(f"register_model({name!r}): params must be a dataclass; got {params!r}")
    if not isinstance(model_class, type) and not (
        isinstance(model_class, str) and _CLASS_PATH.match(model_class)
    ):
        raise TypeError(
            f"register_model({name!r}): model_class must be a class or "
            f"'package.module:Class'; got {model_class!r}"
        )
    if name in MODEL_REGISTRY:
        raise ValueError(
            f"model {name!r} is registered already (by "
            f"{MODEL_REGISTRY[name].params.__qualname__}); choose another name"
        )
    for other in MODEL_REGISTRY.values():
        if other.class_path == class_path(model_class):
            raise ValueError(
                f"register_model({name!r}): class {other.class_path} is model "
                f"{other.name!r} already; a class is one model"
            )
    spec = RegisteredModel(
        name, params, model_class, groups, min_labels, needs_sequence, _summary(params)
    )
    MODEL_REGISTRY[name] = spec
    return spec


def _summary(cls: type) -> str:
    """The first line of the class's own docstring ('' for the one dataclass writes)."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    return "" if doc.startswith(f"{cls.__name__}(") else doc.split("\n")[0].strip()


def unregister_model(name: str) -> None:
    """Removes model ``name`` from the registry (tests that register their own models).

    Raises:
      KeyError: No model of that name is registered.
    """
    del MODEL_REGISTRY[name]


def model_names() -> list[str]:
    """The registered model names, in registration order."""
    return list(MODEL_REGISTRY)


def registered_model(
    name: str, doc: LocatedYaml | None = None, path: str = "model.name"
) -> RegisteredModel:
    """The registration of model ``name``.

    Raises:
      ConfigError: With ``doc``: no model ``name`` (named at ``path``, with file and line),
        listing the registered names with a did-you-mean.
      ValueError: Without ``doc``: the same.
    """
    spec = MODEL_REGISTRY.get(name)
    if spec is not None:
        return spec
    known = ", ".join(repr(n) for n in MODEL_REGISTRY) + "." + did_you_mean(name, MODEL_REGISTRY)
    if doc is None:
        raise ValueError(f"unknown model {name!r}; expected one of {known}")
    raise doc.error(path, f"got {name!r}; expected one of {known}")


def registration_of(params_class: type) -> RegisteredModel:
    """The registration whose params class is ``params_class``.

    Raises:
      ValueError: No model is registered with ``params_class``.
    """
    for spec in MODEL_REGISTRY.values():
        if spec.params is params_class:
            return spec
    raise ValueError(
        f"{params_class.__qualname__} is the params of no registered model; register it "
        "with register_model(name, params=..., model_class=...)"
    )


def registration_of_class(model_class: type) -> RegisteredModel:
    """The registration whose class is ``model_class`` (given as the class or its path).

    Raises:
      ValueError: No model is registered with ``model_class``.
    """
    path = class_path(model_class)
    for spec in MODEL_REGISTRY.values():
        if spec.model_class is model_class or spec.class_path == path:
            return spec
    raise ValueError(
        f"{model_class.__qualname__} is the class of no registered model; register it "
        "with register_model(name, params=..., model_class=...)"
    )


_Value = TypeVar("_Value")


class _RegistryView(Mapping[str, _Value], Generic[_Value]):
    """A read-only mapping of model name -> one attribute of its registration, always
    current with :data:`MODEL_REGISTRY`."""

    def __init__(self, attribute: str):
        self._attribute = attribute

    def __getitem__(self, name: str) -> _Value:
        return getattr(MODEL_REGISTRY[name], self._attribute)

    def __contains__(self, name: object) -> bool:
        return name in MODEL_REGISTRY

    def __iter__(self) -> Iterator[str]:
        return iter(list(MODEL_REGISTRY))

    def __len__(self) -> int:
        return len(MODEL_REGISTRY)

    def __repr__(self) -> str:
        return repr(dict(self))


#: Model name -> its hyper-parameter class (a view of :data:`MODEL_REGISTRY`).
MODEL_PARAMS: Mapping[str, type] = _RegistryView("params")
#: Model name -> the input groups it reads (a view of :data:`MODEL_REGISTRY`).
MODEL_INPUT_GROUPS: Mapping[str, tuple[str, ...]] = _RegistryView("input_groups")
