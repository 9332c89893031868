"""The choice and the verdicts of ``benchmarks/leave_one_out.py`` (``peer_quality.py
--defaults --leave-one-out``), on made-up results of the shape ``peer_quality.py --json``
writes: each dataset's candidate is chosen on the other datasets only, and each target
line counts the datasets it is met on."""

from __future__ import annotations

import pytest

from benchmarks import leave_one_out as loo


def result(zoo: dict[str, list[float]], reference: dict[str, list[float]] = (), peer=None):
    """A ``--json`` document: per model its zoo AUC per seed (and its one-process AUC)."""
    runs = [
        {"method": f"{m} (zoo)", "seed": s, "auc": auc, "kind": "zoo"}
        for m, aucs in zoo.items()
        for s, auc in enumerate(aucs)
    ]
    runs += [
        {"method": f"{m} one process", "seed": s, "auc": auc, "kind": "zoo"}
        for m, aucs in dict(reference).items()
        for s, auc in enumerate(aucs)
    ]
    rows = (
        [
            {"method": "logreg C=1", "kind": "peer", "auc": peer[0]},
            {"method": "lightgbm", "kind": "peer", "auc": peer[1]},
        ]
        if peer
        else []
    )
    return {"rows": rows, "runs": runs}


def test_each_fold_is_chosen_without_the_dataset_it_scores():
    candidates = list(loo.CANDIDATES)
    a, b = candidates[0], candidates[1]
    # b wins on two datasets by a little, a wins on the third by a lot
    scores = {
        "one": {c: 0.70 for c in candidates} | {b: 0.71},
        "two": {c: 0.60 for c in candidates} | {b: 0.61},
        "three": {c: 0.80 for c in candidates} | {a: 0.90},
    }
    assert loo.choose(scores, "three") == b  # chosen on one and two
    # without one: b and a each win once; a has the higher mean AUC there
    assert loo.choose(scores, "one") == a
    assert loo.choose(scores, "two") == a


def test_equal_scores_share_their_ranks(monkeypatch):
    a, b, c, d = "a", "b", "c", "d"
    monkeypatch.setattr(loo, "CANDIDATES", {name: None for name in (a, b, c, d)})
    # b and c tie where both lead; c alone leads on the third: c ranks best overall
    scores = {
        "one": {a: 0.70, b: 0.71, c: 0.71, d: 0.70},
        "two": {a: 0.60, b: 0.61, c: 0.61, d: 0.60},
        "three": {a: 0.80, b: 0.81, c: 0.82, d: 0.80},
        "four": {a: 0.5, b: 0.5, c: 0.5, d: 0.5},
    }
    assert loo.choose(scores, "four") == c
    # without three, b and c tie everywhere: the earlier one
    assert loo.choose(scores, "three") == b


def test_reference_gaps_pair_the_seeds():
    doc = result({"deepfm": [0.70, 0.72]}, {"deepfm": [0.71, 0.71]})
    assert loo.reference_gaps(doc, "deepfm") == pytest.approx([-0.01, 0.01])


def test_target_lines_count_the_datasets_met():
    zoo = {"lr": [0.745, 0.747], "deepfm": [0.75, 0.75], "dcn_v2": [0.74, 0.74]}
    refs = {"deepfm": [0.751, 0.751], "dcn_v2": [0.75, 0.75]}
    fold = loo.fold_lines("one", "shipped", result(zoo, refs), {"logreg": 0.75, "lightgbm": 0.74})
    assert fold["lr_gap"] == pytest.approx(-0.004)
    assert fold["best"][0] == "deepfm" and fold["best"][1] == pytest.approx(0.0)
    lines = loo.target_lines([fold])
    assert lines[0] == "target lr >= logreg -0.003: met on 0 of 1, NOT met on one (one -0.0040)"
    assert (
        lines[1] == "target best zoo >= max(LightGBM, logreg) -0.002: met on 1 of 1 (one +0.0000)"
    )
    assert lines[2] == "target deepfm >= one process -0.002: met on 1 of 1 (one -0.0010)"
    assert lines[3] == (
        "target dcn_v2 >= one process -0.002: met on 0 of 1, NOT met on one (one -0.0100)"
    )
    assert "| one | shipped | 0.7460 (0.0010) |" in loo.table([fold])


def test_peers_take_logreg_at_its_best_c():
    doc = result({}, peer=(0.70, 0.69))
    doc["rows"].append({"method": "logreg C=0.1", "kind": "peer", "auc": 0.71})
    assert loo.peers(doc) == {"logreg": 0.71, "lightgbm": 0.69}


def test_what_peer_quality_writes_with_json_is_what_the_leave_one_out_reads():
    import json

    from benchmarks.peer_quality import Row, json_document

    def row(method, kind, auc, seed=None):
        return Row(method, kind, auc, 0.5, float("nan"), 1.0, "setting", seed=seed)

    rows = [row("logreg C=1", "peer", 0.70), row("logreg C=0.1", "peer", 0.71)]
    rows += [row("lightgbm", "peer", 0.69), row("deepfm (zoo)", "zoo", 0.705)]
    runs = [row("deepfm (zoo)", "zoo", 0.70 + s / 100, s) for s in range(3)]
    runs += [row("deepfm one process", "peer", 0.71, s) for s in range(3)]
    document = json.loads(json_document(rows, runs))
    assert loo.zoo_aucs(document, "deepfm") == [0.70, 0.71, 0.72]
    assert loo.reference_gaps(document, "deepfm") == pytest.approx([-0.01, 0.0, 0.01])
    assert loo.peers(document) == {"logreg": 0.71, "lightgbm": 0.69}
