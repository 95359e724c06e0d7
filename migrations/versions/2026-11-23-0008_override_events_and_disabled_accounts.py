"""override events and disabled accounts

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 04:02:24

The judges' workbench keeps every override action (set, accept, clear) with what it replaced, so
that undo restores exactly the previous state, two judges' answers on one cell can be compared,
and judge-vs-grader agreement can be followed over time. An override records when it was last
set (``updated_at``; existing rows take their ``created_at``), and an account can be disabled.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('override_event',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('collection_id', sa.Integer(), nullable=False),
    sa.Column('pool_entry_pk', sa.Integer(), nullable=False),
    sa.Column('item_id', sa.String(length=300), nullable=False),
    sa.Column('judge', sa.String(length=100), nullable=False),
    sa.Column('action', sa.String(length=20), nullable=False),
    sa.Column('rating', sa.Integer(), nullable=True),
    sa.Column('previous_rating', sa.Integer(), nullable=True),
    sa.Column('previous_judge', sa.String(length=100), nullable=True),
    sa.Column('model_rating', sa.Integer(), nullable=True),
    sa.Column('grader_pk', sa.Integer(), nullable=True),
    sa.Column('source', sa.String(length=20), nullable=False),
    sa.Column('undone', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['collection_id'], ['collection.id'], name=op.f('fk_override_event_collection_id_collection'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['grader_pk'], ['grader.id'], name=op.f('fk_override_event_grader_pk_grader'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['pool_entry_pk'], ['pool_entry.id'], name=op.f('fk_override_event_pool_entry_pk_pool_entry'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_override_event'))
    )
    with op.batch_alter_table('override_event', schema=None) as batch_op:
        batch_op.create_index('ix_override_event_cell', ['pool_entry_pk', 'item_id'], unique=False)
        batch_op.create_index('ix_override_event_judge', ['collection_id', 'judge', 'id'], unique=False)

    with op.batch_alter_table('app_user', schema=None) as batch_op:
        batch_op.add_column(sa.Column('disabled_at', sa.DateTime(timezone=True), nullable=True))

    with op.batch_alter_table('grade_override', schema=None) as batch_op:
        batch_op.add_column(sa.Column('updated_at', sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE grade_override SET updated_at = created_at")
    with op.batch_alter_table('grade_override', schema=None) as batch_op:
        batch_op.alter_column('updated_at', existing_type=sa.DateTime(timezone=True), nullable=False)



def downgrade() -> None:
    with op.batch_alter_table('grade_override', schema=None) as batch_op:
        batch_op.drop_column('updated_at')

    with op.batch_alter_table('app_user', schema=None) as batch_op:
        batch_op.drop_column('disabled_at')

    with op.batch_alter_table('override_event', schema=None) as batch_op:
        batch_op.drop_index('ix_override_event_judge')
        batch_op.drop_index('ix_override_event_cell')

    op.drop_table('override_event')
