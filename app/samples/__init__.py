"""A small sample collection written for this project (original text, free to redistribute).

Three queries, eight passages each, four systems (top 5 each) of visibly different quality, three questions per
query, manual judgments 0-3 and an official leaderboard. ``write_sample`` writes it in the
interchange, queries, bank and official-leaderboard formats that ``rubric import`` reads.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

NAME = "sample"


@dataclass(frozen=True)
class SampleFiles:
    passages: Path
    queries: Path
    bank: Path
    official: Path


QUERIES = {
    "bees": "how do honeybees tell each other where flowers are",
    "bread": "why does bread dough rise",
    "aurora": "what causes the northern lights",
}

QUESTIONS = {
    "bees": [
        "What is the waggle dance?",
        "How does the angle of the dance point to the food source?",
        "How do bees signal how far away the flowers are?",
    ],
    "bread": [
        "Which gas makes bread dough rise?",
        "What organism ferments the sugars in the dough?",
        "Why does kneading help the dough hold gas?",
    ],
    "aurora": [
        "What particles cause the northern lights?",
        "Why are auroras mostly seen near the poles?",
        "What gives the aurora its green colour?",
    ],
}

# (passage id, judged relevance 0-3, text)
PASSAGES: dict[str, list[tuple[str, int, str]]] = {
    "bees": [
        (
            "bees-1",
            3,
            "A forager that finds a rich patch of flowers returns to the hive and performs a waggle dance: "
            "she runs a straight line while shaking her body, then loops back and repeats. The angle of that run "
            "relative to vertical on the comb matches the angle between the sun and the flowers.",
        ),
        (
            "bees-2",
            3,
            "The duration of the waggle run tells the other bees how far to fly. A run lasting about one "
            "second means the food is roughly a kilometre away; shorter runs mean closer flowers.",
        ),
        (
            "bees-3",
            2,
            "Honeybees share information about food through dances. For flowers very close to the hive, "
            "a forager performs a round dance instead, which says 'search nearby' without giving a direction.",
        ),
        (
            "bees-4",
            1,
            "Scent also matters: dancers carry the odour of the flowers they visited, and recruits use "
            "that smell to recognise the right blossoms once they arrive in the area.",
        ),
        (
            "bees-5",
            0,
            "A honeybee colony has one queen, several thousand drones in summer, and tens of thousands "
            "of female workers who build comb, nurse larvae and guard the entrance.",
        ),
        (
            "bees-6",
            0,
            "Beekeepers harvest honey in late summer, leaving enough stores in the hive for the colony "
            "to survive the winter months.",
        ),
        ("bees-7", 0, "The stock market closed higher on Friday as technology shares recovered from early losses."),
        ("bees-8", 0, "Bumblebees are larger and hairier than honeybees and can fly at lower temperatures."),
    ],
    "bread": [
        (
            "bread-1",
            3,
            "Bread rises because yeast ferments sugars in the flour and releases carbon dioxide gas. The "
            "gas forms bubbles that are trapped in the dough, making it expand.",
        ),
        (
            "bread-2",
            3,
            "Kneading develops gluten, a stretchy network of proteins. Gluten traps the carbon dioxide "
            "bubbles produced by the yeast, so the dough can hold gas and rise instead of letting it escape.",
        ),
        (
            "bread-3",
            2,
            "Baker's yeast, Saccharomyces cerevisiae, is a single-celled fungus. In warm dough it "
            "converts sugar into carbon dioxide and a little alcohol, which evaporates in the oven.",
        ),
        (
            "bread-4",
            1,
            "In the oven the trapped gas expands further, giving the loaf a final burst of height "
            "known as oven spring, before the crust sets.",
        ),
        ("bread-5", 0, "Sourdough starters are kept alive by feeding them flour and water every day or two."),
        (
            "bread-6",
            0,
            "Whole wheat flour contains the bran and germ of the grain, so it has more fibre than white flour.",
        ),
        ("bread-7", 0, "The northern lights are caused by charged particles from the sun striking the atmosphere."),
        ("bread-8", 0, "Our football team won the regional championship after a dramatic penalty shoot-out."),
    ],
    "aurora": [
        (
            "aurora-1",
            3,
            "The northern lights appear when charged particles from the solar wind, mostly electrons "
            "and protons, collide with gases high in the atmosphere and make them glow.",
        ),
        (
            "aurora-2",
            3,
            "Earth's magnetic field guides these charged particles toward the polar regions, which is "
            "why auroras are usually seen in a ring around the north and south magnetic poles.",
        ),
        (
            "aurora-3",
            3,
            "The common green colour comes from oxygen atoms about 100 to 300 kilometres up; red "
            "light comes from oxygen at higher altitudes and blue or purple from nitrogen.",
        ),
        (
            "aurora-4",
            1,
            "Strong solar storms can push the aurora much further from the poles, so people in "
            "central Europe occasionally see it.",
        ),
        ("aurora-5", 0, "Tromsø in northern Norway is a popular destination for winter tourism."),
        ("aurora-6", 0, "Bread rises because yeast produces carbon dioxide gas that gets trapped in the dough."),
        ("aurora-7", 0, "Photographers recommend a tripod and a long exposure for night photography."),
        ("aurora-8", 0, "The company announced record profits for the third quarter."),
    ],
}

# Each system's ranking per query, as indexes into PASSAGES[query] (0 = the first passage above).
SYSTEM_ORDERS: dict[str, list[int]] = {
    "strong-ranker": [0, 1, 2, 3, 4],
    "decent-ranker": [2, 0, 4, 5, 1],
    "keyword-ranker": [4, 3, 5, 0, 7],
    "weak-ranker": [6, 7, 5, 4, 3],
}
OFFICIAL = {"strong-ranker": 1, "decent-ranker": 2, "keyword-ranker": 3, "weak-ranker": 4}


def question_id(query_id: str, text: str) -> str:
    return f"{query_id}/{hashlib.md5(text.encode()).hexdigest()}"


def _paragraph(query_id: str, index: int) -> dict[str, object]:
    passage_id, relevance, text = PASSAGES[query_id][index]
    rankings = [
        {
            "method": system,
            "paragraphId": passage_id,
            "queryId": query_id,
            "rank": order.index(index) + 1,
            "score": float(len(order) - order.index(index)),
        }
        for system, order in SYSTEM_ORDERS.items()
        if index in order
    ]
    return {
        "paragraph_id": passage_id,
        "text": text,
        "paragraph": "",
        "paragraph_data": {
            "judgments": [
                {"paragraphId": passage_id, "query": query_id, "relevance": relevance, "titleQuery": query_id}
            ],
            "rankings": rankings,
        },
        "exam_grades": None,
        "grades": None,
    }


def write_sample(directory: Path) -> SampleFiles:
    """Write the sample collection's files into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    files = SampleFiles(
        directory / "passages.jsonl", directory / "queries.json", directory / "bank.jsonl", directory / "official.json"
    )
    lines = [json.dumps([q, [_paragraph(q, i) for i in range(len(PASSAGES[q]))]]) for q in QUERIES]
    files.passages.write_text("\n".join(lines) + "\n", encoding="utf-8")
    files.queries.write_text(json.dumps(QUERIES, indent=1), encoding="utf-8")
    banks = [
        {
            "query_id": q,
            "test_collection": NAME,
            "query_text": QUERIES[q],
            "items": [
                {"query_id": q, "question_id": question_id(q, text), "question_text": text} for text in QUESTIONS[q]
            ],
        }
        for q in QUERIES
    ]
    files.bank.write_text("".join(json.dumps(b) + "\n" for b in banks), encoding="utf-8")
    files.official.write_text(json.dumps(OFFICIAL), encoding="utf-8")
    return files
