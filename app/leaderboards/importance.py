"""The importance of a rubric version's items, read for the nugget scores and the weighted Cover."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.evaluation.nuggets import Importance, Importances
from app.models import BankItem, Collection, RubricVersionItem
from app.rubrics.service import latest_version, version_by_number


def item_importances(session: Session, collection: Collection, rubric_version: int | None) -> Importances:
    """item id → importance in rubric version ``rubric_version`` (None: the newest published one).

    The importance is a property of the bank item row, so the version decides it: an edit of an
    item's importance is a new row and a new version (app/rubrics). Without any version every item
    is unspecified, which weighs like vital (app/evaluation/nuggets.py).
    """
    if rubric_version is None:
        version = latest_version(session, collection)
    else:
        version = version_by_number(session, collection, rubric_version)
    if version is None:
        return {}
    rows = session.execute(
        select(BankItem.item_id, BankItem.importance, BankItem.weight)
        .join(RubricVersionItem, RubricVersionItem.item_pk == BankItem.id)
        .where(
            RubricVersionItem.version_pk == version.id,
            (BankItem.importance.is_not(None)) | (BankItem.weight.is_not(None)),
        )
    ).all()
    return {item_id: Importance.of(importance, weight) for item_id, importance, weight in rows}
