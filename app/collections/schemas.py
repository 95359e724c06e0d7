"""Pydantic schemas of the upstream interchange format (spec §4) and of test-bank files.

The limits below are the database's: a string longer than its ``String(n)`` column (app/models)
or an integer outside a 32-bit ``Integer`` column is refused here, with its file, line and field,
the same way on SQLite (which would store it) and PostgreSQL (which would raise a DataError).
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, with_config
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
ID_MAX = 2**63 - 1  # a primary key, as a parameter: SQLite's INTEGER and PostgreSQL's bigint bound
QUERY_ID_MAX = 200  # Query.query_id, BankItem.facet_id, Judgment.title_query
PASSAGE_ID_MAX = 300  # Passage.passage_id
SYSTEM_NAME_MAX = 200  # System.name, OfficialRank.system_name
ITEM_ID_MAX = 300  # BankItem.item_id, Grade.item_id, GradeOverride.item_id, ItemFlag.item_id
MODEL_MAX = 300  # Grader.model
PROMPT_CLASS_MAX = 200  # Grader.prompt_class
PROMPT_TYPE_MAX = 20  # Grader.prompt_type
COLLECTION_NAME_MAX = 200  # Collection.name
RELEVANCE_MIN, RELEVANCE_MAX = -1000, 1000  # a judgment grade (TREC uses -2..4)
RATING_MIN, RATING_MAX = -1000, 1000  # a self-rating as imported (graders write 0..5)
NO_NUL = r"^[^\x00]*$"  # PostgreSQL text cannot hold NUL; SQLite could, so both refuse it

Int32 = Annotated[StrictInt, Field(ge=INT32_MIN, le=INT32_MAX)]
Rank = Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]
Relevance = Annotated[StrictInt, Field(ge=RELEVANCE_MIN, le=RELEVANCE_MAX)]
Rating = Annotated[StrictInt, Field(ge=RATING_MIN, le=RATING_MAX)]
QueryId = Annotated[StrictStr, Field(min_length=1, max_length=QUERY_ID_MAX)]
PassageId = Annotated[StrictStr, Field(min_length=1, max_length=PASSAGE_ID_MAX)]
ItemId = Annotated[StrictStr, Field(max_length=ITEM_ID_MAX)]


class _Record(BaseModel):
    # NaN and ±Infinity are no scores: they break sorting and PostgreSQL's JSON refuses them.
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class JudgmentIn(_Record):
    paragraphId: StrictStr | None = None
    query: StrictStr | None = None
    relevance: Relevance
    titleQuery: Annotated[StrictStr, Field(max_length=QUERY_ID_MAX)] | None = None


# The two per-row records validate into plain dicts: a model instance per ranking or rating cost
# half of an import's validation time. Optional keys are read with ``.get``.
_ROW_CONFIG = ConfigDict(extra="allow", allow_inf_nan=False)


@with_config(_ROW_CONFIG)
class RankingIn(TypedDict):
    method: Annotated[StrictStr, Field(min_length=1, max_length=SYSTEM_NAME_MAX)]
    paragraphId: NotRequired[StrictStr | None]
    queryId: NotRequired[StrictStr | None]
    rank: Rank
    score: StrictFloat | Annotated[StrictInt, Field(ge=-(2**53), le=2**53)]


class ParagraphData(_Record):
    judgments: list[JudgmentIn] = Field(default_factory=list)
    rankings: list[RankingIn] = Field(default_factory=list)


@with_config(_ROW_CONFIG)
class SelfRatingIn(TypedDict):
    question_id: NotRequired[ItemId | None]
    nugget_id: NotRequired[ItemId | None]
    self_rating: Rating


class ExamGradesIn(_Record):
    correctAnswered: list[ItemId] = Field(default_factory=list)
    wrongAnswered: list[ItemId] = Field(default_factory=list)
    answers: list[tuple[ItemId, StrictStr]] = Field(default_factory=list)
    llm_response_errors: dict[Annotated[str, Field(max_length=ITEM_ID_MAX)], Any] | None = None
    llm: Annotated[StrictStr, Field(max_length=MODEL_MAX)]
    llm_options: dict[str, Any] = Field(default_factory=dict)
    exam_ratio: float | None = None
    prompt_info: dict[str, Any] | None = None
    self_ratings: list[SelfRatingIn] | None = None
    prompt_type: Annotated[StrictStr, Field(max_length=PROMPT_TYPE_MAX)] | None = None
    relevance_label: Int32 | None = None


class GradesIn(_Record):
    correctAnswered: StrictBool
    answer: StrictStr
    llm_response_error: Any = None
    llm: Annotated[StrictStr, Field(max_length=MODEL_MAX)]
    llm_options: dict[str, Any] = Field(default_factory=dict)
    prompt_info: dict[str, Any] | None = None
    self_ratings: Rating | None = None
    prompt_type: Annotated[StrictStr, Field(max_length=PROMPT_TYPE_MAX)] | None = None
    relevance_label: Int32 | None = None


class ParagraphIn(_Record):
    paragraph_id: PassageId
    text: StrictStr
    paragraph: Any = None
    paragraph_data: ParagraphData = Field(default_factory=ParagraphData)
    exam_grades: list[ExamGradesIn] | None = None
    grades: list[GradesIn] | None = None


class BankItemIn(_Record):
    query_id: StrictStr | None = None
    facet_id: Annotated[StrictStr, Field(max_length=QUERY_ID_MAX)] | None = None
    info: Any = None
    question_id: ItemId | None = None
    question_text: StrictStr | None = None
    nugget_id: ItemId | None = None
    nugget_text: StrictStr | None = None
    gold_answers: list[StrictStr] | None = None


class BankIn(_Record):
    query_id: QueryId
    facet_id: Annotated[StrictStr, Field(max_length=QUERY_ID_MAX)] | None = None
    facet_text: StrictStr | None = None
    test_collection: StrictStr | None = None
    query_text: StrictStr = ""
    info: Any = None
    hash: Any = None
    items: list[BankItemIn] | None = None
    questions: list[BankItemIn] | None = None
