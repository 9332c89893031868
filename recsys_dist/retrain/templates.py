"""Date templates of the daily retraining: ``"{date-6}..{date}"`` relative to a run date."""

from __future__ import annotations

import datetime
import re

from recsys_dist.config.sections import DateRange

_TERM = re.compile(r"^\{date(?:([+-])(\d+))?\}$")


def _day(term: str, date: datetime.date) -> datetime.date:
    match = _TERM.match(term.strip())
    if not match:
        raise ValueError(
            f"{term!r} is not a date term; write {{date}}, {{date-N}} or "
            '{date+N}, e.g. "{date-6}..{date}"'
        )
    sign, days = match.group(1), int(match.group(2) or 0)
    return date + datetime.timedelta(days=-days if sign == "-" else days)


def render(template: str, date: datetime.date) -> DateRange:
    """The dates ``template`` means for run date ``date``.

    Raises:
      ValueError: the template is not ``TERM`` or ``TERM..TERM`` with terms ``{date}``,
        ``{date-N}``, ``{date+N}``, or its range ends before it starts.
    """
    parts = str(template).split("..")
    if len(parts) > 2:
        raise ValueError(f"{template!r}: expected TERM or TERM..TERM")
    first, last = _day(parts[0], date), _day(parts[-1], date)
    if last < first:
        raise ValueError(f"{template!r} ends before it starts")
    return DateRange(first, last)
