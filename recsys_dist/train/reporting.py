"""What the training loop tells the user and TensorBoard: the progress line, the line of
each pass and checkpoint, and the scalar summaries."""

from __future__ import annotations

import logging
from collections.abc import Callable

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from recsys_dist.checkpoint.store import SavedCheckpoint
from recsys_dist.train.attempt import Attempt
from recsys_dist.train.data_position import DataPosition

log = logging.getLogger(__name__)

#: Rows a pass must have counted, in multiples of the rows in flight, before its AUC shows.
AUC_SHOWN_AFTER = 20

#: The dynamic tables' figures written as summaries.
DYNAMIC_SCALARS = (
    "live_ids",
    "admitted_this_run",
    "dropped_full",
    "lookups_without_row",
    "counted_not_admitted",
)


def progress_line(
    attempt: Attempt,
    position: DataPosition,
    labels: list[str],
    rows_in_flight: int,
    read_aucs: Callable[[], dict[str, float] | None],
) -> str | None:
    """``step N | rate | loss | AUCs | done% | ETA``, or None before there is a rate.

    The AUC's counts live on the parameter servers and are read while workers add to
    them, so a reading can be off by the rows in flight; early in a pass that is most of
    what was counted (a reading can even exceed 1). So it is shown once the pass has
    counted :data:`AUC_SHOWN_AFTER` times the rows in flight. ``read_aucs`` gives the
    latest reading, or None while the first one is on its way.
    """
    (t0, rows0), (t1, rows1) = attempt.window[0], attempt.window[-1]
    if t1 <= t0 or rows1 <= rows0:
        return None
    rate = (rows1 - rows0) / (t1 - t0)
    done, total = position.finished_rows, position.total_rows
    eta = (total - done) / rate
    values = None
    if attempt.counters.rows - attempt.pass_start >= AUC_SHOWN_AFTER * rows_in_flight:
        values = read_aucs() or dict.fromkeys(labels)
    if values is None:
        aucs = " ".join(f"auc/{n} (pass starting)" for n in labels)
    else:
        aucs = " ".join(
            f"auc/{n} " + ("(reading)" if values[n] is None else f"{values[n]:.4f}") for n in labels
        )
    if position.epochs > 1 and attempt.epoch is not None:
        aucs += f" (epoch {attempt.epoch + 1}/{position.epochs})"
    return (
        f"step {attempt.step:,} | {rate:,.0f} ex/s | loss {attempt.mean_loss():.4f} | "
        f"{aucs} | {100 * done / max(total, 1):.0f}% | ETA {eta:.0f}s"
    )


def log_pass(epoch: int, epochs: int, aucs: dict[str, float]) -> None:
    """The line of pass ``epoch`` (from 0) that has just ended, when there are several."""
    if epochs > 1:
        log.info(
            "epoch %d/%d done: %s",
            epoch + 1,
            epochs,
            ", ".join(f"train auc/{n} {v:.4f}" for n, v in aucs.items()),
        )


def log_checkpoint(saved: SavedCheckpoint, position: DataPosition) -> None:
    upload = saved.state.get("upload_seconds")
    log.info(
        "checkpoint\tstep %s: %s of %s rows done, saved in %.1fs%s to %s",
        f"{saved.step:,}",
        f"{position.finished_rows:,}",
        f"{position.total_rows:,}",
        saved.state["save_seconds"],
        f" and uploaded in {upload:.1f}s" if upload is not None else "",
        saved.directory,
    )


def write_summaries(
    writer,
    step: int,
    rate: float,
    loss: float,
    aucs: dict[str, float] | None,
    dynamic_tables: dict[str, dict],
) -> None:
    """The loss, rate, training AUCs (unless None: no reading yet) and dynamic tables'
    figures at global ``step``."""
    with writer.as_default(step=step):
        _scalar("loss", loss)
        _scalar("examples_per_second", rate)
        for name, value in (aucs or {}).items():
            _scalar(f"auc/{name}", value)
        for table, stats in dynamic_tables.items():
            for key in DYNAMIC_SCALARS:
                if key in stats:
                    _scalar(f"dynamic/{table}/{key}", stats[key])


#: What ``tf.summary.scalar`` attaches to a scalar (TensorBoard's scalars plugin, data
#: version 0, which serializes to no bytes).
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
)


def _scalar(name: str, value) -> None:
    """Writes a scalar summary as ``tf.summary.scalar`` does, without importing
    TensorBoard's Python package on first use, a cost every ``train`` would pay."""
    tf.summary.write(name, tf.cast(value, tf.float32), metadata=_SCALAR_METADATA)
