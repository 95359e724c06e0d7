"""Cell errors by kind: the summary a run prints, and the fail-fast rule that stops a hopeless run.

A cell error's message starts with its kind (``NotFoundError: …``, ``RateLimitError after 7
attempts: …``, ``EmptyReply: …``); the kind is what "identical errors" compares, so a run against a
dead server stops after N connection errors whatever their texts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

NOT_SENT = "NotSent"  # cells a tripped run never sent: they get no grade row
# Errors of one cell's own input (an empty passage, a question longer than the context, JSON the
# model garbled): a run of them says nothing about the server, so fail-fast neither counts nor resets on them.
CELL_LOCAL = frozenset({"PromptTooLong", "ValueError", "could not parse the model's JSON"})
_KIND = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)(?=:| after )")
_PART = re.compile(r"^(?P<kind>\S+) ×(?P<count>\d+): (?P<example>.*)$")


def error_kind(message: str) -> str:
    """The leading exception-like name of a cell error, else its first 40 characters."""
    found = _KIND.match(message)
    if found:
        return found.group(1)
    return message.split(":", 1)[0][:40]


@dataclass
class ErrorSummary:
    """Counts of cell errors per kind, with the first message of each kind as its example."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, message: str, count: int = 1) -> None:
        kind = error_kind(message)
        self.counts[kind] = self.counts.get(kind, 0) + count
        self.examples.setdefault(kind, message)

    def merge(self, other: ErrorSummary) -> None:
        for kind, count in other.counts.items():
            self.counts[kind] = self.counts.get(kind, 0) + count
            self.examples.setdefault(kind, other.examples[kind])

    def lines(self) -> list[str]:
        """``KIND ×N: example`` per kind, most frequent first (one line each: newlines flattened)."""
        ordered = sorted(self.counts, key=lambda k: (-self.counts[k], k))
        return [f"{kind} ×{self.counts[kind]}: {_one_line(self.examples[kind])}" for kind in ordered]

    def render(self) -> str:
        return " | ".join(self.lines())

    @classmethod
    def parse(cls, text: str | None) -> ErrorSummary:
        """The inverse of ``render`` (a batch stores its summary as text); other text counts as one error."""
        summary = cls()
        for part in (text or "").split(" | "):
            if not part:
                continue
            found = _PART.match(part)
            if found:
                summary.counts[found["kind"]] = summary.counts.get(found["kind"], 0) + int(found["count"])
                summary.examples.setdefault(found["kind"], found["example"])
            else:
                summary.add(part)
        return summary

    @classmethod
    def of(cls, messages: Iterable[str | None]) -> ErrorSummary:
        summary = cls()
        for message in messages:
            if message:
                summary.add(message)
        return summary


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300].replace(" | ", " / ")


@dataclass
class ConsecutiveErrors:
    """Fail fast: trips once ``limit`` cells in a row ended in the same kind of error.

    A graded cell resets the run; so does an error of another kind (a mixed stream of errors is
    not one broken setting, and stopping it would hide which cells fail).
    """

    limit: int
    kind: str | None = None
    run: int = 0
    example: str = ""

    def feed(self, error: str | None) -> bool:
        if error is None:
            self.kind, self.run = None, 0
            return False
        kind = error_kind(error)
        if kind == NOT_SENT or kind in CELL_LOCAL:
            return self.tripped
        if kind != self.kind:
            self.kind, self.run, self.example = kind, 0, error
        self.run += 1
        return self.tripped

    @property
    def tripped(self) -> bool:
        return self.limit > 0 and self.run >= self.limit

    def reason(self) -> str:
        return f"stopped after {self.run} consecutive {self.kind} errors: {_one_line(self.example)}"
