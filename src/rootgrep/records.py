"""``record``: a tuple class with a name for each position, as ``collections.namedtuple``
makes, without importing ``collections`` (with its ``keyword``, ``operator`` and ``reprlib``:
1.6 ms of a CLI grep's start-up). The walk makes one per file and the listing one per
directory entry, so construction and field access are what namedtuple's are: a ``__new__``
that calls ``tuple.__new__`` once, and C-level getters."""

from __future__ import annotations

try:
    from _collections import _tuplegetter  # (namedtuple's own getter: C, a builtin module)
except ImportError:  # pragma: no cover (another interpreter)
    from _operator import itemgetter

    def _tuplegetter(index: int, doc: str) -> property:  # type: ignore[no-redef]
        return property(itemgetter(index), doc=doc)


def record(
    name: str, fields: tuple[str, ...], *, defaults: tuple[object, ...] = (), module: str,
    doc: str = "",
) -> type[tuple]:  # type: ignore[type-arg]  # fmt: skip
    """The tuple class ``name`` with ``fields`` (plain identifiers), the last of them given
    ``defaults``; its repr is ``name(field=value, ...)``."""
    if not all(f.isidentifier() and not f.startswith("_") for f in fields):
        raise ValueError(f"a record's fields are plain names: {fields!r}")  # (also under -O)
    args = ", ".join(fields)
    source = f"def __new__(_cls, {args}):\n    return _new(_cls, ({args},))\n"
    scope: dict[str, object] = {"_new": tuple.__new__}
    exec(source, scope)  # (the field names are this module's callers' constants)
    new = scope["__new__"]
    new.__defaults__ = defaults or None  # type: ignore[attr-defined]

    def __repr__(self: tuple) -> str:  # type: ignore[type-arg]
        return f"{name}(" + ", ".join(f"{f}={v!r}" for f, v in zip(fields, self, strict=True)) + ")"

    def __getnewargs__(self: tuple) -> tuple:  # type: ignore[type-arg]  # (copy, pickle)
        return tuple(self)

    ns: dict[str, object] = {
        "__slots__": (), "__doc__": doc, "__module__": module, "_fields": fields,
        "__new__": new, "__repr__": __repr__, "__getnewargs__": __getnewargs__,
        "__match_args__": fields,
    }  # fmt: skip
    for i, f in enumerate(fields):
        ns[f] = _tuplegetter(i, f"{name}.{f}")
    return type(name, (tuple,), ns)
