"""wf's packages import one way only, and the SDKs never load the server side.

The layers, lowest first (each may import what is below it, never above):

    base          wf, wf.errors, wf.clock, wf.tuning, wf.tenancy, wf.log_lines,
                  wf.wire.bounds, wf.wire.paging   (leaf modules, usable anywhere)
    wf.scheduler  the WF-005 core
    wf.store      ← wf.scheduler
    wf.node       ← wf.store   (the module wf.node and its read port, wf.node_reads)
    wf.runtime    ← wf.node, wf.wire
    wf.schedules  ← wf.runtime
    wf.server     ← wf.schedules, wf.activities (its local server runs workers in-process)
    wf.testing, wf.cli   the top: may import anything

    wf.flow       ← wf.runtime (plan validation), wf.worker (activity declarations)

    wf.wire       ← the scheduler's pure value modules only (the wire contract)
    wf.client     ← wf.wire
    wf.worker     ← wf.wire, and the client's transport (it speaks JSON-RPC through it)
    wf.activities ← wf.worker

Every ``import`` and ``from ... import`` of every module under ``src/wf`` is
read with :mod:`ast` (function-level and ``TYPE_CHECKING`` imports included:
a deferred import is still a dependency), and each one that crosses a
package boundary must go down. A second test imports the worker SDK and the
client in a fresh interpreter and checks that no server, store or node
module was loaded.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Final

SRC: Final = Path(__file__).resolve().parents[1] / "src"

BASE: Final = frozenset(
    {
        "wf",
        "wf.errors",
        "wf.clock",
        "wf.tuning",
        "wf.tenancy",
        "wf.log_lines",
        "wf.wire.bounds",
        "wf.wire.paging",
    }
)
"""Leaf modules any layer may import (they import only one another)."""

DEPENDS_ON: Final[dict[str, frozenset[str]]] = {
    "wf.scheduler": frozenset(),
    "wf.store": frozenset({"wf.scheduler"}),
    "wf.node": frozenset({"wf.store"}),
    "wf.runtime": frozenset({"wf.node", "wf.wire"}),
    "wf.schedules": frozenset({"wf.runtime"}),
    "wf.server": frozenset({"wf.schedules", "wf.activities"}),
    "wf.testing": frozenset({"wf.server", "wf.flow"}),
    "wf.cli": frozenset({"wf.testing", "wf.flow"}),
    "wf.wire": frozenset({"wf.scheduler"}),
    "wf.client": frozenset({"wf.wire"}),
    "wf.worker": frozenset({"wf.client", "wf.wire"}),
    "wf.activities": frozenset({"wf.worker"}),
    "wf.flow": frozenset({"wf.runtime", "wf.worker"}),
}
"""The layers each layer sits on directly; what it may import is the closure."""

NARROW: Final[dict[tuple[str, str], frozenset[str]]] = {
    # The contract and the SDKs use the core's value types, never its machinery.
    (layer, "wf.scheduler"): frozenset(
        {"wf.scheduler", "wf.scheduler.model", "wf.scheduler.outputs", "wf.scheduler.timer"}
    )
    for layer in ("wf.wire", "wf.client", "wf.worker")
} | {
    # The worker speaks JSON-RPC through the client's transport, not its admin App.
    ("wf.worker", "wf.client"): frozenset(
        {"wf.client", "wf.client.rpc_client", "wf.client.http1", "wf.client.tls"}
    ),
}
"""Where a layer may import only some modules of a layer below it."""

MEMBERS: Final[dict[str, str]] = {"wf.node_reads": "wf.node"}
"""Modules that belong to a layer whose name is not their prefix (the node layer is a
module, so its read port sits beside it)."""

EXCEPTIONS: Final[dict[tuple[str, str], str]] = {}
"""``(importer, imported)`` module pairs allowed against the layers, each with its reason."""

SERVER_SIDE: Final = ("wf.server", "wf.store", "wf.node")
"""Packages a process running only the worker SDK or the client never loads."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> Iterator[str]:
    """Every wf module ``path`` imports (``from a import b`` yields ``a.b`` as well as
    ``a``: ``b`` may be a submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                assert node.module is not None
                source = node.module
            yield source
            for alias in node.names:
                yield f"{source}.{alias.name}"


@cache
def _known_modules() -> frozenset[str]:
    return frozenset(_module_name(p) for p in (SRC / "wf").rglob("*.py"))


def _unit(module: str) -> str | None:
    """The base module or layer ``module`` belongs to (``None``: not wf's)."""
    if module in BASE:
        return module
    if module in MEMBERS:
        return MEMBERS[module]
    candidates = [
        layer for layer in DEPENDS_ON if module == layer or module.startswith(layer + ".")
    ]
    if candidates:
        return max(candidates, key=len)
    return None


@cache
def _below(layer: str) -> frozenset[str]:
    """Every layer ``layer`` may import (the closure of :data:`DEPENDS_ON`)."""
    found: set[str] = set()
    for lower in DEPENDS_ON[layer]:
        found |= {lower, *_below(lower)}
    return frozenset(found)


def _problem(importer: str, imported: str) -> str | None:
    """Why ``importer`` may not import ``imported`` (``None``: it may)."""
    here, there = _unit(importer), _unit(imported)
    if there is None or here == there:
        return None
    assert here is not None, importer
    if there in BASE:
        return None
    if here in BASE:
        return f"base module {here} imports the layer {there}"
    if there not in _below(here):
        return f"{here} may not import {there}"
    allowed = NARROW.get((here, there))
    if allowed is not None and imported not in allowed:
        return f"{here} may import only {sorted(allowed)} of {there}"
    return None


def _violations() -> list[str]:
    known = _known_modules()
    found: list[str] = []
    for path in sorted((SRC / "wf").rglob("*.py")):
        importer = _module_name(path)
        for imported in sorted(set(_imports(path, importer))):
            if imported not in known or (importer, imported) in EXCEPTIONS:
                continue
            problem = _problem(importer, imported)
            if problem is not None:
                found.append(f"{importer} imports {imported}: {problem}")
    return found


def test_every_package_imports_only_downward() -> None:
    violations = _violations()
    assert not violations, "upward or sideways imports:\n" + "\n".join(violations)


def test_every_module_belongs_to_a_layer() -> None:
    homeless = sorted(m for m in _known_modules() if _unit(m) is None)
    assert not homeless, f"modules of no layer (add them to the layers above): {homeless}"


def test_the_packages_of_base_modules_import_only_base_modules() -> None:
    # Importing wf.wire.bounds runs wf/wire/__init__.py first: what it imports, the
    # core would load too.
    for module in BASE:
        package = module.rpartition(".")[0]
        if package:
            loaded = set(_imports(_path_of(package), package)) & _known_modules()
            assert loaded <= BASE, f"{package}/__init__.py imports {sorted(loaded - BASE)}"


def test_the_exceptions_are_still_needed() -> None:
    stale = [
        pair
        for pair in EXCEPTIONS
        if pair[1] not in set(_imports(_path_of(pair[0]), pair[0])) or _problem(*pair) is None
    ]
    assert not stale, f"exceptions no longer needed (remove them): {stale}"


def _path_of(module: str) -> Path:
    relative = Path(*module.split("."))
    package = SRC / relative / "__init__.py"
    return package if package.exists() else SRC / relative.with_suffix(".py")


def test_the_checker_catches_an_upward_import() -> None:
    assert _problem("wf.runtime.dag", "wf.worker.activity") == (
        "wf.runtime may not import wf.worker"
    )
    assert _problem("wf.client.app", "wf.server.scheduler_api") == (
        "wf.client may not import wf.server"
    )
    assert _problem("wf.wire.workflow", "wf.runtime.plan") == "wf.wire may not import wf.runtime"
    assert _problem("wf.scheduler.model", "wf.store.codec") == (
        "wf.scheduler may not import wf.store"
    )
    assert _problem("wf.worker.runtime", "wf.scheduler.dispatcher") is not None
    assert _problem("wf.worker.runtime", "wf.client.app") is not None
    assert _problem("wf.wire.bounds", "wf.wire.scheduler") is not None
    assert _problem("wf.server.app", "wf.store") is None
    assert _problem("wf.worker.runtime", "wf.client.rpc_client") is None


def _loaded_after(statement: str) -> list[str]:
    code = (
        f"import sys\n{statement}\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m == 'wf' or m.startswith('wf.'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.split()


def test_the_pure_runtime_modules_load_neither_the_store_nor_the_node() -> None:
    # The plan and the DAG engine are pure: a tool that validates a plan, or a test
    # of the DAG engine, must not pay for (or depend on) the server side.
    for statement in ("import wf.runtime.dag", "import wf.runtime.plan"):
        loaded = _loaded_after(statement)
        assert "wf.runtime" in loaded, statement
        server_side = [m for m in loaded if m.startswith(("wf.store", "wf.node"))]
        assert not server_side, f"{statement} loads {server_side}"


def test_the_worker_sdk_and_the_client_load_nothing_of_the_server_side() -> None:
    for statement in (
        "import wf.worker",
        "import wf.client",
        "from wf.client import App",
        "import wf.cli.schedules_cmd",
        "import wf.cli.runs_cmd",
        "import wf.cli.catalog_cmd",
        "import wf.cli.fleet_cmd",
    ):
        loaded = _loaded_after(statement)
        assert loaded, statement
        server_side = [m for m in loaded if m.startswith(SERVER_SIDE)]
        assert not server_side, f"{statement} loads {server_side}"
