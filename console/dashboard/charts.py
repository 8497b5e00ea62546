"""Server-rendered SVG charts for the operator dashboard: counts in, markup out.

Pure: no Django, no I/O. Every text that reaches the markup is escaped here, so a chart can
be inserted into a page as it is (the dashboard's script swaps these fragments in place).
Each chart's root carries ``data-chart`` (its name) and ``data-total`` (the sum it draws);
each drawn value is one element with ``data-series`` and ``data-value``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

WIDTH = 720
PALETTE = {
    "blue": "#417690",
    "green": "#4f8f3a",
    "orange": "#d08a1f",
    "red": "#ba2121",
    "grey": "#8a8f94",
    "purple": "#7a5ba6",
}
_FONT = 'font-family="inherit" font-size="11"'


@dataclass(frozen=True)
class Series:
    name: str
    color: str  # a PALETTE key
    values: list[float]


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5 or 5 times 10^k at or above ``value`` (1 for nothing)."""
    if value <= 0:
        return 1
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        candidate = step * 10**exponent
        if candidate >= value:
            return candidate
    return 10 ** (exponent + 1)  # pragma: no cover - the loop ends at 10


def number(value: float) -> str:
    """A count as people read it: 950, 12.5k, 3.1M."""
    magnitude = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= limit:
            return f"{value / limit:.3g}{suffix}"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3g}"


def _exact(value: float) -> str:
    """A value as data for scripts and tests: whole numbers without a fraction."""
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


def _attrs(**attributes: object) -> str:
    return " ".join(
        f'{key.rstrip("_").replace("_", "-")}="{escape(str(value), quote=True)}"'
        for key, value in attributes.items()
    )


def _root(name: str, label: str, total: float, height: int, body: list[str]) -> str:
    head = _attrs(
        xmlns="http://www.w3.org/2000/svg",
        class_="chart",
        data_chart=name,
        data_total=_exact(total),
        viewBox=f"0 0 {WIDTH} {height}",
        role="img",
        aria_label=label,
    )
    return f"<svg {head}><title>{escape(label)}</title>{''.join(body)}</svg>"


def _empty(height: int, top: int = 0) -> str:
    y = top + (height - top) / 2
    return (
        f'<text x="{WIDTH / 2:.0f}" y="{y:.0f}" text-anchor="middle" fill="currentColor" '
        f'opacity="0.6" {_FONT}>nothing in this window</text>'
    )


def _legend(series: list[Series]) -> str:
    parts, x = [], WIDTH - 8
    for item in reversed(series):
        width = 18 + 6.5 * len(item.name)
        x -= width
        parts.append(
            f'<rect x="{x:.1f}" y="3" width="10" height="10" fill="{PALETTE[item.color]}"/>'
            f'<text x="{x + 14:.1f}" y="12" fill="currentColor" {_FONT}>{escape(item.name)}</text>'
        )
    return f'<g class="legend">{"".join(parts)}</g>'


def column_chart(
    name: str,
    label: str,
    slots: list[str],
    series: list[Series],
    *,
    unit: str,
    tick_every: int = 6,
    slot_titles: list[str] | None = None,
    height: int = 190,
) -> str:
    """Stacked columns, one per slot (an hour), the series stacked in the order given.

    ``slots`` are the axis labels; ``slot_titles`` (default: the labels) name each slot in
    the tooltips. ``unit`` names what is counted ("events", "tokens")."""
    titles = slot_titles or slots
    count = len(slots)
    if any(len(item.values) != count for item in series):
        raise ValueError("every series needs one value per slot")
    top = 22
    left, right, bottom = 46, 8, 22
    plot_w, plot_h = WIDTH - left - right, height - top - bottom
    stacks = [sum(max(item.values[i], 0) for item in series) for i in range(count)]
    total = sum(stacks)
    peak = nice_ceiling(max(stacks, default=0))
    # The vertical axis says what it counts, readable without hovering.
    body: list[str] = [
        f'<text class="axis-title" x="4" y="12" fill="currentColor" opacity="0.75" {_FONT}>'
        f"{escape(unit)} per hour</text>"
    ]
    if len(series) > 1:
        body.append(_legend(series))
    for fraction in (0, 0.5, 1):
        y = top + plot_h * (1 - fraction)
        body.append(
            f'<line x1="{left}" x2="{WIDTH - right}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="currentColor" stroke-opacity="0.18"/>'
        )
        if float(peak * fraction).is_integer():  # counts: no gridline labelled 2.5
            body.append(
                f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="currentColor" '
                f'opacity="0.75" {_FONT}>{number(peak * fraction)}</text>'
            )
    slot_w = plot_w / max(count, 1)
    bar_w = max(slot_w * 0.78, 1)
    for i in range(count):
        x = left + i * slot_w + (slot_w - bar_w) / 2
        base = top + plot_h
        for item in series:
            value = item.values[i]
            if value <= 0:
                continue
            h = max(plot_h * value / peak, 1)
            base -= h
            tip = f"{titles[i]}: {number(value)} {unit}" + (
                f" ({item.name})" if len(series) > 1 else ""
            )
            body.append(
                f"<rect {_attrs(x=f'{x:.1f}', y=f'{base:.1f}', width=f'{bar_w:.1f}')} "
                f'height="{h:.1f}" fill="{PALETTE[item.color]}" '
                f"{_attrs(data_series=item.name, data_value=_exact(value))}>"
                f"<title>{escape(tip)}</title></rect>"
            )
        if i % tick_every == 0 or i == count - 1:
            body.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{height - 6}" text-anchor="middle" '
                f'fill="currentColor" opacity="0.75" {_FONT}>{escape(slots[i])}</text>'
            )
    if total == 0:
        body.append(_empty(top + plot_h, top))
    return _root(name, label, total, height, body)


def bar_list(
    name: str,
    label: str,
    rows: list[tuple[str, float]],
    *,
    unit: str,
    color: str = "blue",
    row_title: str = "app",
) -> str:
    """Horizontal bars, one per row (label, value), longest for the largest value, under a
    header naming the rows (``row_title``) and what the bars count (``unit``)."""
    row_h, label_w, value_w, head = 24, 150, 70, 18
    height = max(len(rows), 1) * row_h + 8 + head
    peak = max((value for _label, value in rows), default=0) or 1
    span = WIDTH - label_w - value_w - 12
    body: list[str] = [
        f'<g class="axis-title" fill="currentColor" opacity="0.75">'
        f'<text x="{label_w - 8}" y="12" text-anchor="end" {_FONT}>{escape(row_title)}</text>'
        f'<text x="{label_w}" y="12" {_FONT}>{escape(unit)}</text></g>'
    ]
    for i, (row_label, value) in enumerate(rows):
        y = head + 4 + i * row_h
        width = span * max(value, 0) / peak
        body.append(
            f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end" fill="currentColor" '
            f"{_FONT}>{escape(row_label)}</text>"
        )
        if value > 0:
            body.append(
                f'<rect x="{label_w}" y="{y + 3}" width="{max(width, 1):.1f}" height="{row_h - 8}" '
                f'fill="{PALETTE[color]}" '
                f"{_attrs(data_series=row_label, data_value=_exact(value))}>"
                f"<title>{escape(f'{row_label}: {number(value)} {unit}')}</title></rect>"
            )
        body.append(
            f'<text x="{label_w + max(width, 0) + 6:.1f}" y="{y + 15}" fill="currentColor" '
            f"{_FONT}>{number(value)} {escape(unit)}</text>"
        )
    total = sum(value for _label, value in rows)
    if not rows:
        body.append(_empty(height, head))
    return _root(name, label, total, height, body)
