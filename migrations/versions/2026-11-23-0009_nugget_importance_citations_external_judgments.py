"""nugget importance, structure and provenance; citations; external judgments

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23 07:40:00

TREC RAG / AutoJudge interop (docs/formats.md). A bank item gains an importance (vital / okay), an
optional explicit weight, its AND/OR sub-nuggets (``structure``) and where it came from
(``provenance``: format, creator), and a query the rest of its AutoJudge Request (``info``).
Existing items keep NULL in all four, which reads as an unspecified importance of weight 1, so
their content hashes and every version stay as they were.
A response passage's citations link it to the cited corpus documents, and graded qrels of other
judges (UMBRELA 0-3) are kept per source beside the manual judgments.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0009'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('query', schema=None) as batch_op:
        batch_op.add_column(sa.Column('info', sa.JSON(), nullable=True))

    with op.batch_alter_table('bank_item', schema=None) as batch_op:
        batch_op.add_column(sa.Column('importance', sa.String(length=20), nullable=True))
        batch_op.add_column(sa.Column('weight', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('structure', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('provenance', sa.JSON(), nullable=True))

    op.create_table('citation',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('collection_id', sa.Integer(), nullable=False),
    sa.Column('passage_pk', sa.Integer(), nullable=False),
    sa.Column('doc_id', sa.String(length=300), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('sentence', sa.Integer(), nullable=False),
    sa.Column('confidence', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['collection_id'], ['collection.id'], name=op.f('fk_citation_collection_id_collection'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['passage_pk'], ['passage.id'], name=op.f('fk_citation_passage_pk_passage'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_citation')),
    sa.UniqueConstraint('passage_pk', 'position', name=op.f('uq_citation_passage_pk_position'))
    )
    with op.batch_alter_table('citation', schema=None) as batch_op:
        batch_op.create_index('ix_citation_collection', ['collection_id'], unique=False)

    op.create_table('external_judgment',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('collection_id', sa.Integer(), nullable=False),
    sa.Column('pool_entry_pk', sa.Integer(), nullable=False),
    sa.Column('source', sa.String(length=200), nullable=False),
    sa.Column('relevance', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['collection_id'], ['collection.id'], name=op.f('fk_external_judgment_collection_id_collection'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['pool_entry_pk'], ['pool_entry.id'], name=op.f('fk_external_judgment_pool_entry_pk_pool_entry'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_external_judgment')),
    sa.UniqueConstraint('source', 'pool_entry_pk', name=op.f('uq_external_judgment_source_pool_entry_pk'))
    )
    with op.batch_alter_table('external_judgment', schema=None) as batch_op:
        batch_op.create_index('ix_external_judgment_collection_source', ['collection_id', 'source'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('external_judgment', schema=None) as batch_op:
        batch_op.drop_index('ix_external_judgment_collection_source')
    op.drop_table('external_judgment')

    with op.batch_alter_table('citation', schema=None) as batch_op:
        batch_op.drop_index('ix_citation_collection')
    op.drop_table('citation')

    with op.batch_alter_table('bank_item', schema=None) as batch_op:
        batch_op.drop_column('provenance')
        batch_op.drop_column('structure')
        batch_op.drop_column('weight')
        batch_op.drop_column('importance')

    with op.batch_alter_table('query', schema=None) as batch_op:
        batch_op.drop_column('info')
