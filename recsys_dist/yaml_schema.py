"""Typed parsing of YAML values into frozen dataclasses, in one place.

:func:`parse_dataclass` walks a YAML value against a frozen dataclass's type hints and
builds the instance, or raises a :class:`~recsys_dist.errors.ConfigError` naming the file,
line, dotted key path, the bad value and what is allowed; an unknown key gets a
did-you-mean suggestion. :func:`parse_value` lists the annotations it supports and the
per-field rules of ``dataclasses.field(metadata=...)``; :func:`check_fields` applies the
same rules, with the same messages, to a dataclass built in Python.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import types
import typing
from typing import Any, Literal, Union

from recsys_dist.yaml_loader import LocatedYaml

_MISSING = dataclasses.MISSING


def did_you_mean(word: str, choices: typing.Iterable[str]) -> str:
    """Returns ``' Did you mean "x"?'`` for the closest choice, or ``''``."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f' Did you mean "{close[0]}"?' if close else ""


def _describe(value: Any) -> str:
    return f"{value!r} (of type {type(value).__name__})"


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is list:
        return f"a list of {_type_name(typing.get_args(annotation)[0])}"
    if origin is dict:
        return f"a mapping of name to {_type_name(typing.get_args(annotation)[1])}"
    if annotation is type(None):
        return "null"
    if annotation is datetime.date:
        return "a date YYYY-MM-DD"
    if dataclasses.is_dataclass(annotation):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _bounds_problem(value: Any, meta: typing.Mapping[str, Any]) -> str | None:
    """What ``value`` breaks of a field's ``min``/``max``/``min_items`` metadata, or None."""
    low, high = meta.get("min"), meta.get("max")
    if low is not None and value < low:
        return f"got {value!r}; expected a value >= {low}"
    if high is not None and value > high:
        return f"got {value!r}; expected a value <= {high}"
    min_items = meta.get("min_items")
    if min_items is not None and len(value) < min_items:
        return f"got {len(value)} item(s); expected at least {min_items}"
    return None


def _check_bounds(value: Any, meta: typing.Mapping[str, Any], doc: LocatedYaml, path: str) -> None:
    problem = _bounds_problem(value, meta)
    if problem is not None:
        raise doc.error(path, problem)


def _literal_problem(value: Any, allowed: tuple) -> str | None:
    """Why ``value`` is none of a ``Literal``'s ``allowed`` values, or None."""
    if value in allowed and isinstance(value, bool) == isinstance(allowed[0], bool):
        return None
    return (
        f"got {value!r}; expected one of "
        + ", ".join(repr(a) for a in allowed)
        + "."
        + did_you_mean(value, allowed)
    )


def parse_value(
    annotation: Any,
    value: Any,
    doc: LocatedYaml,
    path: str,
    meta: typing.Mapping[str, Any] | None = None,
) -> Any:
    """Converts one YAML value to ``annotation``; raises ConfigError on mismatch.

    Supported annotations: ``str``, ``int``, ``float``, ``bool``, ``datetime.date``,
    ``Literal[...]``, ``X | None``, ``list[X]``, ``dict[str, X]`` and nested dataclasses.
    ``meta`` (a field's ``dataclasses.field(metadata=...)``) may hold:

    - ``"min"`` / ``"max"``: inclusive numeric bounds.
    - ``"min_items"``: minimum length of a list or mapping.
    - ``"item_min"``: inclusive lower bound of every item of a list.
    - ``"key_field"``: for ``dict[str, Dataclass]``, the dataclass field that receives the
      mapping key (so ``features: {tags: {...}}`` sets ``name="tags"``).
    """
    meta = meta or {}
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return _parse_union(annotation, value, doc, path, meta)
    if origin is Literal:
        problem = _literal_problem(value, typing.get_args(annotation))
        if problem is not None:
            raise doc.error(path, problem)
        return value
    if origin is list:
        return _parse_list(annotation, value, doc, path, meta)
    if origin is dict:
        return _parse_dict(annotation, value, doc, path, meta)
    if dataclasses.is_dataclass(annotation):
        return parse_dataclass(annotation, value, doc, path)
    return _parse_scalar(annotation, value, doc, path, meta)


def _parse_union(
    annotation: Any, value: Any, doc: LocatedYaml, path: str, meta: typing.Mapping[str, Any]
) -> Any:
    options = typing.get_args(annotation)
    if value is None and type(None) in options:
        return None
    errors = []
    for option in options:
        if option is type(None):
            continue
        try:
            return parse_value(option, value, doc, path, meta)
        except Exception as exc:  # noqa: BLE001  collect and report the best option
            errors.append(exc)
    if len(errors) == 1:
        raise errors[0]
    raise doc.error(path, f"got {_describe(value)}; expected {_type_name(annotation)}")


def _parse_list(
    annotation: Any, value: Any, doc: LocatedYaml, path: str, meta: typing.Mapping[str, Any]
) -> list:
    if not isinstance(value, list):
        raise doc.error(path, f"got {_describe(value)}; expected {_type_name(annotation)}")
    (item_type,) = typing.get_args(annotation)
    item_meta = {"min": meta["item_min"]} if "item_min" in meta else None
    out = [
        parse_value(item_type, item, doc, _join(path, i), item_meta) for i, item in enumerate(value)
    ]
    _check_bounds(out, meta, doc, path)
    return out


def _parse_dict(
    annotation: Any, value: Any, doc: LocatedYaml, path: str, meta: typing.Mapping[str, Any]
) -> dict:
    if not isinstance(value, dict):
        raise doc.error(path, f"got {_describe(value)}; expected {_type_name(annotation)}")
    _, item_type = typing.get_args(annotation)
    key_field = meta.get("key_field")
    out_map = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise doc.error(_join(path, key), f"names must be strings, got {_describe(key)}")
        extra = {key_field: key} if key_field else None
        out_map[key] = (
            parse_value(item_type, item, doc, _join(path, key), None)
            if extra is None
            else parse_dataclass(item_type, item, doc, _join(path, key), extra)
        )
    _check_bounds(out_map, meta, doc, path)
    return out_map


def _parse_scalar(
    annotation: Any, value: Any, doc: LocatedYaml, path: str, meta: typing.Mapping[str, Any]
) -> Any:
    if annotation is bool:
        if not isinstance(value, bool):
            raise doc.error(path, f"got {_describe(value)}; expected true or false")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise doc.error(path, f"got {_describe(value)}; expected an integer")
        _check_bounds(value, meta, doc, path)
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise doc.error(path, f"got {_describe(value)}; expected a number")
        _check_bounds(float(value), meta, doc, path)
        return float(value)
    if annotation is str:
        if not isinstance(value, str) or not value:
            raise doc.error(path, f"got {_describe(value)}; expected a non-empty string")
        return value
    if annotation is datetime.date:
        if isinstance(value, datetime.date):
            return value
        try:
            return datetime.date.fromisoformat(str(value))
        except ValueError:
            raise doc.error(path, f"got {value!r}; expected a date YYYY-MM-DD") from None
    raise TypeError(f"unsupported config annotation {annotation!r} at {path}")


def parse_dataclass(
    cls: type, value: Any, doc: LocatedYaml, path: str, extra: dict[str, Any] | None = None
) -> Any:
    """Builds dataclass ``cls`` from mapping ``value``; ``extra`` fills fields not in YAML."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise doc.error(path, f"got {_describe(value)}; expected a mapping")
    hints = typing.get_type_hints(cls)
    fields = {
        f.name: f for f in dataclasses.fields(cls) if f.init and not f.metadata.get("internal")
    }
    yaml_fields = {n for n in fields if not (extra and n in extra)}
    for key in value:
        if key not in yaml_fields:
            raise doc.error(
                _join(path, key),
                "unknown key; allowed keys are "
                + ", ".join(sorted(yaml_fields))
                + "."
                + did_you_mean(key, yaml_fields),
            )
    kwargs: dict[str, Any] = dict(extra or {})
    for name in yaml_fields:
        field = fields[name]
        if name in value:
            kwargs[name] = parse_value(
                hints[name], value[name], doc, _join(path, name), field.metadata
            )
        elif field.default is _MISSING and field.default_factory is _MISSING:
            raise doc.error(
                _join(path, name), f"missing required key; expected {_type_name(hints[name])}"
            )
    try:
        return cls(**kwargs)
    except ValueError as exc:  # a class's own cross-field check
        raise doc.error(path, str(exc)) from None


def check_fields(instance: Any) -> None:
    """Checks a dataclass built in Python by the rules :func:`parse_dataclass` applies to
    YAML: each field's ``Literal`` values and its ``min``, ``max``, ``min_items`` and
    ``item_min`` metadata, with the same messages, naming ``Class.field``.

    Raises:
      ValueError: A field breaks one of them, e.g.
        ``DCNv2Params.cross_layers: got 0; expected a value >= 1``.
    """
    hints = typing.get_type_hints(type(instance))
    for spec in dataclasses.fields(instance):
        where = f"{type(instance).__name__}.{spec.name}"
        for path, problem in _field_problems(
            hints[spec.name], getattr(instance, spec.name), spec.metadata
        ):
            raise ValueError(f"{where}{path}: {problem}")


def _field_problems(
    annotation: Any, value: Any, meta: typing.Mapping[str, Any]
) -> typing.Iterator[tuple[str, str]]:
    """(path under the field, problem) for what ``value`` breaks; None passes."""
    if value is None:
        return
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = options[0] if len(options) == 1 else annotation
        origin = typing.get_origin(annotation)
    if origin is Literal:
        problem = _literal_problem(value, typing.get_args(annotation))
    elif isinstance(value, (int, float, list, dict)) and not isinstance(value, bool):
        problem = _bounds_problem(value, meta)
    else:
        problem = None
    if problem is not None:
        yield "", problem
    if isinstance(value, list) and "item_min" in meta:
        for i, item in enumerate(value):
            problem = _bounds_problem(item, {"min": meta["item_min"]})
            if problem is not None:
                yield f"[{i}]", problem
