"""JSON Schema checks, behind two typed functions (``jsonschema`` ships no type hints).

Schemas are checked against their own meta-schema (the dialect named by
``$schema``, Draft 2020-12 when absent) before anything is validated against
them, so a malformed schema is the plan author's error, reported at creation,
never a surprise at run time.

:func:`plan_json_schema` is the JSON Schema of a plan document itself (every
node kind, bindings, condition expressions), generated from the wire structs
(:class:`wf.wire.workflow.Plan`) so it cannot drift from what the server
decodes; ``rpc.discover`` publishes the same structs.
"""

from __future__ import annotations

from typing import Any, Final

import jsonschema  # type: ignore[import-untyped]
import msgspec
from referencing.exceptions import Unresolvable

from wf.runtime.schema_limits import (
    RECURSION_PROBLEM,
    bounded_validator,
    cost_problem,
    is_recursion,
)
from wf.wire.workflow import Plan

ERRORS_MAX: Final = 10
"""Most validation errors reported for one instance."""
PROBLEM_LENGTH_MAX: Final = 500
"""Longest message of one validation error (longer ones are clipped)."""


def plan_json_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of a plan document, for editors and tools.

    It describes shapes; the rules it cannot say (ids upstream, no cycles, inputs
    bound, expression arity) are checked when an artifact is created
    (:func:`wf.runtime.plan.validate_plan`, docs/workflows.md)."""
    schema: dict[str, Any] = msgspec.json.schema(Plan)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def schema_problem(schema: object) -> str | None:
    """Why ``schema`` is not a valid JSON Schema, or ``None`` when it is."""
    if not isinstance(schema, (dict, bool)):
        return f"a JSON Schema is an object or a boolean, not {type(schema).__name__}"
    if isinstance(schema, dict) and not isinstance(schema.get("$schema", ""), str):
        # validator_for looks the dialect up by it: 5 or [] raised an internal error.
        return "$schema must be a string (the URI of a JSON Schema dialect)"
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        return f"{exc.message}" + (f" (at /{where})" if where else "")
    # Valid, but checking a value against it must also cost a bounded time.
    return cost_problem(schema)


def instance_problems(
    schema: dict[str, Any] | bool,
    instance: object,
    *,
    ignore_top_required: bool = False,
    root: dict[str, Any] | None = None,
) -> list[str]:
    """Why ``instance`` does not satisfy ``schema`` (a schema already checked), at most
    :data:`ERRORS_MAX` messages, each prefixed with the JSON pointer of the offending
    value; empty when it does. ``ignore_top_required`` skips the top level's
    ``required`` keyword (partial inputs such as a deployment's defaults). ``root`` is the
    document ``schema`` sits in, when it is a part of one, so that its ``$ref`` s resolve
    (a ``$ref`` that still does not resolve is a problem, never an exception)."""
    top = schema if root is None else root
    validator = bounded_validator(top)
    if root is not None:
        validator = validator.evolve(schema=schema)
    found: list[str] = []
    try:
        errors = sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.path])
    except Unresolvable as exc:
        return [f"/: {exc}"]
    except BaseException as exc:  # a $ref cycle this value walks into (schema_limits)
        if not is_recursion(exc):
            raise
        return [f"/: {RECURSION_PROBLEM}"]
    for error in errors:
        if ignore_top_required and error.validator == "required" and not error.path:
            continue
        pointer = "/" + "/".join(str(p) for p in error.path)
        # jsonschema quotes the whole offending value: a 2 MB input made a 2 MB message.
        message = error.message
        if len(message) > PROBLEM_LENGTH_MAX:
            message = message[: PROBLEM_LENGTH_MAX - 3] + "..."
        found.append(f"{pointer}: {message}")
        if len(found) == ERRORS_MAX:
            break
    return found
