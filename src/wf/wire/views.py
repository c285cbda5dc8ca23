"""The one base of every typed result: attribute access, and read-only mapping access.

Theory of operation
-------------------
Every result the ``App`` client and the server's Python API return is a
frozen :class:`View` (a msgspec Struct): ``run.status``, ``page.next_cursor``,
typed for mypy and editors. Code written when some results were plain dicts
(``view["output"]["result"]``, ``view.get("error")``, ``"corrupt" in view``)
keeps working, because a view also reads as the JSON object the server sends:

- its keys are exactly the keys of that object (:meth:`View.to_builtins`): a
  field the server left out (``UNSET``, or a default an ``omit_defaults`` view
  does not send) is not a key, so ``view[name]`` raises :class:`KeyError` for it
  as the dict did, and ``view.get(name)`` gives the default;
- ``view[name]`` gives the attribute itself (a nested view, a list of views, or
  the JSON value), so subscripts chain: ``run["trace"][0]["status"]``.

A view equals a dict that is that JSON object (``page == {"runs": [], "next_cursor":
None}``), and another view of its type with equal fields. It is read-only: there is
no ``view[k] = v``; :func:`msgspec.structs.replace` makes a changed copy, and
:meth:`View.to_builtins` a plain dict to change.
Decoding is lenient: no view forbids unknown fields, so a client reads the
answers of a newer server that added some.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any, Final

import msgspec

_NOTHING: Final = object()
_EMPTY_FACTORIES: Final = (list, dict, set, bytearray)


@cache
def _fields(cls: type[msgspec.Struct]) -> dict[str, tuple[str, Any]]:
    """Wire name -> (attribute name, default or ``_NOTHING`` when encoded always)."""
    omit = cls.__struct_config__.omit_defaults
    found: dict[str, tuple[str, Any]] = {}
    for field in msgspec.structs.fields(cls):
        default: Any = _NOTHING
        if omit and field.default is not msgspec.NODEFAULT:
            default = field.default
        elif omit and field.default_factory in _EMPTY_FACTORIES:
            # msgspec leaves out an empty collection, never another factory's value.
            default = field.default_factory()
        found[field.encode_name] = (field.name, default)
    return found


class View(msgspec.Struct, frozen=True, kw_only=True):
    """A typed result that also reads as the JSON object it travels as (see the
    module docstring)."""

    def _lookup(self, key: str) -> Any:
        """The value under wire name ``key``, or ``_NOTHING`` when the object on the
        wire has no such key."""
        found = _fields(type(self)).get(key)
        if found is None:
            return _NOTHING
        name, default = found
        value = getattr(self, name)
        if value is msgspec.UNSET:
            return _NOTHING
        if default is not _NOTHING and (value is default or value == default):
            return _NOTHING
        return value

    def __eq__(self, other: object) -> bool:
        # A view equals another of its type field by field (msgspec's own comparison),
        # and a dict that is the JSON object it travels as: code that compared the
        # dicts some results used to be keeps working.
        if isinstance(other, dict):
            return self.to_builtins() == other
        same: bool = msgspec.Struct.__eq__(self, other)  # NotImplemented: another type
        return same

    def __ne__(self, other: object) -> bool:
        same = self.__eq__(other)
        return same if same is NotImplemented else not same

    # Defining __eq__ would drop the hash a frozen Struct has.
    __hash__ = msgspec.Struct.__hash__

    def __getitem__(self, key: str) -> Any:
        value = self._lookup(key)
        if value is _NOTHING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._lookup(key) is not _NOTHING

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def get(self, key: str, default: Any = None) -> Any:
        """``view[key]``, or ``default`` when the object on the wire has no such key."""
        value = self._lookup(key)
        return default if value is _NOTHING else value

    def keys(self) -> list[str]:
        """The keys of the object on the wire, in the order it sends them."""
        return [key for key in _fields(type(self)) if self._lookup(key) is not _NOTHING]

    def values(self) -> list[Any]:
        """The values of :meth:`keys`, in that order."""
        return [self[key] for key in self.keys()]

    def items(self) -> list[tuple[str, Any]]:
        """``(key, value)`` for each of :meth:`keys`."""
        return [(key, self[key]) for key in self.keys()]

    def to_builtins(self) -> dict[str, Any]:
        """The JSON object the server sends (a new plain dict, nested values included:
        what ``json.dumps`` takes and what the JSON-RPC answer decodes to)."""
        result: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(self))
        return result
