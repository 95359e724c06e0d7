"""collection.judgments_token

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23 14:15:00

Manual judgments move neither a collection's revision nor its structure token (a re-import rewrites
them in place), so the evaluation snapshot could not keep them and read every judgment on every
leaderboard fragment. Every judgment write now replaces ``judgments_token``; a reader keeps what it
read under the token it saw (app/collections/snapshot.py). Existing collections start at '': one
value, as good as any, until their next judgment write.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0010'
down_revision: str | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('collection', schema=None) as batch_op:
        batch_op.add_column(sa.Column('judgments_token', sa.String(length=32), server_default='', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('collection', schema=None) as batch_op:
        batch_op.drop_column('judgments_token')
