"""Rubric edits of importance, weight and sub-nuggets (issue 14 §3): new versions, notes, diffs, conflicts, bounds."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.collections.service import CollectionWriter, ensure_collection
from app.errors import Invalid
from app.models import BankItem, Collection
from app.rubrics import history
from app.rubrics.editing import (
    MAX_CHILD_TEXT,
    MAX_CHILDREN,
    MAX_DEPTH,
    ChildEdit,
    EditConflict,
    EmptyEdit,
    ItemChange,
    StructureEdit,
    apply_edit,
)
from app.rubrics.service import ItemSpec, create_version, item_id_for, latest_version, store_items, version_item_pks
from tests.conftest import Database

TEXT = "The tower was designed and built by Eiffel"
STRUCTURE = {
    "op": "and",
    "children": [
        {"id": "t1/who", "text": "Who designed it?", "kind": "question", "gold_answers": ["Koechlin"]},
        {
            "id": "t1/built",
            "text": "Eiffel's company built it",
            "kind": "nugget",
            "op": "or",
            "children": [{"id": "t1/deep", "text": "in two years", "kind": "nugget"}],
        },
    ],
}


def _rubric(session: Session) -> Collection:
    """Version 1 of collection "nuggets": one okay nugget with AND sub-nuggets, and a plain one."""
    collection = ensure_collection(session, "nuggets")
    writer = CollectionWriter(session, collection)
    writer.ensure_query("t1", "Eiffel tower history")
    specs = [
        ItemSpec("t1", "t1/n1", "nugget", TEXT, None, None, None, importance="okay", structure=STRUCTURE),
        ItemSpec("t1", "t1/n2", "nugget", "It is 330 m tall", None, None, None),
    ]
    create_version(session, collection, store_items(session, collection, writer, specs), created_by="import", note="")
    return collection


def _item(session: Session, collection: Collection, item_id: str) -> BankItem:
    pks = version_item_pks(session, latest_version(session, collection))
    return session.scalars(select(BankItem).where(BankItem.id.in_(pks), BankItem.item_id == item_id)).one()


def _edit(session: Session, collection: Collection, item_id: str = "t1/n1", **fields: Any) -> ItemChange:
    item = _item(session, collection, item_id)
    fields.setdefault("text", item.text)
    return ItemChange("edit", "t1", item_id, expected_text=item.text, expected_hash=item.content_hash, **fields)


def test_importance_weight_and_sub_nugget_edits_are_versions_with_notes_and_diffs(database: Database) -> None:
    with database.session() as session:
        collection = _rubric(session)
        # importance alone: same id (its grades hold), nothing to regrade, the note and the diff say what changed
        result = apply_edit(session, collection, [_edit(session, collection, importance="vital")], user="ann")
        assert (result.version.number, result.added_item_ids, result.removed_item_ids) == (2, [], [])
        assert result.version.note == "nugget 1 of t1: importance okay → vital"
        diff = history.diff_versions(session, collection, 1, 2)
        assert diff.summary == "1 edited" and not diff.edited[0].text_changed
        assert (diff.edited[0].new_item_id, diff.edited[0].changes) == ("t1/n1", ("importance okay → vital",))

        structure = StructureEdit(
            "or",
            (
                ChildEdit("Who designed the tower?", "t1/who"),
                ChildEdit("Eiffel's company built it", "t1/built"),
                ChildEdit("Built for the 1889 World's Fair"),
            ),
        )
        apply_edit(session, collection, [_edit(session, collection, weight=2.5, structure=structure)], user="ann")
        item = _item(session, collection, "t1/n1")
        assert (item.importance, item.weight, item.structure["op"]) == ("vital", 2.5, "or")
        who, built, fair = item.structure["children"]
        assert who == {
            "id": "t1/who",
            "text": "Who designed the tower?",
            "kind": "question",
            "gold_answers": ["Koechlin"],
        }
        assert built == STRUCTURE["children"][1]  # untouched: kept with its own OR children
        assert fair == {
            "id": item_id_for("t1", "Built for the 1889 World's Fair"),
            "text": fair["text"],
            "kind": "nugget",
        }
        assert history.diff_versions(session, collection, 2, 3).edited[0].changes == (
            "weight default → 2.5",
            "sub-nuggets and → or",
            "sub-nugget edited: Who designed it? → Who designed the tower?",
            "sub-nugget added: Built for the 1889 World's Fair",
        )

        # a sub-nugget's own children, a removal, a cleared weight
        nested = StructureEdit("and", (ChildEdit("in 26 months"),))
        structure = StructureEdit("or", (ChildEdit("Eiffel's company built it", "t1/built", nested),))
        apply_edit(session, collection, [_edit(session, collection, weight="", structure=structure)], user="bo")
        assert history.diff_versions(session, collection, 3, 4).edited[0].changes == (
            "weight 2.5 → default",
            "under Eiffel's company built it: sub-nuggets or → and",
            "under Eiffel's company built it: sub-nugget added: in 26 months",
            "under Eiffel's company built it: sub-nugget removed: in two years",
            "sub-nugget removed: Who designed the tower?",
            "sub-nugget removed: Built for the 1889 World's Fair",
        )
        # no sub-nuggets left: the structure is gone
        apply_edit(session, collection, [_edit(session, collection, structure=StructureEdit("or"))], user="bo")
        assert _item(session, collection, "t1/n1").structure is None

        # a text edit with an importance: a new id to grade, edited from the old one, both in the note and diff
        result = apply_edit(
            session, collection, [_edit(session, collection, text="Eiffel built it", importance="okay")], user="cy"
        )
        new_id = item_id_for("t1", "Eiffel built it")
        assert (result.added_item_ids, result.removed_item_ids) == ([new_id], ["t1/n1"])
        assert result.version.note == "edited nugget 1 of t1 (importance vital → okay)"
        edited = history.diff_versions(session, collection, 5, 6).edited[0]
        assert (edited.old_text, edited.new_text, edited.changes) == (
            TEXT,
            "Eiffel built it",
            ("importance vital → okay",),
        )
        # across versions the diff adds up the changes from version 1
        assert history.diff_versions(session, collection, 1, 6).edited[0].changes[-2:] == (
            "sub-nugget removed: Who designed it?",
            "sub-nugget removed: Eiffel's company built it",
        )
        # the same values again are no edit; a revert restores version 1's attributes
        with pytest.raises(EmptyEdit):
            apply_edit(session, collection, [_edit(session, collection, new_id, importance="okay")], user="cy")
        history.revert(session, collection, 1, user="cy")
        restored = _item(session, collection, "t1/n1")
        assert (restored.importance, restored.weight, restored.structure) == ("okay", None, STRUCTURE)
        session.commit()


def test_two_judges_changing_one_items_attributes_conflict(database: Database) -> None:
    with database.session() as session:
        collection = _rubric(session)
        seen_by_both = _edit(session, collection)
        apply_edit(session, collection, [_replace(seen_by_both, importance="vital")], user="ann")
        with pytest.raises(EditConflict, match="importance, weight or sub-nuggets changed since you opened it"):
            apply_edit(session, collection, [_replace(seen_by_both, weight=3.0)], user="bo")
        # without the hash the rule is today's: the text is what the save compares
        apply_edit(session, collection, [_replace(seen_by_both, weight=3.0, expected_hash=None)], user="bo")
        assert (_item(session, collection, "t1/n1").importance, _item(session, collection, "t1/n1").weight) == (
            "vital",
            3.0,
        )
        session.commit()


def _replace(change: ItemChange, **fields: Any) -> ItemChange:
    return replace(change, **fields)


def _deep(levels: int) -> StructureEdit:
    structure = StructureEdit("and", (ChildEdit("leaf"),))
    for level in range(levels - 1):
        structure = StructureEdit("and", (ChildEdit(f"level {level}", sub=structure),))
    return structure


HOSTILE: list[tuple[dict[str, Any], str]] = [
    ({"weight": float("nan")}, "weight: a finite number"),
    ({"weight": float("inf")}, "weight: a finite number"),
    ({"weight": -1.0}, "weight: a finite number from 0 to 1000"),
    ({"weight": 1000.5}, "weight: a finite number from 0 to 1000"),
    ({"importance": "crucial"}, "importance: vital, okay"),
    ({"structure": StructureEdit("xor", (ChildEdit("a"),))}, "structure.op: sub-nuggets combine with 'and' or 'or'"),
    (
        {"structure": StructureEdit("or", tuple(ChildEdit(f"c{i}") for i in range(MAX_CHILDREN + 1)))},
        "structure.children: at most 50",
    ),
    ({"structure": _deep(MAX_DEPTH + 1)}, "sub: sub-nuggets nest at most 4 levels deep"),
    (
        {"structure": StructureEdit("or", (ChildEdit("x" * (MAX_CHILD_TEXT + 1)),))},
        "structure.children[0].text: at most 2000",
    ),
    (
        {"structure": StructureEdit("or", (ChildEdit("a"), ChildEdit("  ")))},
        "structure.children[1].text: a sub-nugget needs a text",
    ),
    (
        {"structure": StructureEdit("or", (ChildEdit("nul \x00"),))},
        "structure.children[0].text: at most 2000 characters, no NUL",
    ),
    (
        {"structure": StructureEdit("or", (ChildEdit("a", "t1/nobody"),))},
        "structure.children[0].id: the item has no sub-nugget",
    ),
    (
        {"structure": StructureEdit("or", (ChildEdit("a", "t1/who"), ChildEdit("b", "t1/who")))},
        "structure.children[1].id: the sub-nugget 't1/who' is listed twice",
    ),
    (
        {
            "structure": StructureEdit(
                "or",
                tuple(
                    ChildEdit(f"c{i}", sub=StructureEdit("or", tuple(ChildEdit(f"g{j}") for j in range(45))))
                    for i in range(5)
                ),
            )
        },
        "at most 200 sub-nuggets in one item",
    ),
]


def test_hostile_weights_and_structures_are_refused_naming_the_field(database: Database) -> None:
    with database.session() as session:
        collection = _rubric(session)
        session.commit()
        for fields, message in HOSTILE:
            with pytest.raises(Invalid, match=re.escape(message)):
                apply_edit(session, collection, [_edit(session, collection, **fields)], user="eve")
            session.rollback()
        assert latest_version(session, collection).number == 1  # type: ignore[union-attr]
