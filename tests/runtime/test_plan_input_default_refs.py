"""An input default whose property is a ``$ref`` into the schema's ``$defs`` is checked in
the context of the whole input schema: a fitting default is accepted, a wrong one and a
dangling ``$ref`` are refused with ``invalid_argument``, never an internal error."""

from __future__ import annotations

from typing import Any

import pytest

from wf.errors import InvalidArgument
from wf.runtime.plan import plan_from_builtins, validate_plan


def _plan(property_schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodes": [
            {"id": "a", "kind": "activity", "activity_type": "echo", "args": {"x": {"$input": "n"}}}
        ],
        "input_schema": {
            "$defs": {"N": {"type": "integer"}},
            "type": "object",
            "properties": {"n": property_schema},
        },
        "output": {},
    }


def test_a_default_that_fits_its_referenced_definition_is_accepted() -> None:
    validate_plan(plan_from_builtins(_plan({"$ref": "#/$defs/N", "default": 3})))


def test_a_default_that_does_not_fit_its_referenced_definition_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="does not match its schema"):
        validate_plan(plan_from_builtins(_plan({"$ref": "#/$defs/N", "default": "three"})))


def test_a_default_under_a_dangling_reference_is_refused_not_an_internal_error() -> None:
    with pytest.raises(InvalidArgument, match="does not match its schema"):
        validate_plan(plan_from_builtins(_plan({"$ref": "#/$defs/Missing", "default": 3})))
