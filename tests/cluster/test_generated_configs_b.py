"""Generated configs end to end, the second half of the fixed seeds
(:data:`tests.support.config_space.FIXED_SEEDS`), checked as ``test_generated_configs_a.py``
says: two modules, so that the two processes of ``make test`` share them."""

from __future__ import annotations

import pytest

from tests.support.config_space import FIXED_SEEDS, draw, run_case

pytestmark = pytest.mark.cluster

CASES = [draw(seed) for seed in FIXED_SEEDS["b"]]


@pytest.mark.parametrize("case", CASES, ids=[case.description for case in CASES])
def test_a_drawn_config_runs_end_to_end_or_is_refused_by_validate(case, tmp_path):
    outcome = run_case(case, tmp_path, validate=False)
    assert outcome.passed, outcome.report()
