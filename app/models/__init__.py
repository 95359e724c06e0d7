"""ORM models; importing this package registers every table on ``Base.metadata``."""

from app.models.auth import AuthSession, LoginThrottle
from app.models.base import Base
from app.models.collection import (
    Citation,
    Collection,
    ExternalJudgment,
    Judgment,
    OfficialRank,
    Passage,
    PoolEntry,
    Query,
    RankingEntry,
    System,
)
from app.models.grading import DIRECT_ITEM, Grade, GradeCache, Grader
from app.models.jobs import Job, JobBatch
from app.models.review import ROLES, GradeOverride, ItemFlag, OverrideEvent, User
from app.models.rubric import BankItem, RubricVersion, RubricVersionItem

__all__ = [
    "AuthSession",
    "LoginThrottle",
    "DIRECT_ITEM",
    "BankItem",
    "Base",
    "Citation",
    "Collection",
    "ExternalJudgment",
    "Grade",
    "GradeCache",
    "Grader",
    "GradeOverride",
    "ItemFlag",
    "OverrideEvent",
    "ROLES",
    "User",
    "Job",
    "JobBatch",
    "Judgment",
    "OfficialRank",
    "Passage",
    "PoolEntry",
    "Query",
    "RankingEntry",
    "RubricVersion",
    "RubricVersionItem",
    "System",
]
