"""grade.collection_id without a foreign key

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23 20:00:00

``grade.collection_id`` copies the collection of the grade's pool entry, for the index that reads a
collection's rows above a revision (0004). Its foreign key checked nothing the pool entry's does not:
a grade's pool entry belongs to a query of an existing collection, and a collection's deletion
reaches its grades through the pool entries' cascade. It cost one of the grade row's three
row-by-row checks on PostgreSQL, about 12% of the server's work in an import (issue 16).
"""

from collections.abc import Sequence

from alembic import op

revision: str = '0011'
down_revision: str | None = '0010'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('grade', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_grade_collection_id_collection'), type_='foreignkey')


def downgrade() -> None:
    with op.batch_alter_table('grade', schema=None) as batch_op:
        batch_op.create_foreign_key(
            batch_op.f('fk_grade_collection_id_collection'), 'collection', ['collection_id'], ['id'], ondelete='CASCADE'
        )
