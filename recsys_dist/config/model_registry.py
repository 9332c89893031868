"""The registry of models: each model is registered once, on its hyper-parameter class.

``@register_model`` names a model and says what it reads; everything else that lists
models derives from :data:`MODEL_REGISTRY`: the names ``model.name`` accepts, the params
class of ``model.params`` (:data:`MODEL_PARAMS`), the input groups of ``model.inputs``
(:data:`MODEL_INPUT_GROUPS`), the label and sequence checks of a config, the zoo's model
classes (``recsys_dist/models/zoo/``, bound with ``@zoo_model(ParamsClass)``) and the model
list of docs/config.md. No TensorFlow here: ``validate`` and ``--help`` stay light.

The built-in models are registered by :mod:`recsys_dist.config.model_params`, which
:mod:`recsys_dist.config.experiment` imports.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Generic, TypeVar

from recsys_dist.yaml_loader import LocatedYaml
from recsys_dist.yaml_schema import did_you_mean


@dataclasses.dataclass(frozen=True)
class RegisteredModel:
    """One registered model.

    Attributes:
      name: The model's name in ``model.name``.
      params: Its hyper-parameter dataclass (``model.params``).
      input_groups: The input groups it reads (``model.inputs``), e.g. ``("wide", "deep")``.
      min_labels: The fewest labels it predicts (2 for a multi-task model).
      needs_sequence: It reads a behaviour sequence: a config must give it a feature of
        kind ``sequence`` in its inputs.
      summary: One line for docs: the first line of the params class's docstring.
    """

    name: str
    params: type
    input_groups: tuple[str, ...]
    min_labels: int = 1
    needs_sequence: bool = False
    summary: str = ""

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

_Params = TypeVar("_Params", bound=type)


def register_model(
    name: str,
    input_groups: Sequence[str] = ("deep",),
    min_labels: int = 1,
    needs_sequence: bool = False,
) -> Callable[[_Params], _Params]:
    """Registers model ``name`` on the params dataclass it decorates; returns the class.

    Args:
      name: The model's name in ``model.name``.
      input_groups: The input groups the model reads; a config lists features per group
        in ``model.inputs`` (optional when there is one group: every feature goes there).
      min_labels: The fewest labels the model predicts.
      needs_sequence: The model reads a behaviour sequence (a feature of kind
        ``sequence`` must be among its inputs).

    Raises:
      ValueError: ``name`` is registered already, or an argument is out of range.
      TypeError: The decorated class is not a dataclass.

    Example::

        @register_model("toy_mlp", input_groups=("deep",))
        @dataclasses.dataclass(frozen=True)
        class ToyMLPParams:
            '''A toy MLP over the embeddings (this line is its summary in docs/config.md).'''

            hidden_units: list[int] = dataclasses.field(default_factory=lambda: [16])

        registered_model("toy_mlp").input_groups  # ("deep",)
    """
    groups = tuple(input_groups)
    if not name or not groups or len(set(groups)) != len(groups) or min_labels < 1:
        raise ValueError(
            f"register_model({name!r}): needs a name, distinct input groups "
            f"and min_labels >= 1; got input_groups={groups}, "
            f"min_labels={min_labels}"
        )

    def register(cls: _Params) -> _Params:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(
                f"register_model({name!r}) decorates a params dataclass; got "
                f"{cls!r} (put @register_model above @dataclasses.dataclass)"
            )
        if name in MODEL_REGISTRY:
            raise ValueError(
                f"model {name!r} is registered already (by "
                f"{MODEL_REGISTRY[name].params.__qualname__}); choose another name"
            )
        summary = _summary(cls)
        MODEL_REGISTRY[name] = RegisteredModel(
            name, cls, groups, min_labels, needs_sequence, summary
        )
        return cls

    return register


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
      ValueError: ``params_class`` carries no ``@register_model``.
    """
    for spec in MODEL_REGISTRY.values():
        if spec.params is params_class:
            return spec
    raise ValueError(
        f"{params_class.__qualname__} is registered as no model; decorate it "
        "with @register_model(name, input_groups=...)"
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
