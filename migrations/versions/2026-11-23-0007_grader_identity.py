"""grader identity: everything that changes the grades, unique by its hash

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 01:30:00

A grader was unique by (model, prompt_class, template_hash), so a run with another backend,
endpoint or decoding under the same model name wrote into the old row. Each row now carries its
identity (canonical JSON) and that identity's sha256, unique. Existing rows keep their id and
every grade: their identity is rebuilt from what they stored (the options a ``rubric grade`` run
or an interchange file recorded), so re-running the same settings after the upgrade finds the same
row; a row that stored too little gets the old triple with a ``legacy`` marker.

The functions below copy app/grading/methods.py:grader_identity and
app/collections/grades_io.py:_imported_grader as they were at this revision: a migration never
imports application code, which moves on.
"""

import hashlib
import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from alembic import op

revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NOT_IDENTITY = frozenset({"label", "device", "batch_size", "batch_tokens", "concurrency", "timeout", "max_retries"})

grader = sa.table(
    'grader',
    sa.column('id', sa.Integer()),
    sa.column('model', sa.String()),
    sa.column('prompt_class', sa.String()),
    sa.column('template_hash', sa.String()),
    sa.column('prompt_type', sa.String()),
    sa.column('options', sa.JSON()),
    sa.column('identity', sa.JSON()),
    sa.column('identity_hash', sa.String()),
)


def _hash(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _host(url: str) -> str:
    parts = urlsplit(url if "//" in url else f"//{url}")
    host = parts.hostname or ""
    return f"{host}:{parts.port}" if parts.port else host


def _legacy(row: Any) -> dict[str, Any]:
    return {"legacy": True, "model": row.model, "prompt_class": row.prompt_class, "template_hash": row.template_hash}


def identity_of(row: Any) -> dict[str, Any]:
    """The identity the current code computes for the settings the row recorded, else the legacy triple."""
    options = row.options if isinstance(row.options, dict) else {}
    fixed = {"prompt_class": row.prompt_class, "prompt_type": row.prompt_type, "template_hash": row.template_hash}
    if options.get("source") == "interchange":
        return {
            "backend": "imported",
            "model": row.model,
            "llm_options": options.get("llm_options", {}),
            "prompt_info": options.get("prompt_info"),
            "fields": options.get("fields", []),
            **fixed,
            "prompt_type": options.get("prompt_type", row.prompt_type),
        }
    if options.get("source") == "rubric grade" and "backend" in options and "model" in options:
        identity = {k: v for k, v in options.items() if k != "source" and k not in NOT_IDENTITY}
        if isinstance(identity.get("base_url"), str):
            identity["base_url"] = _host(identity["base_url"])
        return {**identity, "template": row.template_hash, **fixed}
    return _legacy(row)


def upgrade() -> None:
    with op.batch_alter_table('grader', schema=None) as batch_op:
        batch_op.add_column(sa.Column('identity', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('identity_hash', sa.String(length=64), nullable=True))
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(
            grader.c.id, grader.c.model, grader.c.prompt_class, grader.c.template_hash, grader.c.prompt_type,
            grader.c.options,
        ).order_by(grader.c.id)
    ).all()
    seen: set[str] = set()
    for row in rows:
        identity = identity_of(row)
        if _hash(identity) in seen:  # two old rows that recorded the same settings: keep both, apart
            identity = _legacy(row)
        seen.add(_hash(identity))
        connection.execute(
            sa.update(grader).where(grader.c.id == row.id).values(identity=identity, identity_hash=_hash(identity))
        )
    with op.batch_alter_table('grader', schema=None) as batch_op:
        batch_op.alter_column('identity', existing_type=sa.JSON(), nullable=False)
        batch_op.alter_column('identity_hash', existing_type=sa.String(length=64), nullable=False)
        batch_op.drop_constraint('uq_grader_model_prompt_class_template_hash', type_='unique')
        batch_op.create_unique_constraint(batch_op.f('uq_grader_identity_hash'), ['identity_hash'])


def downgrade() -> None:
    # Fails (unique violation) where two graders share model, prompt class and template: the old
    # schema cannot hold them apart, and a downgrade must not merge their grades.
    with op.batch_alter_table('grader', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('uq_grader_identity_hash'), type_='unique')
        batch_op.create_unique_constraint(
            batch_op.f('uq_grader_model_prompt_class_template_hash'), ['model', 'prompt_class', 'template_hash']
        )
        batch_op.drop_column('identity_hash')
        batch_op.drop_column('identity')
