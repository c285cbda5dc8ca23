"""An order workflow written in Python with wf.flow (docs/workflows.md,
"Writing workflows in Python").

Each order is priced by its own activity (a fan-out of at most 500, 8 at a
time), the totals are summed, and a review ticket is opened only when the sum
is over a limit (a condition: otherwise the node shows as skipped and the
output ``review`` is null). Try it against a server, from this folder::

    uv run wf-rpc-server --store-root .wf_store --enable-scheduler
    uv run wf worker --app flow_orders:ACTIVITIES
    uv run wf deploy flow_orders:orders --name nightly --cron "0 2 * * *" --tz Europe/Paris
    uv run wf runs start orders.nightly --wait \\
        --input 'orders=[{"id": "a", "amount": 30}, {"id": "b", "amount": 120}]'

``tests/flow/test_flow_example_runs.py`` runs it on a local server.
"""

from __future__ import annotations

from typing import Any

from wf import flow
from wf.worker import activity


@activity(name="price_order", idempotent=True)
def price_order(order: dict[str, Any], vat: float) -> dict[str, float]:
    """The order's amount with VAT."""
    return {"total": round(float(order["amount"]) * (1 + vat), 2)}


@activity(name="sum_totals", idempotent=True)
def sum_totals(priced: list[dict[str, float]]) -> dict[str, float]:
    """The sum of the priced orders."""
    return {"sum": round(sum(p["total"] for p in priced), 2)}


@activity(name="open_review")
def open_review(total: float, reason: str) -> dict[str, str]:
    """Open a review ticket (not idempotent: never run twice after a crash)."""
    return {"ticket": f"review {total:g}: {reason}"}


ACTIVITIES = [price_order, sum_totals, open_review]
"""What a worker serving this workflow registers."""


@flow.workflow("orders")
def orders() -> flow.Outputs:
    """Price every order, sum them, open a review over the limit."""
    items = flow.input("orders", list[dict[str, Any]])
    vat = flow.input("vat", float, default=0.2)
    limit = flow.input("review_over", float, default=100.0)
    priced = flow.map(price_order, items, order=flow.item, vat=vat, max_items=500, concurrency=8)
    total = flow.call(sum_totals, priced=priced)
    with flow.when(total["sum"] > limit, id="over_limit"):
        review = flow.call(open_review, total=total["sum"], reason="over the limit")
    return {"total": total["sum"], "review": review["ticket"]}
