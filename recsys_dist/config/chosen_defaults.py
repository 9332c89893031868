"""The defaults of a config that depend on its model and data, chosen when the config
leaves the keys out: the linear part's optimizer, the passes and early stopping, and a
validation split carved from the end of the training window. The chosen values are
written into the resolved config, so a model's config says what it ran with.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from recsys_dist.config import model_params
from recsys_dist.config.model_registry import RegisteredModel
from recsys_dist.config.sections import (
    OPTIMIZER_KEYS,
    DataSplit,
    DateRange,
    EarlyStoppingSpec,
    OptimizerSpec,
)

#: Passes of a config with ``data.validation`` that leaves ``train.epochs`` out: an upper
#: bound, early stopping ends the run at the first pass that does not improve (deep models
#: after a few passes; a linear part of few features may need a dozen or more).
EPOCHS_WITH_VALIDATION = 30


#: A training window of dated partitions needs at least this many days for
#: :func:`carve_validation` to take its end as the validation split.
CARVE_MIN_DAYS = 3

#: The share of a training window's days (rounded up: at least one day), or of the rows
#: of a ``glob`` split, that :func:`carve_validation` keeps for validation.
CARVE_SHARE = 0.1


def carve_validation(parsed: Any, raw: Any) -> tuple[Any, Any]:
    """The config with a validation split carved from ``data.train`` when it leaves the
    choice of passes to the run: no ``data.validation`` key (``null`` keeps it off), no
    ``train.epochs``, ``max_steps`` or ``early_stopping: null``, no ``retrain`` or
    ``follow`` section.

    - A ``dates`` window of at least :data:`CARVE_MIN_DAYS` days gives its last tenth of
      days (at least one): the end of the window is the data nearest to what the model
      will score, so it is the slice a pass count should be chosen on.
    - A ``glob`` split (no dates to go by) gives a tenth of its rows, by a hash of each
      row's file name and number (``hash_share: [0.9, 1.0]``; training keeps
      ``[0.0, 0.9]``).

    Returns ``(parsed, raw)`` unchanged otherwise."""
    data_raw = raw.get("data") if isinstance(raw, dict) else None
    train_raw = raw.get("train") if isinstance(raw, dict) else None
    given = train_raw if isinstance(train_raw, dict) else {}
    data = parsed.data
    if (
        data is None
        or not isinstance(data_raw, dict)
        or "validation" in data_raw
        or parsed.retrain is not None
        or parsed.follow is not None
        or data.train is None
        or data.train.hash_share is not None
        or any(key in given for key in ("epochs", "max_steps"))
        or ("early_stopping" in given and given["early_stopping"] is None)
    ):
        return parsed, raw
    if data.train.dates is None:
        return _carve_rows(parsed, raw) if data.train.glob else (parsed, raw)
    days = data.train.date_range().days()
    if len(days) < CARVE_MIN_DAYS:
        return parsed, raw
    kept = len(days) - math.ceil(len(days) * CARVE_SHARE)
    train, validation = (str(DateRange(part[0], part[-1])) for part in (days[:kept], days[kept:]))
    data = dataclasses.replace(
        data,
        train=DataSplit(dates=train),
        validation=DataSplit(dates=validation),
        validation_carved=True,
    )
    written = dict(data_raw, train={"dates": train}, validation={"dates": validation})
    return dataclasses.replace(parsed, data=data), dict(raw, data=written)


def _carve_rows(parsed: Any, raw: Any) -> tuple[Any, Any]:
    """:func:`carve_validation` of a ``glob`` split: a tenth of its rows by hash."""
    glob, cut = parsed.data.train.glob, round(1.0 - CARVE_SHARE, 6)
    train, validation = (
        DataSplit(glob=glob, hash_share=share) for share in ([0.0, cut], [cut, 1.0])
    )
    data = dataclasses.replace(
        parsed.data, train=train, validation=validation, validation_carved=True
    )
    written = dict(
        raw["data"],
        train={"glob": glob, "hash_share": train.hash_share},
        validation={"glob": glob, "hash_share": validation.hash_share},
    )
    return dataclasses.replace(parsed, data=data), dict(raw, data=written)


def with_model_and_data_defaults(
    parsed: Any, raw: Any, spec: RegisteredModel, inputs: dict[str, list[str]]
) -> tuple[Any, Any]:
    """The defaults of ``train`` that depend on the model and the data, for the keys the
    config leaves out (a key given, even ``null``, is kept):

    - ``linear_optimizer``: a model with a linear part (its params class's
      ``linear_inputs``) gets Adagrad at ``default_linear_learning_rate(F)``;
    - ``data.validation``: the end of the training window (:func:`carve_validation`)
      when the config chooses neither it nor the passes;
    - ``epochs`` and ``early_stopping``: with ``data.validation``, up to
      :data:`EPOCHS_WITH_VALIDATION` passes stopped on it (:class:`EarlyStoppingSpec`'s
      defaults; one pass when ``early_stopping`` is ``null``); without, or with a
      ``retrain`` or ``follow`` section (which never stop early), one pass.

    Returns the parsed config and ``raw`` with the chosen values written in, so the
    resolved config next to a model says what it ran with.
    """
    parsed, raw = carve_validation(parsed, raw)
    given = dict(raw.get("train") or {}) if isinstance(raw, dict) else {}
    chosen: dict[str, Any] = {}
    linear = getattr(spec.params, "linear_inputs", None)
    if linear is not None and "linear_optimizer" not in given:
        rate = model_params.default_linear_learning_rate(len(inputs.get(linear, [])))
        chosen["linear_optimizer"] = OptimizerSpec("adagrad", round(rate, 4))
    # (a config with a retrain or follow section chooses its passes offline: neither
    # stops early)
    validation = (
        parsed.data is not None
        and parsed.data.validation is not None
        and parsed.retrain is None
        and parsed.follow is None
    )
    stopping_off = "early_stopping" in given and given["early_stopping"] is None
    if validation and "epochs" not in given and not stopping_off:
        chosen["epochs"] = EPOCHS_WITH_VALIDATION
    epochs = chosen.get("epochs", parsed.train.epochs)
    if validation and "early_stopping" not in given and epochs >= 2:
        chosen["early_stopping"] = EarlyStoppingSpec()
    if not chosen:
        return parsed, raw
    train = dataclasses.replace(parsed.train, **chosen)
    written = {key: _as_yaml(value) for key, value in chosen.items()}
    return dataclasses.replace(parsed, train=train), dict(raw, train={**given, **written})


def _as_yaml(value: Any) -> Any:
    """A chosen default as the config would write it (an optimizer with only the keys
    its name reads)."""
    if isinstance(value, OptimizerSpec):
        keys = {"name", "learning_rate", *OPTIMIZER_KEYS[value.name]}
        return {k: v for k, v in dataclasses.asdict(value).items() if k in keys}
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
