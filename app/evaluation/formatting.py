"""Number formatting and table rendering (TSV, JSON, Markdown, LaTeX)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

TableFormat = Literal["tsv", "json", "md", "latex"]
Cell = str | int | float | None


def reference_round(value: float) -> float:
    """trec_eval prints 4 decimals and the reference tables reprint those with 3: 0.61047 → 0.6105 → 0.611."""
    return float(f"{float(f'{value:.4f}'):.3f}")


def trec_eval_round(value: float) -> float:
    """The 4-decimal value trec_eval prints, on which the reference computes its correlations."""
    return float(f"{value:.4f}")


def format_number(value: float | None, digits: int = 3) -> str:
    if value is None:
        return ""
    if math.isnan(value):
        return "nan"
    return f"{value:.{digits}f}"


@dataclass(slots=True)
class Table:
    """A titled grid of cells; numbers are formatted by ``digits`` in text formats, raw in JSON."""

    title: str
    columns: Sequence[str]
    rows: list[list[Cell]]
    footer: list[str] = field(default_factory=list)
    digits: int = 3

    def _text(self, cell: Cell) -> str:
        if isinstance(cell, float):
            return format_number(cell, self.digits)
        return "" if cell is None else str(cell)

    def to_tsv(self) -> str:
        lines = ["\t".join(self.columns)]
        lines += ["\t".join(self._text(c) for c in row) for row in self.rows]
        lines += [f"# {line}" for line in self.footer]
        return "\n".join(lines) + "\n"

    def to_markdown(self) -> str:
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |"]
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        lines += ["| " + " | ".join(self._text(c).replace("|", "\\|") for c in row) + " |" for row in self.rows]
        lines += ["", *self.footer] if self.footer else []
        return "\n".join(lines) + "\n"

    def to_latex(self) -> str:
        spec = "l" + "r" * (len(self.columns) - 1)
        lines = [
            "\\begin{table}",
            f"\\caption{{{latex_escape(self.title)}}}",
            f"\\begin{{tabular}}{{{spec}}}",
            "\\toprule",
            " & ".join(latex_escape(c) for c in self.columns) + " \\\\",
            "\\midrule",
        ]
        lines += [" & ".join(latex_escape(self._text(c)) for c in row) + " \\\\" for row in self.rows]
        lines += ["\\bottomrule", "\\end{tabular}"]
        lines += [f"% {latex_escape(line)}" for line in self.footer]
        lines.append("\\end{table}")
        return "\n".join(lines) + "\n"

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "columns": list(self.columns),
            "rows": [dict(zip(self.columns, row, strict=True)) for row in self.rows],
            "footer": self.footer,
        }

    def render(self, fmt: TableFormat) -> str:
        if fmt == "tsv":
            return self.to_tsv()
        if fmt == "md":
            return self.to_markdown()
        if fmt == "latex":
            return self.to_latex()
        return json.dumps(self.to_json_obj(), indent=1, default=json_default) + "\n"


_LATEX_SPECIAL = {
    "\\": "\\textbackslash{}",
    "&": "\\&",
    "%": "\\%",
    "$": "\\$",
    "#": "\\#",
    "_": "\\_",
    "{": "\\{",
    "}": "\\}",
    "~": "\\textasciitilde{}",
    "^": "\\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def json_default(value: object) -> object:
    if isinstance(value, frozenset | set):
        return sorted(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def render_tables(tables: Sequence[Table], fmt: TableFormat) -> str:
    if fmt == "json":
        return json.dumps([t.to_json_obj() for t in tables], indent=1, default=json_default) + "\n"
    return "\n".join(t.render(fmt) for t in tables)


def nan_to_none(value: float) -> float | None:
    """JSON has no NaN: a constant leaderboard's correlation is written as null."""
    return None if math.isnan(value) else value
