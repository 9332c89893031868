"""Generated configs end to end, first half of the fixed seeds
(:data:`tests.support.config_space.FIXED_SEEDS`; the second half is in
``test_generated_configs_b.py``, so that each module takes about 4 minutes).

Each seed draws a small but complete config from the space a user can write
(:func:`tests.support.config_space.draw`) and its Parquet data, with nulls, empty lists
and lists longer than ``max_length``. A config the project accepts must go through
``train``, ``evaluate`` and ``export`` with exit code 0, and a fresh process that has only
TensorFlow must serve every evaluated row with the probability ``evaluate`` wrote for it
(to 1e-5). A config refused on purpose must be refused by ``validate`` and by ``train``
with exit code 2 and one ``error:`` line naming the key. ``validate`` of an accepted config
is left to the command line runner (``python -m tests.support.config_space``), which runs
it too: ``train`` loads the config the same way.
"""

from __future__ import annotations

import pytest

from tests.support.config_space import FIXED_SEEDS, draw, must_cover, run_case

pytestmark = pytest.mark.cluster

CASES = [draw(seed) for seed in FIXED_SEEDS["a"]]


def test_the_fixed_seeds_draw_what_they_were_chosen_for():
    """Both modules' seeds: each still draws its tags, and together they cover every
    model, strategy and server count, dynamic tables of different capacities, shared
    tables, a sequence with its side, and the refusals."""
    covered = set()
    for seeds in FIXED_SEEDS.values():
        for seed, tags in seeds.items():
            case = draw(seed)
            assert set(tags) <= set(case.covers), (seed, tags, case.covers)
            capacities = case.dynamic_capacities()
            assert len(set(capacities)) == len(capacities), (seed, capacities)
            covered |= set(case.covers)
    assert must_cover() <= covered, sorted(must_cover() - covered)


@pytest.mark.parametrize("case", CASES, ids=[case.description for case in CASES])
def test_a_drawn_config_runs_end_to_end_or_is_refused_by_validate(case, tmp_path):
    outcome = run_case(case, tmp_path, validate=False)
    assert outcome.passed, outcome.report()
