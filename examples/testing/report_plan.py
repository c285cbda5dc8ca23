"""The daily sales report: a plan over ``report_activities`` and its schedule."""

from __future__ import annotations

from typing import Any

REGIONS = ["north", "south", "west"]

REPORT_PLAN: dict[str, Any] = {
    "nodes": [
        # Fan out: one fetch per region, all at once.
        *(
            {"kind": "activity", "id": r, "activity_type": "fetch_sales", "args": {"region": r}}
            for r in REGIONS
        ),
        # Fan in: the summary needs every region.
        {
            "kind": "activity",
            "id": "summary",
            "activity_type": "summarize",
            "args": {"totals": [{"$node": r} for r in REGIONS]},
            "needs": REGIONS,
        },
        {
            "kind": "activity",
            "id": "publish",
            "activity_type": "publish",
            "args": {"text": {"$node": "summary", "path": "text"}},
            "needs": ["summary"],
        },
    ],
    "output": {"total": {"$node": "summary", "path": "total"}},
}

DAILY_AT_SEVEN = {"kind": "cron", "expression": "0 7 * * *", "timezone": "Europe/Paris"}
"""The report's schedule: every morning at 07:00, Paris time."""
