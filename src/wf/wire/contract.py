"""Every JSON-RPC method wf serves, by name: the method table the server is held to.

The server builds its registry from :data:`METHODS` and refuses to start
unless every method here has a handler and every handler a method here; the
``App`` client builds its twins from the same table. Adding a method is one
:class:`~wf.wire.methods.MethodSpec` in its family module, listed there,
plus its handler on the server (and its one-line typed twin on ``App``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from wf.wire import cluster_methods, schedule_methods, scheduler_methods, workflow_methods
from wf.wire.methods import DISCOVER, WHOAMI, MethodSpec


def method_table(specs: Iterable[MethodSpec[Any]]) -> dict[str, MethodSpec[Any]]:
    """``specs`` by JSON-RPC name; two declarations of one name, or of one Python
    name, are a bug in the contract."""
    table: dict[str, MethodSpec[Any]] = {}
    python_names: set[str] = set()
    for spec in specs:
        if spec.name in table:
            raise ValueError(f"method {spec.name} is declared twice")
        if spec.python_name in python_names:
            raise ValueError(f"python name {spec.python_name} is declared twice")
        table[spec.name] = spec
        python_names.add(spec.python_name)
    return table


METHODS: Final[Mapping[str, MethodSpec[Any]]] = method_table(
    (
        *scheduler_methods.METHODS,
        *workflow_methods.METHODS,
        *schedule_methods.METHODS,
        *cluster_methods.METHODS,
        DISCOVER,
        WHOAMI,
    )
)
"""Every method of a wf server, by JSON-RPC name."""
