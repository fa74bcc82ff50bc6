"""``models.construct``: the same instance as pydantic's ``model_construct``, cheaper (a page of
1,000 grep matches builds 1,000 models)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from rootgrep.models import GrepFile, GrepMatch, ListRootsResult, RootId, SearchHit, construct

REF = RootId(id="r1", name="root")


class Aliased(BaseModel):
    value: int = Field(alias="v")


def _same(cls: type[BaseModel], **values: Any) -> BaseModel:
    got, want = construct(cls, **values), cls.model_construct(**values)
    assert type(got) is cls
    assert list(got.__dict__.items()) == list(want.__dict__.items())  # (values and order)
    assert got.model_fields_set == want.model_fields_set
    assert got.__pydantic_extra__ == want.__pydantic_extra__
    assert got.__pydantic_private__ == want.__pydantic_private__
    assert got.model_dump_json() == want.model_dump_json()
    assert got == want
    return got


@pytest.mark.parametrize(
    "values",
    [
        {"root": REF, "path": "a/b.py", "uri": "file:///a/b.py", "line": 3, "column": 1,
         "text": "x = 1"},  # (defaults and default factories filled)
        {"root": REF, "path": "é", "uri": "file:///%C3%A9", "line": 1, "column": 2, "text": "",
         "before": ["p"], "after": ["q", "r"], "symbol": "C.f", "line_truncated": True},
        {"root": REF, "path": "p", "line": 1},  # (required fields missing: left out, as there)
        {"root": REF, "path": "p", "uri": "u", "line": 1, "column": 1, "text": "t",
         "unknown": 5},  # (an unknown name: ignored, as there)
    ],
)  # fmt: skip
def test_a_grep_match_is_the_one_model_construct_builds(values: dict[str, Any]) -> None:
    _same(GrepMatch, **values)


def test_each_instance_gets_its_own_default_lists() -> None:
    a = _same(GrepMatch, root=REF, path="p", uri="u", line=1, column=1, text="t")
    b = construct(GrepMatch, root=REF, path="p", uri="u", line=1, column=1, text="t")
    assert isinstance(a, GrepMatch) and a.before == [] and a.before is not b.before


def test_other_models_and_the_ones_left_to_model_construct() -> None:
    _same(GrepFile, root=REF, path="p", uri="u", matches=3)
    _same(SearchHit, root=REF, path="p", uri="u", score=1.5)
    _same(ListRootsResult, roots=[], read_only=True)  # (private attributes: model_construct's)
    _same(Aliased, v=1)  # (an alias: model_construct's)
    got = construct(GrepMatch, root=REF, path="p", uri="u", line=1, column=1, text="t")
    got.symbol = "f"  # (assignment as on any model)
    assert "symbol" in got.model_fields_set and got.model_dump()["symbol"] == "f"


class Mutable(BaseModel):
    items: list[int] = Field(default=[])  # (a plain mutable default: copied per instance)
    n: int = 0


class FromData(BaseModel):
    n: int = 1
    twice: int = Field(default_factory=lambda data: 2 * data["n"])


def test_a_mutable_default_or_a_factory_of_the_data_is_left_to_model_construct() -> None:
    a, b = construct(Mutable), construct(Mutable)
    assert isinstance(a, Mutable) and isinstance(b, Mutable)
    a.items.append(1)
    assert b.items == [] and Mutable().items == [] and a.items is not b.items
    got = construct(FromData, n=4)
    assert isinstance(got, FromData) and got.twice == 8
    _same(FromData, n=4)
