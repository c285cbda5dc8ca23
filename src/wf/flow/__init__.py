"""Workflows written in Python: a builder that produces today's plan documents.

::

    from wf import flow
    from myapp.activities import double, add

    @flow.workflow("sums")
    def sums() -> flow.Outputs:
        n = flow.input("n", int)
        a = flow.call(double, x=n)
        b = flow.call(add, x=a["value"], y=n)
        return {"total": b["value"]}

``sums`` is a :class:`Flow`: ``sums.plan`` is the validated
:class:`~wf.wire.workflow.Plan` (the same one, with the same content hash, as
the hand-written JSON), ``sums.artifact_id`` is ``"sums"``. ``wf deploy
myapp.flows:sums --name default`` publishes it. See docs/workflows.md,
"Writing workflows in Python", and :mod:`wf.flow.builder` for the rules.
"""

from __future__ import annotations

from wf.flow.builder import (
    Condition,
    Flow,
    Outputs,
    TimerFired,
    build,
    call,
    check_signature,
    input,
    interrupt,
    map,
    timer,
    when,
    workflow,
)
from wf.flow.refs import (
    Expr,
    Input,
    Item,
    Output,
    Ref,
    all_of,
    any_of,
    contains,
    eq,
    exists,
    item,
    ne,
    not_,
)

__all__ = [
    "Condition",
    "Expr",
    "Flow",
    "Input",
    "Item",
    "Output",
    "Outputs",
    "Ref",
    "TimerFired",
    "all_of",
    "any_of",
    "build",
    "call",
    "check_signature",
    "contains",
    "eq",
    "exists",
    "input",
    "interrupt",
    "item",
    "map",
    "ne",
    "not_",
    "timer",
    "when",
    "workflow",
]
