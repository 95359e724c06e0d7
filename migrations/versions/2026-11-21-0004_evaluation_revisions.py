"""evaluation revisions: collection.revision and structure_token; grade.collection_id and revision

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21 09:00:00
"""

from collections.abc import Sequence
from uuid import uuid4

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('collection', schema=None) as batch_op:
        batch_op.add_column(sa.Column('revision', sa.Integer(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('structure_token', sa.String(length=32), server_default='', nullable=False))
    collection = sa.table('collection', sa.column('id', sa.Integer), sa.column('structure_token', sa.String))
    connection = op.get_bind()
    for (pk,) in connection.execute(sa.select(collection.c.id)).all():
        connection.execute(collection.update().where(collection.c.id == pk).values(structure_token=uuid4().hex))

    with op.batch_alter_table('grade', schema=None) as batch_op:
        batch_op.add_column(sa.Column('collection_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('revision', sa.Integer(), server_default='0', nullable=False))
    op.execute(
        'UPDATE grade SET collection_id = (SELECT "query".collection_id FROM pool_entry '
        'JOIN "query" ON "query".id = pool_entry.query_pk WHERE pool_entry.id = grade.pool_entry_pk)'
    )
    with op.batch_alter_table('grade', schema=None) as batch_op:
        batch_op.alter_column('collection_id', existing_type=sa.Integer(), nullable=False)
        batch_op.create_index('ix_grade_collection_revision', ['collection_id', 'revision'], unique=False)
        batch_op.create_foreign_key(
            batch_op.f('fk_grade_collection_id_collection'), 'collection', ['collection_id'], ['id'], ondelete='CASCADE'
        )


def downgrade() -> None:
    with op.batch_alter_table('grade', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_grade_collection_id_collection'), type_='foreignkey')
        batch_op.drop_index('ix_grade_collection_revision')
        batch_op.drop_column('revision')
        batch_op.drop_column('collection_id')

    with op.batch_alter_table('collection', schema=None) as batch_op:
        batch_op.drop_column('structure_token')
        batch_op.drop_column('revision')
