"""Models of user behaviour against the same network without attention: held-out AUC over
seeds, speed, and a peer's DIN on the same rows.

Sides, each trained with ``recsys-dist train`` on the same rows and evaluated on the same
held-out rows, once per seed (``train.seed`` and ``input.seed``), interleaved:

- ``none``: the same network without any history (``din`` with ``sequence_pooling:
  none``);
- ``pooled``: ``din`` with ``sequence_pooling: mean`` (each history mean-pooled over its
  real positions; the same MLP);
- ``din``: DIN's target attention over the history;
- ``bst``: a transformer over the candidate and the history;
- ``dien``: DIEN's GRUs over the history in time order, with its auxiliary loss;
- ``din_gaps`` (``ml1m`` only): ``din`` whose history carries, beside each movie and its
  genre, how long before the candidate it was rated (the ``hist_gap_id`` bucket, a side
  sequence with a table of its own; the candidate's bucket is 0).

Data (``--data``):

- ``amazon`` (default): the Amazon Video Games leave-one-out set that
  ``benchmarks/amazon_sequences.py`` builds (``--amazon DIR``, built into a scratch folder
  from ``--source`` when DIR has no ``summary.json``), with ``configs/amazon_din.yaml``:
  train on ``train/``, evaluate on ``test/`` (each user's last item);
- ``ml1m``: the MovieLens-1M behaviour set (histories of up to 1,000 movies, median 119)
  that ``benchmarks/datasets/ml1m_sequences.py`` builds (``--ml1m DIR``, built into a
  scratch folder from ``--raw RAW`` when DIR has no partitions), with
  ``configs/ml1m_din.yaml``: train on days 1-8, stop on day 9, evaluate on day 10;
- ``synthetic``: ``recsys-dist data synth --dataset behaviour`` (3 days, train on 2,
  evaluate on the 3rd) with ``features/behaviour_synth.yaml``; its oracle logit gives the
  AUC ceiling, and the benchmark prints how much of the gap between ``pooled`` and the
  oracle each model closes.

Every round prints each side's AUC, logloss and examples/s after warm-up. Then per side the
mean AUC over seeds with its standard error, the paired gap of every model over
``pooled`` per seed with its mean and standard error, and the speed against ``pooled``
(median of the rounds). With ``--peer``, ``benchmarks/peer_din.py`` (DeepCTR's DIN) runs on
the same Amazon rows and seeds, and the gap of ``din`` to it is printed.

Usage: ``python benchmarks/sequence_quality.py [--data amazon|ml1m|synthetic] [--seeds 0,1,2]
[--sides none,pooled,din,bst,dien,din_gaps] [--amazon DIR] [--ml1m DIR --raw RAW] [--peer]
[--set KEY=VALUE ...]``
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable

import yaml
from common import ROOT, best_median, cli, interleaved  # this folder

SIDES = ("none", "pooled", "din", "bst", "dien", "din_gaps")
AMAZON_CONFIG = ROOT / "configs" / "amazon_din.yaml"
ML1M_CONFIG = ROOT / "configs" / "ml1m_din.yaml"
ML1M_FEATURES = ROOT / "features" / "ml1m_sequences.yaml"
SYNTHETIC_FEATURES = ROOT / "features" / "behaviour_synth.yaml"


def with_time_gaps(features: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """A copy of the feature config ``features`` whose main history carries the time-gap
    side sequence ``hist_gap_id`` (target ``cand_gap_id``, table ``gap``)."""
    doc = yaml.safe_load(features.read_text())
    main = doc["features"]["hist_item_id"]
    doc["tables"]["gap"] = {"rows": 10000, "dim": doc["tables"][main["table"]]["dim"]}
    doc["features"]["cand_gap_id"] = {"kind": "categorical", "dtype": "int64", "table": "gap"}
    doc["features"]["hist_gap_id"] = {
        "kind": "sequence",
        "table": "gap",
        "max_length": main["max_length"],
        "newest": main.get("newest", "first"),
        "target": "cand_gap_id",
        "side_of": "hist_item_id",
    }
    path = out / f"{features.stem}_gaps.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def side_settings(side: str, scratch: pathlib.Path | None = None) -> list[str]:
    """``--set`` values that make a side out of the DIN config."""
    if side == "din_gaps":
        assert scratch is not None
        return ["model.name=din", f"features={with_time_gaps(ML1M_FEATURES, scratch)}"]
    if side in ("none", "pooled"):
        return [
            "model.name=din",
            f"model.params.sequence_pooling={'mean' if side == 'pooled' else 'none'}",
        ]
    return [f"model.name={side}"]


def chosen_sides(text: str, known: tuple[str, ...]) -> list[str]:
    """The sides of ``--sides``; exits naming any unknown one."""
    sides = [s for s in text.split(",") if s]
    unknown = [s for s in sides if s not in known]
    if unknown:
        raise SystemExit(f"--sides: {unknown} unknown; choose from {', '.join(known)}")
    return sides


def prepare_data(
    kind: str,
    scratch: pathlib.Path,
    built: str | None,
    source: str | None,
    rows_per_day: int,
    history_length: int | None = None,
) -> tuple[str, str, list[str]]:
    """``(data root, config, --set values)`` of ``--data amazon`` or ``ml1m`` (built into
    ``scratch`` from ``source`` unless ``built`` holds a converted set) or ``synthetic``
    (written to ``scratch``: 3 days, train on 2, evaluate on the 3rd; histories of up to
    ``history_length`` items when given)."""
    if kind == "ml1m":
        data = built or str(scratch / "ml1m")
        if not (pathlib.Path(data) / "dt=2026-01-01").exists():
            if source is None:
                raise SystemExit("--data ml1m: give --ml1m DIR (a converted set) or --raw RAW")
            command = [sys.executable, "-m", "benchmarks.datasets.ml1m_sequences"]
            command += ["--raw", source, "--out", data]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        return data, str(ML1M_CONFIG), []
    if kind == "amazon":
        data = built or str(scratch / "amazon")
        if not (pathlib.Path(data) / "summary.json").exists():
            command = [
                sys.executable,
                str(ROOT / "benchmarks" / "amazon_sequences.py"),
                "--out",
                data,
            ] + (["--source", source] if source else [])
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        return data, str(AMAZON_CONFIG), []
    data = str(scratch / "behaviour")
    cli(
        "data",
        "synth",
        "--dataset",
        "behaviour",
        "--out",
        data,
        "--days",
        "3",
        "--rows-per-day",
        str(rows_per_day),
        "--seed",
        "7",
        "--quiet",
        *(["--history-length", str(history_length)] if history_length else []),
    )
    extra = [
        f"features={SYNTHETIC_FEATURES}",
        "data.train={dates: 2026-01-01..2026-01-02}",
        "data.eval={dates: 2026-01-03}",
        "data.validation=null",
    ]
    return data, str(AMAZON_CONFIG), extra


def train_and_evaluate(
    config: str, data: str, run: pathlib.Path, settings: list[str], seed: int
) -> dict:
    shutil.rmtree(run, ignore_errors=True)
    sets = []
    for item in [
        *settings,
        f"train.seed={seed}",
        f"input.seed={seed}",
        "train.log_every_seconds=0",
    ]:
        sets += ["--set", item]
    cli("train", "--config", config, "--data", data, "--model-dir", str(run), *sets)
    result = json.loads((run / "train_result.json").read_text())
    label = result["eval"]["labels"]["click"]
    return {
        "auc": label["auc"],
        "logloss": label["logloss"],
        "oracle_auc": (label.get("oracle") or {}).get("auc"),
        "ex_per_s": result.get("warm_examples_per_second") or result["examples_per_second"],
    }


def round_printer(seed: int) -> Callable[[int, dict], None]:
    """The ``show`` of :func:`common.interleaved` for one seed's round: each side's AUC,
    logloss and examples/s as it finishes."""

    def show(round_: int, done: dict) -> None:
        side, r = list(done.items())[-1]
        print(
            f"seed {seed} {side:7s} AUC {r['auc']:.4f} logloss {r['logloss']:.4f} "
            f"{r['ex_per_s']:,.0f} ex/s",
            flush=True,
        )

    return show


def mean_se(values: list[float]) -> str:
    mean = statistics.mean(values)
    if len(values) < 2:
        return f"{mean:.4f}"
    return f"{mean:.4f} (se {statistics.stdev(values) / len(values) ** 0.5:.4f})"


def gap_line(name: str, gaps: list[float]) -> str:
    se = statistics.stdev(gaps) / len(gaps) ** 0.5 if len(gaps) > 1 else float("nan")
    return (
        f"{name} - pooled per seed: "
        + ", ".join(f"{g:+.4f}" for g in gaps)
        + f"; mean {statistics.mean(gaps):+.4f} (se {se:.4f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=("amazon", "ml1m", "synthetic"), default="amazon")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument(
        "--amazon", help="the converted Amazon set (benchmarks/amazon_sequences.py --out DIR)"
    )
    parser.add_argument("--source", help="Video.txt for the converter when --amazon is not built")
    parser.add_argument(
        "--ml1m", help="the converted MovieLens-1M set (benchmarks/datasets/ml1m_sequences.py)"
    )
    parser.add_argument("--raw", help="ratings.dat and movies.dat when --ml1m is not built")
    parser.add_argument(
        "--rows-per-day", type=int, default=200_000, help="synthetic rows per day (default 200000)"
    )
    parser.add_argument(
        "--peer",
        action="store_true",
        help="also run DeepCTR's DIN (benchmarks/peer_din.py) on the Amazon rows",
    )
    parser.add_argument(
        "--peer-epochs",
        type=int,
        default=2,
        help="passes of the peer (default 2, as configs/amazon_din.yaml)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for every side",
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    sides = chosen_sides(args.sides, SIDES)
    if "din_gaps" in sides and args.data != "ml1m":
        raise SystemExit("--sides din_gaps: only --data ml1m has the time gaps")
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="sequence_quality_"))
    try:
        built, source = (args.ml1m, args.raw) if args.data == "ml1m" else (args.amazon, args.source)
        data, config, extra = prepare_data(args.data, scratch, built, source, args.rows_per_day)
        print(f"data {args.data} ({data}); config {config}; seeds {seeds}; sides {sides}")
        results: dict[str, list[dict]] = {side: [] for side in sides}
        for seed in seeds:
            one = interleaved(
                {
                    side: (
                        lambda side=side, seed=seed: train_and_evaluate(
                            config,
                            data,
                            scratch / side,
                            [*extra, *side_settings(side, scratch), *args.set],
                            seed,
                        )
                    )
                    for side in sides
                },
                1,
                show=round_printer(seed),
            )
            for side in sides:
                results[side] += one[side]
        print()
        for side in sides:
            aucs = [r["auc"] for r in results[side]]
            speed_best, speed_median = best_median(r["ex_per_s"] for r in results[side])
            print(
                f"{side:7s} AUC mean {mean_se(aucs)} over {len(aucs)} seeds; ex/s best "
                f"{speed_best:,.0f} median {speed_median:,.0f}"
            )
        if "pooled" in sides:
            base = [r["auc"] for r in results["pooled"]]
            base_speed = statistics.median(r["ex_per_s"] for r in results["pooled"])
            for side in sides:
                if side == "pooled":
                    continue
                gaps = [r["auc"] - b for r, b in zip(results[side], base)]
                speed = statistics.median(r["ex_per_s"] for r in results[side]) / base_speed
                print(gap_line(side, gaps) + f"; speed {speed:.2f}x pooled (medians)")
            oracle = [r["oracle_auc"] for r in results["pooled"] if r["oracle_auc"]]
            if oracle:
                ceiling = statistics.mean(oracle)
                print(f"oracle AUC {ceiling:.4f}")
                for side in sides:
                    if side in ("pooled", "none"):
                        continue
                    closed = [(r["auc"] - b) / (ceiling - b) for r, b in zip(results[side], base)]
                    print(
                        f"{side} closes {statistics.mean(closed):.0%} of the gap between "
                        f"pooled and the oracle (per seed: "
                        + ", ".join(f"{c:.0%}" for c in closed)
                        + ")"
                    )
        if args.peer and args.data == "amazon":
            peer = subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "benchmarks" / "peer_din.py"),
                    "--data",
                    data,
                    "--seeds",
                    ",".join(map(str, seeds)),
                    "--epochs",
                    str(args.peer_epochs),
                    "--out-json",
                    str(scratch / "peer.json"),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            print(peer.stdout.strip())
            peer_aucs = [
                r["test_auc"] for r in json.loads((scratch / "peer.json").read_text())["seeds"]
            ]
            if "din" in sides:
                gaps = [r["auc"] - p for r, p in zip(results["din"], peer_aucs)]
                print(
                    "din - peer DIN per seed: "
                    + ", ".join(f"{g:+.4f}" for g in gaps)
                    + f"; mean {statistics.mean(gaps):+.4f}"
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
