"""create collection rubric and grading tables

Revision ID: 0001
Revises: 
Create Date: 2026-11-21 12:27:54.497240
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('collection',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_collection')),
    sa.UniqueConstraint('name', name=op.f('uq_collection_name'))
    )
    op.create_table('grader',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('model', sa.String(length=300), nullable=False),
    sa.Column('prompt_class', sa.String(length=200), nullable=False),
    sa.Column('template_hash', sa.String(length=64), nullable=False),
    sa.Column('prompt_type', sa.String(length=20), nullable=False),
    sa.Column('is_self_rated', sa.Boolean(), nullable=False),
    sa.Column('options', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_grader')),
    sa.UniqueConstraint('model', 'prompt_class', 'template_hash', name=op.f('uq_grader_model_prompt_class_template_hash'))
    )
    op.create_table('official_rank',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('collection_id', sa.Integer(), nullable=False),
    sa.Column('system_name', sa.String(length=200), nullable=False),
    sa.Column('rank', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['collection_id'], ['collection.id'], name=op.f('fk_official_rank_collection_id_collection'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_official_rank')),
    sa.UniqueConstraint('collection_id', 'system_name', name=op.f('uq_official_rank_collection_id_system_name'))
    )
    op.create_table('passage',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('collection_id', sa.Integer(), nullable=False),
    sa.Column('passage_id', sa.String(length=300), nullable=False),
    sa.Column('text', sa.Text(), nullable=True),
    sa.Column('markup', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['collection_id'], ['collection.id'], name=op.f('fk_passage_collection_id_collection'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_passage')),
    sa.UniqueConstraint('collection_id', 'passage_id', name=op.f('uq_passage_collection_id_passage_id'))
    )
    op.create_table('query',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('collection_id', sa.Integer(), nullable=False),
    sa.Column('query_id', sa.String(length=200), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('facets', sa.JSON(), nullable=True),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['collection_id'], ['collection.id'], name=op.f('fk_query_collection_id_collection'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_query')),
    sa.UniqueConstraint('collection_id', 'query_id', name=op.f('uq_query_collection_id_query_id'))
    )
    op.create_table('rubric_version',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('collection_id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('created_by', sa.String(length=200), nullable=False),
    sa.Column('note', sa.Text(), nullable=False),
    sa.Column('bank_meta', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['collection_id'], ['collection.id'], name=op.f('fk_rubric_version_collection_id_collection'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_rubric_version')),
    sa.UniqueConstraint('collection_id', 'number', name=op.f('uq_rubric_version_collection_id_number'))
    )
    op.create_table('system',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('collection_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.ForeignKeyConstraint(['collection_id'], ['collection.id'], name=op.f('fk_system_collection_id_collection'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_system')),
    sa.UniqueConstraint('collection_id', 'name', name=op.f('uq_system_collection_id_name'))
    )
    op.create_table('bank_item',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('collection_id', sa.Integer(), nullable=False),
    sa.Column('query_pk', sa.Integer(), nullable=False),
    sa.Column('item_id', sa.String(length=300), nullable=False),
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('gold_answers', sa.JSON(), nullable=True),
    sa.Column('facet_id', sa.String(length=200), nullable=True),
    sa.Column('info', sa.JSON(), nullable=True),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.ForeignKeyConstraint(['collection_id'], ['collection.id'], name=op.f('fk_bank_item_collection_id_collection'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['query_pk'], ['query.id'], name=op.f('fk_bank_item_query_pk_query'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_bank_item')),
    sa.UniqueConstraint('collection_id', 'item_id', 'content_hash', name=op.f('uq_bank_item_collection_id_item_id_content_hash'))
    )
    with op.batch_alter_table('bank_item', schema=None) as batch_op:
        batch_op.create_index('ix_bank_item_query', ['query_pk'], unique=False)

    op.create_table('pool_entry',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('query_pk', sa.Integer(), nullable=False),
    sa.Column('passage_pk', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['passage_pk'], ['passage.id'], name=op.f('fk_pool_entry_passage_pk_passage'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['query_pk'], ['query.id'], name=op.f('fk_pool_entry_query_pk_query'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_pool_entry')),
    sa.UniqueConstraint('query_pk', 'passage_pk', name=op.f('uq_pool_entry_query_pk_passage_pk'))
    )
    with op.batch_alter_table('pool_entry', schema=None) as batch_op:
        batch_op.create_index('ix_pool_entry_passage', ['passage_pk'], unique=False)

    op.create_table('grade',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('pool_entry_pk', sa.Integer(), nullable=False),
    sa.Column('grader_pk', sa.Integer(), nullable=False),
    sa.Column('item_id', sa.String(length=300), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('raw_answer', sa.Text(), nullable=True),
    sa.Column('self_rating', sa.Integer(), nullable=True),
    sa.Column('extracted_answer', sa.Text(), nullable=True),
    sa.Column('correct', sa.Boolean(), nullable=True),
    sa.Column('error', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['grader_pk'], ['grader.id'], name=op.f('fk_grade_grader_pk_grader'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['pool_entry_pk'], ['pool_entry.id'], name=op.f('fk_grade_pool_entry_pk_pool_entry'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_grade')),
    sa.UniqueConstraint('grader_pk', 'pool_entry_pk', 'item_id', name=op.f('uq_grade_grader_pk_pool_entry_pk_item_id'))
    )
    with op.batch_alter_table('grade', schema=None) as batch_op:
        batch_op.create_index('ix_grade_pool_entry', ['pool_entry_pk'], unique=False)

    op.create_table('judgment',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('pool_entry_pk', sa.Integer(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('relevance', sa.Integer(), nullable=False),
    sa.Column('title_query', sa.String(length=200), nullable=True),
    sa.ForeignKeyConstraint(['pool_entry_pk'], ['pool_entry.id'], name=op.f('fk_judgment_pool_entry_pk_pool_entry'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_judgment')),
    sa.UniqueConstraint('pool_entry_pk', 'ordinal', name=op.f('uq_judgment_pool_entry_pk_ordinal'))
    )
    op.create_table('ranking_entry',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('system_pk', sa.Integer(), nullable=False),
    sa.Column('pool_entry_pk', sa.Integer(), nullable=False),
    sa.Column('rank', sa.Integer(), nullable=False),
    sa.Column('score', sa.Float(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['pool_entry_pk'], ['pool_entry.id'], name=op.f('fk_ranking_entry_pool_entry_pk_pool_entry'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['system_pk'], ['system.id'], name=op.f('fk_ranking_entry_system_pk_system'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ranking_entry')),
    sa.UniqueConstraint('system_pk', 'pool_entry_pk', name=op.f('uq_ranking_entry_system_pk_pool_entry_pk'))
    )
    with op.batch_alter_table('ranking_entry', schema=None) as batch_op:
        batch_op.create_index('ix_ranking_entry_pool_entry', ['pool_entry_pk'], unique=False)

    op.create_table('rubric_version_item',
    sa.Column('version_pk', sa.Integer(), nullable=False),
    sa.Column('item_pk', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['item_pk'], ['bank_item.id'], name=op.f('fk_rubric_version_item_item_pk_bank_item'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['version_pk'], ['rubric_version.id'], name=op.f('fk_rubric_version_item_version_pk_rubric_version'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('version_pk', 'item_pk', name=op.f('pk_rubric_version_item'))
    )


def downgrade() -> None:
    op.drop_table('rubric_version_item')
    with op.batch_alter_table('ranking_entry', schema=None) as batch_op:
        batch_op.drop_index('ix_ranking_entry_pool_entry')

    op.drop_table('ranking_entry')
    op.drop_table('judgment')
    with op.batch_alter_table('grade', schema=None) as batch_op:
        batch_op.drop_index('ix_grade_pool_entry')

    op.drop_table('grade')
    with op.batch_alter_table('pool_entry', schema=None) as batch_op:
        batch_op.drop_index('ix_pool_entry_passage')

    op.drop_table('pool_entry')
    with op.batch_alter_table('bank_item', schema=None) as batch_op:
        batch_op.drop_index('ix_bank_item_query')

    op.drop_table('bank_item')
    op.drop_table('system')
    op.drop_table('rubric_version')
    op.drop_table('query')
    op.drop_table('passage')
    op.drop_table('official_rank')
    op.drop_table('grader')
    op.drop_table('collection')
