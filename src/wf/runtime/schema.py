"""JSON Schema checks, behind two typed functions (``jsonschema`` ships no type hints).

Schemas are checked against their own meta-schema (the dialect named by
``$schema``, Draft 2020-12 when absent) before anything is validated against
them, so a malformed schema is the plan author's error, reported at creation,
never a surprise at run time.
"""

from __future__ import annotations

from typing import Any, Final

import jsonschema  # type: ignore[import-untyped]

ERRORS_MAX: Final = 10
"""Most validation errors reported for one instance."""


def schema_problem(schema: object) -> str | None:
    """Why ``schema`` is not a valid JSON Schema, or ``None`` when it is."""
    if not isinstance(schema, (dict, bool)):
        return f"a JSON Schema is an object or a boolean, not {type(schema).__name__}"
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        return f"{exc.message}" + (f" (at /{where})" if where else "")
    return None


def instance_problems(
    schema: dict[str, Any] | bool, instance: object, *, ignore_top_required: bool = False
) -> list[str]:
    """Why ``instance`` does not satisfy ``schema`` (a schema already checked), at most
    :data:`ERRORS_MAX` messages, each prefixed with the JSON pointer of the offending
    value; empty when it does. ``ignore_top_required`` skips the top level's
    ``required`` keyword (partial inputs such as a deployment's defaults)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = cls(schema)
    found: list[str] = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.path]):
        if ignore_top_required and error.validator == "required" and not error.path:
            continue
        pointer = "/" + "/".join(str(p) for p in error.path)
        found.append(f"{pointer}: {error.message}")
        if len(found) == ERRORS_MAX:
            break
    return found
