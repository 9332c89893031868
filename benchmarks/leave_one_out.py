"""Defaults chosen leaving one dataset out (``peer_quality.py --defaults --leave-one-out``).

Every candidate set of defaults (:data:`CANDIDATES`, each a set of ``--set`` items) runs
on every public dataset of ``--datasets`` with ``benchmarks/datasets/configs/NAME.yaml``
(features, split and model only) and the data under ``--data``/NAME: the zoo's ``lr``,
``deepfm`` and ``dcn_v2`` over ``--seeds``, each deep model beside its one-process
reference; scikit-learn's logistic regression and LightGBM once per dataset. Each cell is
one ``peer_quality.py --defaults --json`` run kept under ``--work-dir`` and reused by a
later call. For each dataset, the candidate chosen is the one with the best mean rank on
the *other* datasets (rank by the mean held-out AUC of the three models); the table gives
its figures on the dataset left out, against the peers, and the last lines say for each
target on how many datasets it is met, with the numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import subprocess
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
MODELS = ("lr", "deepfm", "dcn_v2")
LR_TO_LOGREG, BEST_TO_PEERS, ZOO_TO_REFERENCE = -0.003, -0.002, -0.002


def _linear_rate(cap: float):
    """The candidate whose linear part's Adagrad rate is ``min(cap, 1/sqrt(F))`` for the
    dataset's F features."""

    def items(features: int) -> list[str]:
        rate = round(min(cap, 1 / math.sqrt(features)), 4)
        return [f"train.linear_optimizer={{name: adagrad, learning_rate: {rate}}}"]

    return items


def _candidate(cap: float, passes: int, patience: int = 1):
    """A candidate set of defaults: the linear rate cap, the most passes with a validation
    split, early stopping's patience; every one given explicitly, so a candidate means the
    same whatever the shipped defaults are."""

    def items(features: int) -> list[str]:
        stopping = [f"train.early_stopping={{patience: {patience}}}"] if patience != 1 else []
        return [*_linear_rate(cap)(features), f"train.epochs={passes}", *stopping]

    return items


#: Candidate defaults: name -> ``--set`` items given the dataset's number of features. The
#: shipped defaults are the first, the cap 0.5 with up to 30 passes
#: (``config/model_params.py``, ``config/chosen_defaults.py``); it runs the peers.
CANDIDATES = {
    "linear rate cap 0.5, up to 30 passes": _candidate(0.5, 30),
    "linear rate cap 0.5, up to 30 passes, patience 2": _candidate(0.5, 30, patience=2),
    "linear rate cap 0.2, up to 10 passes": _candidate(0.2, 10),
}
FIRST = next(iter(CANDIDATES))


def feature_count(config_path: pathlib.Path) -> int:
    """Features ``lr`` reads from the dataset's config (its linear part's F)."""
    from recsys_dist.config import load_config

    return len(load_config(config_path, ["model.name=lr"]).inputs["wide"])


def cell(args, dataset: str, candidate: str, peers: bool) -> dict:
    """One dataset under one candidate: the JSON of its ``peer_quality.py`` run, run now
    unless ``--work-dir`` holds it already."""
    work = pathlib.Path(args.work_dir) / dataset / candidate.replace(" ", "_").replace(",", "")
    result = work / "result.json"
    if result.exists():
        return json.loads(result.read_text())
    work.mkdir(parents=True, exist_ok=True)
    config = HERE / "datasets" / "configs" / f"{dataset}.yaml"
    command = [
        sys.executable,
        str(HERE / "peer_quality.py"),
        "--defaults",
        "--config",
        str(config),
        "--data",
        str(pathlib.Path(args.data) / dataset),
        "--models",
        ",".join(MODELS),
        "--seeds",
        ",".join(str(s) for s in args.seeds),
        "--work-dir",
        str(work),
        "--json",
        str(work / "partial.json"),
        *(() if peers else ("--no-peers",)),
    ]
    for item in [*CANDIDATES[candidate](feature_count(config)), *args.set]:
        command += ["--set", item]
    print(f"  ... {dataset}, {candidate}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
    with open(work / "run.log", "w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    (work / "partial.json").rename(result)
    return json.loads(result.read_text())


def zoo_aucs(result: dict, model: str) -> list[float]:
    """The zoo's held-out AUC of ``model`` per seed."""
    return [r["auc"] for r in result["runs"] if r["method"] == f"{model} (zoo)"]


def reference_gaps(result: dict, model: str) -> list[float]:
    """Zoo minus one-process reference, seed by seed."""
    by = {(r["method"], r["seed"]): r["auc"] for r in result["runs"]}
    return [
        by[(f"{model} (zoo)", seed)] - by[(f"{model} one process", seed)]
        for (method, seed) in by
        if method == f"{model} one process" and (f"{model} (zoo)", seed) in by
    ]


def standard_error(values: list[float]) -> float:
    return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0


def peers(result: dict) -> dict[str, float]:
    """``{"logreg": AUC, "lightgbm": AUC}`` of a run with peers (logreg at its best C)."""
    rows = [r for r in result["rows"] if r["kind"] == "peer"]
    return {
        "logreg": max(r["auc"] for r in rows if r["method"].startswith("logreg")),
        "lightgbm": max(r["auc"] for r in rows if r["method"].startswith("lightgbm")),
    }


def choose(scores: dict[str, dict[str, float]], left_out: str) -> str:
    """The candidate with the best mean rank on every dataset but ``left_out`` (``scores``:
    dataset -> candidate -> mean zoo AUC; candidates with equal AUC share the mean of
    their ranks); ties go to the higher mean AUC, then to the earlier candidate."""
    ranks: dict[str, list[float]] = {c: [] for c in CANDIDATES}
    for dataset, by_candidate in scores.items():
        if dataset == left_out:
            continue
        values = list(by_candidate.values())
        for candidate, value in by_candidate.items():  # tied candidates share their ranks
            above, tied = sum(v > value for v in values), sum(v == value for v in values)
            ranks[candidate].append(above + (tied + 1) / 2)
    others = [d for d in scores if d != left_out]
    return min(
        CANDIDATES,
        key=lambda c: (np.mean(ranks[c]), -np.mean([scores[d][c] for d in others])),
    )


def fold_lines(dataset: str, chosen: str, result: dict, peer: dict[str, float]) -> dict:
    """The figures of one held-out dataset under the candidate chosen without it."""
    mean = {m: float(np.mean(zoo_aucs(result, m))) for m in MODELS}
    error = {m: standard_error(zoo_aucs(result, m)) for m in MODELS}
    best_model = max(mean, key=mean.get)
    best_peer = max(peer, key=peer.get)
    gaps = {m: reference_gaps(result, m) for m in MODELS if m != "lr"}
    return {
        "dataset": dataset,
        "chosen": chosen,
        "mean": mean,
        "error": error,
        "peer": peer,
        "lr_gap": mean["lr"] - peer["logreg"],
        "best": (best_model, mean[best_model] - peer[best_peer], best_peer),
        "reference": {m: (float(np.mean(g)), standard_error(g)) for m, g in gaps.items()},
    }


def table(folds: list[dict]) -> str:
    header = (
        "| held out | defaults chosen on the others | lr | deepfm | dcn_v2 | logreg | "
        "LightGBM | lr - logreg | best zoo - better peer | deepfm - one process | "
        "dcn_v2 - one process |"
    )
    lines = [header, "|---" * 11 + "|"]
    for f in folds:
        zoo = " | ".join(f"{f['mean'][m]:.4f} ({f['error'][m]:.4f})" for m in MODELS)
        model, gap, peer = f["best"]
        refs = " | ".join(
            f"{f['reference'][m][0]:+.4f} ({f['reference'][m][1]:.4f})" for m in MODELS[1:]
        )
        lines.append(
            f"| {f['dataset']} | {f['chosen']} | {zoo} | {f['peer']['logreg']:.4f} | "
            f"{f['peer']['lightgbm']:.4f} | {f['lr_gap']:+.4f} | {gap:+.4f} ({model} vs "
            f"{peer}) | {refs} |"
        )
    return "\n".join(lines)


def target_lines(folds: list[dict]) -> list[str]:
    def verdict(values: dict[str, float], bar: float, name: str) -> str:
        missed = [d for d, v in values.items() if v < bar]
        figures = ", ".join(f"{d} {v:+.4f}" for d, v in values.items())
        line = f"target {name} {bar:+.3f}: met on {len(values) - len(missed)} of {len(values)}"
        return line + (f", NOT met on {', '.join(missed)}" if missed else "") + f" ({figures})"

    lines = [
        verdict({f["dataset"]: f["lr_gap"] for f in folds}, LR_TO_LOGREG, "lr >= logreg"),
        verdict(
            {f["dataset"]: f["best"][1] for f in folds},
            BEST_TO_PEERS,
            "best zoo >= max(LightGBM, logreg)",
        ),
    ]
    for model in MODELS[1:]:
        values = {f["dataset"]: f["reference"][model][0] for f in folds}
        lines.append(verdict(values, ZOO_TO_REFERENCE, f"{model} >= one process"))
    return lines


def run(args: argparse.Namespace) -> int:
    """Every cell, then the leave-one-out table and one line per target."""
    if not args.defaults:
        raise SystemExit("--leave-one-out needs --defaults (configs that set no training key)")
    if args.data is None or args.work_dir is None:
        raise SystemExit(
            "--leave-one-out needs --data (the root holding one directory per dataset, as "
            "benchmarks/datasets/README.md writes them) and --work-dir (keeps every run)"
        )
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    args.seeds = args.seeds or [0, 1, 2]
    results = {d: {c: cell(args, d, c, peers=(c == FIRST)) for c in CANDIDATES} for d in datasets}
    scores = {
        d: {c: float(np.mean([np.mean(zoo_aucs(r, m)) for m in MODELS])) for c, r in by.items()}
        for d, by in results.items()
    }
    print("Mean held-out AUC of lr, deepfm and dcn_v2 per candidate (each dataset):\n")
    print("| candidate | " + " | ".join(datasets) + " |")
    print("|---" * (len(datasets) + 1) + "|")
    for c in CANDIDATES:
        print(f"| {c} | " + " | ".join(f"{scores[d][c]:.4f}" for d in datasets) + " |")
    folds = []
    for d in datasets:
        chosen = choose(scores, d)
        folds.append(fold_lines(d, chosen, results[d][chosen], peers(results[d][FIRST])))
    wins = {c: sum(f["chosen"] == c for f in folds) for c in CANDIDATES}
    print(
        "\nEach dataset scored with the defaults chosen on the others (held-out AUC, mean "
        f"over seeds {', '.join(map(str, args.seeds))}, standard error in brackets):\n"
    )
    print(table(folds))
    print()
    print(
        "chosen in most folds: "
        + max(wins, key=wins.get)
        + " ("
        + ", ".join(f"{c} {n}" for c, n in wins.items())
        + ")"
    )
    for line in target_lines(folds):
        print(line)
    return 0
