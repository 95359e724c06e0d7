"""A small TREC RAG sample written for this project (original text, free to redistribute).

The three topics of the passage sample (app/samples/__init__.py), as AutoJudge Requests; four generated-answer
systems of visibly different quality as AutoJudge Reports whose sentences cite the sample's passages; an
AutoNuggetizer nugget list with vital and okay nuggets; graded qrels of a second judge (UMBRELA-style 0-3) on the
answers' passages; and an official leaderboard. ``write_rag_sample`` writes the files that
``rubric import --requests --reports --nuggets --judgments-from --official`` reads (docs/formats.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.samples import QUERIES

RAG_NAME = "rag-sample"


@dataclass(frozen=True)
class RagSampleFiles:
    requests: Path
    reports: Path
    nuggets: Path
    umbrela: Path
    official: Path


BACKGROUND = {
    "bees": "A beekeeping newcomer wants to understand how foragers recruit their nest mates.",
    "bread": "A home baker wonders what happens inside the dough while it proofs.",
    "aurora": "A traveller planning a trip to Norway asks what makes the sky glow.",
}

# (text, importance): the facts a good answer states, as an AutoNuggetizer run would list them.
NUGGETS: dict[str, list[tuple[str, str]]] = {
    "bees": [
        ("Foragers perform a waggle dance to share where flowers are", "vital"),
        ("The angle of the waggle run relative to vertical gives the direction relative to the sun", "vital"),
        ("The duration of the waggle run encodes the distance to the flowers", "vital"),
        ("Nearby food is announced with a round dance", "okay"),
    ],
    "bread": [
        ("Yeast ferments sugars in the dough", "vital"),
        ("Fermentation produces carbon dioxide gas", "vital"),
        ("A gluten network traps the gas so the dough expands", "vital"),
        ("Warmth speeds up the rise", "okay"),
    ],
    "aurora": [
        ("Charged particles from the solar wind cause the aurora", "vital"),
        ("Earth's magnetic field funnels the particles toward the polar regions", "vital"),
        ("Oxygen atoms emit the common green light", "okay"),
        ("Auroras are strongest during geomagnetic storms", "okay"),
    ],
}

# system → topic → sentences (text, cited passages of the sample); quality falls from the first system to the last.
ANSWERS: dict[str, dict[str, list[tuple[str, list[str]]]]] = {
    "rag-thorough": {
        "bees": [
            ("A forager that finds flowers returns to the hive and performs a waggle dance.", ["bees-1"]),
            (
                "The angle of the waggle run relative to vertical matches the angle between the sun and the flowers.",
                ["bees-1", "bees-2"],
            ),
            ("The longer the waggle run lasts, the farther away the flowers are.", ["bees-2"]),
            ("For food close to the hive, bees perform a round dance instead.", ["bees-3"]),
        ],
        "bread": [
            ("Yeast in the dough ferments its sugars.", ["bread-1"]),
            ("That fermentation releases carbon dioxide gas.", ["bread-1"]),
            ("Kneading builds a gluten network that traps the gas, so the dough expands.", ["bread-2"]),
            ("A warm kitchen makes the dough rise faster.", ["bread-3"]),
        ],
        "aurora": [
            ("The northern lights are caused by charged particles carried by the solar wind.", ["aurora-1"]),
            ("Earth's magnetic field guides those particles toward the polar regions.", ["aurora-2"]),
            ("The common green glow comes from oxygen atoms.", ["aurora-3"]),
            ("During geomagnetic storms the aurora becomes brighter and reaches lower latitudes.", ["aurora-4"]),
        ],
    },
    "rag-solid": {
        "bees": [("Honeybees use a waggle dance to tell nest mates where flowers are.", ["bees-1"])],
        "bread": [("Bread rises because yeast in the dough ferments sugars.", ["bread-1"])],
        "aurora": [("Auroras happen when charged particles from the sun hit the upper atmosphere.", ["aurora-1"])],
    },
    "rag-vague": {
        "bees": [("Bees communicate in many ways, including dancing.", ["bees-4"])],
        "bread": [("Dough rises when it is left somewhere warm for a while.", ["bread-3"])],
        "aurora": [("The northern lights are a natural light display seen in the far north.", ["aurora-5"])],
    },
    "rag-off-topic": {
        "bees": [("Honey is a popular sweetener with a long shelf life.", [])],
        "bread": [("Sourdough has become a popular hobby for home bakers.", ["bread-7"])],
        "aurora": [("Tromsø is a popular destination for winter tourism.", ["aurora-5"])],
    },
}

OFFICIAL = {"rag-thorough": 1, "rag-solid": 2, "rag-vague": 3, "rag-off-topic": 4}
# a second judge's 0-3 grade of each system's answer (one passage per answer in this sample)
UMBRELA = {"rag-thorough": 3, "rag-solid": 2, "rag-vague": 1, "rag-off-topic": 0}


def write_rag_sample(directory: Path) -> RagSampleFiles:
    """Write the RAG sample's files into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    files = RagSampleFiles(
        directory / "requests.jsonl",
        directory / "reports.jsonl",
        directory / "nuggets.jsonl",
        directory / "umbrela.qrels",
        directory / "official.json",
    )
    requests = [{"request_id": q, "title": text, "background": BACKGROUND[q]} for q, text in QUERIES.items()]
    _write_jsonl(files.requests, requests)
    reports = [
        {
            "metadata": {"team_id": "sample", "run_id": system, "topic_id": q},
            "responses": [{"text": text, "citations": cited} for text, cited in answers[q]],
        }
        for system, answers in ANSWERS.items()
        for q in QUERIES
    ]
    _write_jsonl(files.reports, reports)
    nuggets = [
        {"qid": q, "query": QUERIES[q], "nuggets": [{"text": t, "importance": i} for t, i in NUGGETS[q]]}
        for q in QUERIES
    ]
    _write_jsonl(files.nuggets, nuggets)
    qrels = [f"{q} 0 {system}:{q}:0 {grade}\n" for q in QUERIES for system, grade in UMBRELA.items()]
    files.umbrela.write_text("".join(qrels), encoding="utf-8")
    files.official.write_text(json.dumps(OFFICIAL), encoding="utf-8")
    return files


def _write_jsonl(path: Path, records: Sequence[Mapping[str, object]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
