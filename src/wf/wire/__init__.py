"""The wire contract: what may cross the boundary between wf processes.

The server, the ``App`` client and the worker SDK all import this package,
so a value is refused at the edge of the process that produced it as well
as at the server, and the three cannot disagree on a method:

- :mod:`~wf.wire.methods`, :mod:`~wf.wire.contract`: how a method is
  declared, and every method wf serves;
- :mod:`~wf.wire.scheduler_methods`, :mod:`~wf.wire.workflow_methods`,
  :mod:`~wf.wire.schedule_methods`: each family's parameters, results and
  declarations;
- :mod:`~wf.wire.workflow`, :mod:`~wf.wire.triggers`,
  :mod:`~wf.wire.scheduler`: the documents that travel (plans, artifacts,
  deployments, triggers, bounded activities);
- :mod:`~wf.wire.bounds`, :mod:`~wf.wire.paging`, :mod:`~wf.wire.payloads`:
  the bounds on every value, page cursors, the payload convention.

It imports :mod:`wf.errors` and the scheduler core's value modules (model,
outputs, timer) and nothing of the server, the store, the node, the runtime
or the schedules layer (``tests/test_import_layers.py``). This file imports
nothing, so the core may use :mod:`~wf.wire.bounds` without loading the rest.
"""
