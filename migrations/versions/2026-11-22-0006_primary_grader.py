"""collection primary grader

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 23:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The grader an organizer chose for the collection's pages and regrades; NULL means "the most complete".
    with op.batch_alter_table('collection', schema=None) as batch_op:
        batch_op.add_column(sa.Column('primary_grader_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f('fk_collection_primary_grader_id_grader'), 'grader', ['primary_grader_id'], ['id'],
            ondelete='SET NULL',
        )


def downgrade() -> None:
    with op.batch_alter_table('collection', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_collection_primary_grader_id_grader'), type_='foreignkey')
        batch_op.drop_column('primary_grader_id')
