"""Small server-rendered SVG charts (no JavaScript): scores with error bars, and score against official rank.

Each chart is an ``<svg role="img">`` named by its ``<title>`` and described by its ``<desc>``;
every mark carries its own ``<title>`` (the browser's tooltip) so no value lives in colour alone.
Axes are scaled to the data, with tick labels, so 37+ systems whose scores differ in the second
decimal stay readable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

WIDTH = 640
ROW = 16  # px per system in the error-bar chart
LEFT = 190  # room for system names
RIGHT = 24
TOP = 26
BOTTOM = 34
NAME_CHARS = 28  # longer names are cut with "…" (the full name is in the row's title)


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering [low, high] (steps of 1, 2 or 5 × 10^k)."""
    if not math.isfinite(low) or not math.isfinite(high):
        return [0.0]
    if high <= low:
        return [low]
    raw = (high - low) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _short(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"


def _decimals(ticks: Sequence[float]) -> int:
    if len(ticks) < 2:
        return 3
    step = abs(ticks[1] - ticks[0])
    return max(0, min(4, -math.floor(math.log10(step)) if step > 0 else 3))


def error_bars(rows: list[tuple[str, float, float | None, float | None]], measure: str = "score") -> Markup:
    """One row per system (best first): a dot at the score, whiskers from ci_low to ci_high.

    The x axis spans the data (lowest CI end to highest, padded), not 0..max: the differences a
    board is read for are often in the second decimal.
    """
    if not rows:
        return Markup("")
    values = [v for _, score, low, high in rows for v in (score, low, high) if v is not None]
    ticks = nice_ticks(min(values), max(values))
    lo, hi = min(ticks[0], min(values)), max(ticks[-1], max(values))
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
        ticks = nice_ticks(lo, hi)
    plot = WIDTH - LEFT - RIGHT
    height = TOP + ROW * len(rows) + BOTTOM

    def x(value: float) -> float:
        return LEFT + (value - lo) / (hi - lo) * plot

    digits = _decimals(ticks)
    parts = [
        f'<svg class="chart errorbars" role="img" aria-labelledby="eb-title eb-desc" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}">',
        f'<title id="eb-title">{escape(measure)} per system with 95% bootstrap confidence intervals</title>',
        f'<desc id="eb-desc">{len(rows)} systems, best first; dots are scores, lines the intervals; '
        f"the axis runs from {lo:.{digits}f} to {hi:.{digits}f}, not from zero.</desc>",
    ]
    axis_y = TOP + ROW * len(rows) + 4
    for tick in ticks:
        if lo - 1e-12 <= tick <= hi + 1e-12:
            tx = x(tick)
            parts.append(f'<line class="grid" x1="{tx:.1f}" x2="{tx:.1f}" y1="{TOP - 6}" y2="{axis_y}"/>')
            parts.append(
                f'<text class="tick" x="{tx:.1f}" y="{axis_y + 12}" text-anchor="middle">{tick:.{digits}f}</text>'
            )
    parts.append(
        f'<text class="axis-label" x="{LEFT + plot / 2:.1f}" y="{height - 4}" text-anchor="middle">'
        f"{escape(measure)} (axis from {lo:.{digits}f})</text>"
    )
    for i, (name, score, low, high) in enumerate(rows):
        y = TOP + i * ROW + ROW / 2
        interval = f", 95% CI [{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""
        parts.append(f"<g><title>{escape(name)}: {score:.3f}{interval}</title>")
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(_short(name))}</text>')
        if low is not None and high is not None:
            parts.append(f'<line class="ci" x1="{x(low):.1f}" x2="{x(high):.1f}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<circle cx="{x(score):.1f}" cy="{y:.1f}" r="3.5"/></g>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _label_boxes_overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def rank_scatter(points: list[tuple[str, float, float]], measure: str = "score") -> Markup:
    """Our score (x) against the official rank (y, rank 1 at the top), one labelled point per system.

    Every point has a tooltip; names are written beside the points where they do not collide with
    a name already placed (official rank order, so the top of the official list is labelled first).
    """
    if not points:
        return Markup("")
    width, height, left, right, top, bottom = 460, 400, 46, 16, 16, 40
    scores = [s for _, s, _ in points]
    ticks = nice_ticks(min(scores), max(scores), 4)
    lo, hi = min(ticks[0], min(scores)), max(ticks[-1], max(scores))
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
        ticks = nice_ticks(lo, hi, 4)
    last = max(max(o for _, _, o in points), 2.0)
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(value: float) -> float:
        return left + (value - lo) / (hi - lo) * plot_w

    def y(rank: float) -> float:
        return top + (rank - 1) / (last - 1) * plot_h

    digits = _decimals(ticks)
    parts = [
        f'<svg class="chart scatter" role="img" aria-labelledby="sc-title sc-desc" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">',
        f'<title id="sc-title">{escape(measure)} against the official rank</title>',
        f'<desc id="sc-desc">{len(points)} systems; official rank 1 is at the top. Agreement shows as '
        "points falling from the top right to the bottom left.</desc>",
    ]
    for tick in ticks:
        if lo - 1e-12 <= tick <= hi + 1e-12:
            parts.append(f'<line class="grid" x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{top}" y2="{top + plot_h}"/>')
            parts.append(
                f'<text class="tick" x="{x(tick):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{tick:.{digits}f}</text>'
            )
    for rank in nice_ticks(1, last, 5):
        if 1 <= rank <= last:
            parts.append(f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{y(rank):.1f}" y2="{y(rank):.1f}"/>')
            parts.append(f'<text class="tick" x="{left - 4}" y="{y(rank) + 3:.1f}" text-anchor="end">{rank:g}</text>')
    parts += [
        f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">'
        f"{escape(measure)} (ours)</text>",
        f'<text class="axis-label" x="12" y="{top + plot_h / 2:.1f}" transform="rotate(-90 12 {top + plot_h / 2:.1f})" '
        'text-anchor="middle">official rank</text>',
    ]
    placed: list[tuple[float, float, float, float]] = []
    for name, score, official in sorted(points, key=lambda p: (p[2], p[0])):
        px, py = x(score), y(official)
        parts.append(
            f"<g><title>{escape(name)}: {escape(measure)} {score:.3f}, official rank {official:g}</title>"
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5"/></g>'
        )
        label = _short(name)
        text_w = 5.2 * len(label)
        anchor_end = px + 6 + text_w > width - 2  # near the right edge: write the name to the left
        x0 = px - 6 - text_w if anchor_end else px + 6
        box = (x0, py - 8, x0 + text_w, py + 3)
        if any(_label_boxes_overlap(box, other) for other in placed):
            continue
        placed.append(box)
        anchor = "end" if anchor_end else "start"
        lx = px - 6 if anchor_end else px + 6
        parts.append(
            f'<text class="point-label" x="{lx:.1f}" y="{py + 3:.1f}" text-anchor="{anchor}">{escape(label)}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
