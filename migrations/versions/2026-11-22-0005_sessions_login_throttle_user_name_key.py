"""server-side sessions, sign-in throttle, case-insensitive user names

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'auth_session',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('token_hash', sa.String(length=64), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['user_id'], ['app_user.id'], name=op.f('fk_auth_session_user_id_app_user'), ondelete='CASCADE'
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_auth_session')),
        sa.UniqueConstraint('token_hash', name=op.f('uq_auth_session_token_hash')),
    )
    with op.batch_alter_table('auth_session', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_auth_session_user_id'), ['user_id'], unique=False)

    op.create_table(
        'login_throttle',
        sa.Column('key', sa.String(length=80), nullable=False),
        sa.Column('failures', sa.Integer(), nullable=False),
        sa.Column('last_failure_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('locked_until', sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint('key', name=op.f('pk_login_throttle')),
    )

    # Names become unique case-insensitively. Existing names that differ only in case keep
    # working: the later ones get a key suffixed with their id (an organizer may rename them).
    with op.batch_alter_table('app_user', schema=None) as batch_op:
        batch_op.add_column(sa.Column('name_key', sa.String(length=120), nullable=True))
    user = sa.table('app_user', sa.column('id', sa.Integer), sa.column('name', sa.String),
                    sa.column('name_key', sa.String))
    connection = op.get_bind()
    seen: set[str] = set()
    for pk, name in connection.execute(sa.select(user.c.id, user.c.name).order_by(user.c.id)).all():
        key = name.strip().casefold()
        if key in seen:
            key = f'{key}#{pk}'
        seen.add(key)
        connection.execute(user.update().where(user.c.id == pk).values(name_key=key))
    with op.batch_alter_table('app_user', schema=None) as batch_op:
        batch_op.alter_column('name_key', existing_type=sa.String(length=120), nullable=False)
        batch_op.create_unique_constraint(batch_op.f('uq_app_user_name_key'), ['name_key'])


def downgrade() -> None:
    with op.batch_alter_table('app_user', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('uq_app_user_name_key'), type_='unique')
        batch_op.drop_column('name_key')
    op.drop_table('login_throttle')
    with op.batch_alter_table('auth_session', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_auth_session_user_id'))
    op.drop_table('auth_session')
