"""Date templates of the daily retraining (``recsys_dist/retrain/templates.py``):
``{date}``, ``{date-N}`` and ``{date+N}`` terms, single or as a range, and each rejection."""

from __future__ import annotations

import datetime
import re

import pytest

from recsys_dist.config.sections import DateRange
from recsys_dist.retrain.templates import render

DAY = datetime.date(2026, 3, 1)


@pytest.mark.parametrize(
    "template, first, last",
    [
        ("{date}", "2026-03-01", "2026-03-01"),
        ("{date-6}..{date}", "2026-02-23", "2026-03-01"),
        ("{date-1}", "2026-02-28", "2026-02-28"),
        ("{date+1}..{date+2}", "2026-03-02", "2026-03-03"),
        (" {date-30} .. {date-1} ", "2026-01-30", "2026-02-28"),
        ("{date-0}..{date+0}", "2026-03-01", "2026-03-01"),
    ],
)
def test_a_template_renders_the_dates_of_its_run_date(template, first, last):
    assert render(template, DAY) == DateRange(
        datetime.date.fromisoformat(first), datetime.date.fromisoformat(last)
    )


def test_leap_days_and_year_ends_are_calendar_days():
    assert str(render("{date-1}..{date+1}", datetime.date(2028, 2, 29))) == "2028-02-28..2028-03-01"
    assert str(render("{date-7}", datetime.date(2026, 1, 3))) == "2025-12-27"


@pytest.mark.parametrize(
    "template, message",
    [
        ("{date}..{date}..{date}", "'{date}..{date}..{date}': expected TERM or TERM..TERM"),
        (
            "{day-1}",
            "'{day-1}' is not a date term; write {date}, {date-N} or {date+N}, e.g. "
            '"{date-6}..{date}"',
        ),
        ("2026-03-01", "'2026-03-01' is not a date term"),
        ("{date}..{date - 1}", "'{date - 1}' is not a date term"),
        ("{date-x}", "'{date-x}' is not a date term"),
        ("{date}..{date-1}", "'{date}..{date-1}' ends before it starts"),
        ("", "'' is not a date term"),
    ],
)
def test_a_bad_template_is_named_with_what_to_write(template, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        render(template, DAY)
