"""Pydantic schemas of the upstream interchange format (spec §4) and of test-bank files."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow")


class JudgmentIn(_Record):
    paragraphId: StrictStr | None = None
    query: StrictStr | None = None
    relevance: StrictInt
    titleQuery: StrictStr | None = None


class RankingIn(_Record):
    method: StrictStr = Field(min_length=1)
    paragraphId: StrictStr | None = None
    queryId: StrictStr | None = None
    rank: StrictInt
    score: StrictFloat | StrictInt


class ParagraphData(_Record):
    judgments: list[JudgmentIn] = Field(default_factory=list)
    rankings: list[RankingIn] = Field(default_factory=list)


class SelfRatingIn(_Record):
    question_id: StrictStr | None = None
    nugget_id: StrictStr | None = None
    self_rating: StrictInt


class ExamGradesIn(_Record):
    correctAnswered: list[StrictStr] = Field(default_factory=list)
    wrongAnswered: list[StrictStr] = Field(default_factory=list)
    answers: list[tuple[StrictStr, StrictStr]] = Field(default_factory=list)
    llm_response_errors: dict[str, Any] | None = None
    llm: StrictStr
    llm_options: dict[str, Any] = Field(default_factory=dict)
    exam_ratio: float | None = None
    prompt_info: dict[str, Any] | None = None
    self_ratings: list[SelfRatingIn] | None = None
    prompt_type: StrictStr | None = None
    relevance_label: StrictInt | None = None


class GradesIn(_Record):
    correctAnswered: StrictBool
    answer: StrictStr
    llm_response_error: Any = None
    llm: StrictStr
    llm_options: dict[str, Any] = Field(default_factory=dict)
    prompt_info: dict[str, Any] | None = None
    self_ratings: StrictInt | None = None
    prompt_type: StrictStr | None = None
    relevance_label: StrictInt | None = None


class ParagraphIn(_Record):
    paragraph_id: StrictStr = Field(min_length=1)
    text: StrictStr
    paragraph: Any = None
    paragraph_data: ParagraphData = Field(default_factory=ParagraphData)
    exam_grades: list[ExamGradesIn] | None = None
    grades: list[GradesIn] | None = None


class BankItemIn(_Record):
    query_id: StrictStr | None = None
    facet_id: StrictStr | None = None
    info: Any = None
    question_id: StrictStr | None = None
    question_text: StrictStr | None = None
    nugget_id: StrictStr | None = None
    nugget_text: StrictStr | None = None
    gold_answers: list[StrictStr] | None = None


class BankIn(_Record):
    query_id: StrictStr = Field(min_length=1)
    facet_id: StrictStr | None = None
    facet_text: StrictStr | None = None
    test_collection: StrictStr | None = None
    query_text: StrictStr = ""
    info: Any = None
    hash: Any = None
    items: list[BankItemIn] | None = None
    questions: list[BankItemIn] | None = None
