"""What checking a value against a plan author's JSON Schema may cost.

Theory of operation
-------------------
A plan's ``input_schema`` (and an interrupt node's) is written by a caller,
and validating against it runs on the server's event loop: when an artifact
is created (input defaults), when a deployment is saved, when a run starts
and when an interrupt is answered. ``jsonschema`` on its own lets a schema
cost without bound, and while it runs no other caller is served:

* ``pattern`` and ``patternProperties`` use Python's backtracking ``re``:
  ``^(a+)+$`` takes exponential time on 30 characters, and even ``a+b``
  takes quadratic time on a long string (seconds at 100,000 characters).
  wf refuses both keywords when a plan is created (:func:`cost_problem`);
  check formats in the activity, or list values with ``enum``.
* ``uniqueItems`` compares every pair of items that do not sort (objects,
  mixed types): 1,500 objects took 14 s. :func:`bounded_validator` replaces
  it with a hashed check, linear in the array.
* A ``$ref`` cycle that never descends into the value (``{"$ref": "#"}``)
  recursed until Python's recursion limit: an internal error on every run.
  :func:`cost_problem` refuses a schema whose check of an empty object, of
  ``null`` or of an object holding each top-level property recurses that
  way, and :func:`wf.runtime.schema.instance_problems` reports the
  recursion as a problem for any other value.

Artifacts stored by an older server are decoded, never re-validated
(:mod:`wf.runtime.plan`), so a ``pattern`` in one keeps its old cost.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import Any, Final

import jsonschema  # type: ignore[import-untyped]
from referencing.exceptions import Unresolvable

REFUSED_KEYWORDS: Final = ("pattern", "patternProperties")
"""Keywords a plan's schemas may not use (regular expressions: see the module docstring)."""

_SUBSCHEMA: Final = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "items",
        "additionalItems",
        "additionalProperties",
        "contains",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contentSchema",
    }
)
"""Keywords whose value is one schema (``items`` may also be a list in old drafts)."""
_SUBSCHEMA_LISTS: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
"""Keywords whose value is a list of schemas."""
_SUBSCHEMA_MAPS: Final = frozenset(
    {"properties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
"""Keywords whose value maps names to schemas (``dependencies`` values may be lists)."""


def cost_problem(schema: object) -> str | None:
    """Why validating against ``schema`` (already a valid JSON Schema) could cost without
    bound, or ``None``. Walks the schema's own keywords only, so data that merely
    looks like a keyword (a ``default``, an ``enum`` value, a property named
    ``pattern``) is never refused."""
    for where, keyword in _refused(schema, ""):
        return (
            f"{keyword} is not supported (at {where or '/'}): a regular expression can take "
            "exponential time to check; check the format in the activity, or use enum"
        )
    return _recursion_problem(schema)


def _refused(schema: object, where: str) -> Iterator[tuple[str, str]]:
    """``(pointer, keyword)`` of every refused keyword in ``schema`` and its subschemas."""
    if not isinstance(schema, dict):
        return
    for keyword in REFUSED_KEYWORDS:
        if keyword in schema:
            yield where, keyword
    for keyword, value in schema.items():
        at = f"{where}/{keyword}"
        if keyword in _SUBSCHEMA_MAPS and isinstance(value, dict):
            for name, inner in value.items():
                yield from _refused(inner, f"{at}/{name}")
        elif keyword in _SUBSCHEMA_LISTS and isinstance(value, list):
            for i, inner in enumerate(value):
                yield from _refused(inner, f"{at}/{i}")
        elif keyword in _SUBSCHEMA:
            yield from _refused(value, at)


def is_recursion(exc: BaseException) -> bool:
    """Whether ``exc`` is Python's recursion limit: a RecursionError, or the
    ``PanicException`` (a BaseException, not an Exception) that the ``rpds``
    extension under ``referencing`` turns one into when the limit falls inside it."""
    return isinstance(exc, RecursionError) or type(exc).__name__ == "PanicException"


_SAME_VALUE: Final = ("not", "if", "then", "else")
"""Keywords that check the same value against one subschema."""
_SAME_VALUE_LISTS: Final = ("allOf", "anyOf", "oneOf")
"""Keywords that check the same value against each of a list of subschemas."""


def _pointer(root: dict[str, Any], fragment: str) -> object:
    """The subschema a ``#/a/b`` fragment names in ``root`` (``None`` if none)."""
    found: object = root
    for raw in fragment.split("/")[1:] if fragment else ():
        part = urllib.parse.unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(found, dict) and part in found:
            found = found[part]
        elif isinstance(found, list) and part.isascii() and part.isdigit():
            found = found[int(part)] if int(part) < len(found) else None
        else:
            return None
    return found


def _same_value_next(node: dict[str, Any], root: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for keyword in _SAME_VALUE:
        if isinstance(node.get(keyword), dict):
            yield node[keyword]
    for keyword in _SAME_VALUE_LISTS:
        if isinstance(node.get(keyword), list):
            yield from (inner for inner in node[keyword] if isinstance(inner, dict))
    dependent = node.get("dependentSchemas")
    if isinstance(dependent, dict):
        yield from (inner for inner in dependent.values() if isinstance(inner, dict))
    ref = node.get("$ref")
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
        target = _pointer(root, ref[1:])
        if isinstance(target, dict):
            yield target


def _has_ref_cycle(root: dict[str, Any]) -> bool:
    """Whether, from the root, ``$ref`` (local JSON pointers) and the keywords that
    check the same value (``allOf``, ``anyOf``, ``oneOf``, ``not``, ``if``/``then``/
    ``else``, ``dependentSchemas``) lead back to a schema already on the way: checking
    any value would then recurse without end. Found statically, without ever running
    the cycle (which can end in a panic of a native extension, not an exception).
    A nested ``$id`` changes what ``#`` means: such schemas are left to the guard."""
    on_path: set[int] = set()
    done: set[int] = set()
    stack: list[tuple[dict[str, Any], Iterator[dict[str, Any]]]] = [
        (root, _same_value_next(root, root))
    ]
    on_path.add(id(root))
    while stack:
        node, following = stack[-1]
        inner = next(following, None)
        if inner is None:
            stack.pop()
            on_path.discard(id(node))
            done.add(id(node))
            continue
        if id(inner) in on_path:
            return True
        if id(inner) in done:
            continue
        if "$id" in inner:
            return False
        on_path.add(id(inner))
        stack.append((inner, _same_value_next(inner, root)))
    return False


def _recursion_problem(schema: object) -> str | None:
    if not isinstance(schema, dict):
        return None
    if _has_ref_cycle(schema):
        return RECURSION_PROBLEM
    validator = bounded_validator(schema)
    # An empty object, null, and an object holding every declared property (a cycle
    # through ``properties.x`` recurses only when ``x`` is present).
    props = schema.get("properties")
    full = dict.fromkeys(props) if isinstance(props, dict) else {}
    probes: tuple[object, ...] = ({}, None, full)
    for probe in probes:
        try:
            for _ in validator.iter_errors(probe):
                pass
        except Unresolvable:
            return None  # an unresolvable $ref: reported when a value is checked
        except BaseException as exc:  # a cycle the static walk cannot see
            if not is_recursion(exc):
                raise
            return RECURSION_PROBLEM
    return None


RECURSION_PROBLEM: Final = (
    "the schema refers to itself without end (a $ref cycle that never descends into the value)"
)
"""The problem reported for a ``$ref`` cycle."""


def _json_key(value: Any) -> Any:
    """A hashable key equal for two values exactly when they are equal as JSON
    (``1`` is ``1.0``, ``true`` is not ``1``, objects by keys and values)."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, (int, float)):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list | tuple):
        return ("a", tuple(_json_key(v) for v in value))
    if isinstance(value, dict):
        return ("o", frozenset((k, _json_key(v)) for k, v in value.items()))
    return ("z", None) if value is None else ("?", repr(value))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for index, item in enumerate(instance):
        key = _json_key(item)
        if key in seen:
            yield jsonschema.ValidationError(
                f"has non-unique elements (item {index} repeats an earlier one)"
            )
            return
        seen.add(key)


_BOUNDED: dict[Any, Any] = {}


def bounded_validator(schema: dict[str, Any] | bool) -> Any:
    """A validator for ``schema`` (its dialect by ``$schema``, Draft 2020-12 when absent)
    whose ``uniqueItems`` is linear in the array."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    bounded = _BOUNDED.get(cls)
    if bounded is None:
        bounded = jsonschema.validators.extend(cls, {"uniqueItems": _unique_items})
        _BOUNDED[cls] = bounded
    return bounded(schema)
