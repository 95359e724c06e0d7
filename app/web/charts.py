"""Small server-rendered SVG charts (no JavaScript): scores with error bars, and a rank scatter plot."""

from __future__ import annotations

from markupsafe import Markup, escape

WIDTH = 560
ROW = 22
LEFT = 170


def error_bars(rows: list[tuple[str, float, float | None, float | None]]) -> Markup:
    """One row per system: a dot at the score, whiskers from ci_low to ci_high (or ± nothing)."""
    if not rows:
        return Markup("")
    values = [v for _, score, low, high in rows for v in (score, low, high) if v is not None]
    top = max(max(values), 1e-9)
    scale = (WIDTH - LEFT - 20) / top
    height = ROW * len(rows) + 24
    parts = [
        f'<svg class="chart" role="img" aria-label="scores with 95% confidence intervals" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}">'
    ]
    for i, (name, score, low, high) in enumerate(rows):
        y = 14 + i * ROW
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4}" text-anchor="end">{escape(name)}</text>')
        if low is not None and high is not None:
            parts.append(
                f'<line class="ci" x1="{LEFT + low * scale:.1f}" x2="{LEFT + high * scale:.1f}" y1="{y}" y2="{y}"/>'
            )
        parts.append(
            f'<circle cx="{LEFT + score * scale:.1f}" cy="{y}" r="4"><title>{escape(name)}: {score:.3f}</title></circle>'
        )
    parts.append(
        f'<text x="{LEFT}" y="{height - 4}">0</text><text x="{WIDTH - 20}" y="{height - 4}" '
        f'text-anchor="end">{top:.3f}</text></svg>'
    )
    return Markup("".join(parts))


def rank_scatter(points: list[tuple[str, float, float]]) -> Markup:
    """Predicted rank (x) against official rank (y); the diagonal is perfect agreement."""
    if not points:
        return Markup("")
    size, pad = 320, 30
    n = max(max(p, o) for _, p, o in points)
    scale = (size - 2 * pad) / max(n - 1, 1)
    parts = [
        f'<svg class="chart" role="img" aria-label="predicted against official rank" width="{size}" '
        f'height="{size}" viewBox="0 0 {size} {size}">',
        f'<line class="diag" x1="{pad}" y1="{pad}" x2="{size - pad}" y2="{size - pad}"/>',
        f'<text x="{size / 2}" y="{size - 6}" text-anchor="middle">predicted rank</text>',
        f'<text x="10" y="{size / 2}" transform="rotate(-90 10 {size / 2})" text-anchor="middle">official rank</text>',
    ]
    for name, predicted, official in points:
        x, y = pad + (predicted - 1) * scale, pad + (official - 1) * scale
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4"><title>{escape(name)}: predicted {predicted:g}, '
            f"official {official:g}</title></circle>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
