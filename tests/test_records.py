"""``records.record``: the walk's and the listing's tuple classes behave as namedtuple's."""

from __future__ import annotations

import copy
import pickle

import pytest

from rootgrep.confine.listing import Entry
from rootgrep.records import record
from rootgrep.walker import FileEntry

Point = record("Point", ("x", "y", "z"), defaults=(0,), module=__name__, doc="a point")


def test_a_record_is_a_tuple_with_named_positions() -> None:
    p = Point(1, 2)
    assert p == (1, 2, 0) and isinstance(p, tuple)
    assert (p.x, p.y, p.z) == (1, 2, 0)
    assert Point(1, y=5, z=7) == (1, 5, 7)
    assert repr(p) == "Point(x=1, y=2, z=0)"
    assert Point._fields == ("x", "y", "z") and Point.__doc__ == "a point"
    match p:
        case Point(a, b, c):
            assert (a, b, c) == (1, 2, 0)
    with pytest.raises(AttributeError):
        p.x = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        p.w = 3  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        Point(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Point(1, 2, 3, 4)  # type: ignore[call-arg]


def test_a_record_copies_and_pickles_as_itself() -> None:
    p = Point(1, [2], "z")
    for q in (copy.copy(p), copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert q == p and type(q) is Point
    assert copy.deepcopy(p).y is not p.y


def test_the_walk_and_the_listing_records_have_their_fields() -> None:
    for cls in (FileEntry, Entry):
        fields = cls._fields
        made = cls(*range(len(fields)))
        assert [getattr(made, f) for f in fields] == list(range(len(fields)))
        assert repr(made).startswith(cls.__name__ + "(")


@pytest.mark.parametrize("fields", [("a b",), ("_x",), ("x", "y)\nimport os  # ")])
def test_a_field_that_is_no_plain_name_is_refused(fields: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        record("Bad", fields, module=__name__)
