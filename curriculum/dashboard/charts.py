"""SVG line charts: pure functions of numbers (points, ranges, labels) to inline SVG markup."""
from __future__ import annotations

import html
import math
from dataclasses import dataclass

_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
#: Levels are coloured along a ramp (viridis without its pale end), so 25 lines keep their order.
_RAMP = [(68, 1, 84), (65, 68, 135), (42, 120, 142), (34, 168, 132), (122, 209, 81), (189, 223, 38)]


# ----------------------------------------------------------------------------- axes


def nice_ticks(lo: float, hi: float, intervals: int = 7, integer: bool = False) -> list[float]:
    """Round ticks covering [lo, hi]: the finest step of 1, 2 or 5 x 10^k (at least 1 when
    ``integer``) that needs at most ``intervals`` intervals."""
    if not hi > lo:
        hi = lo + 1
    power = 10 ** math.floor(math.log10((hi - lo) / intervals))
    for step in (f * p for p in (power, power * 10) for f in (1, 2, 5)):
        step = max(step, 1.0) if integer else step
        first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
        if last - first <= intervals:
            return [round(i * step, 12) for i in range(first, last + 1)]
    raise AssertionError("unreachable: a step of 10^(k+1) always fits")


def tick_labels(ticks: list[float]) -> list[str]:
    """Ticks with just the decimals their step needs (0, 0.25, 0.5, ...); large ones in k or M."""
    if not ticks:
        return []
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    top = max(abs(t) for t in ticks)
    scale, suffix = (1e9, "G") if top >= 1e9 else (1e6, "M") if top >= 1e6 else (1e3, "k") if top >= 1e4 else (1, "")
    step /= scale
    decimals = 0
    while decimals < 9 and abs(step * 10 ** decimals - round(step * 10 ** decimals)) > 1e-6:
        decimals += 1
    out = []
    for t in ticks:
        text = f"{t / scale:.{decimals}f}"
        text = text.rstrip("0").rstrip(".") if decimals else text
        out.append("0" if float(text) == 0 else text + suffix)
    return out


def fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


@dataclass(frozen=True)
class Axes:
    """The plot area of a chart and its data ranges, with ticks."""

    x_ticks: list[float]
    y_ticks: list[float]
    x_range: tuple[float, float]
    width: int = 480
    height: int = 270
    left: int = 58
    right: int = 16
    top: int = 12
    bottom: int = 44

    @classmethod
    def fit(cls, xs: list[float], ys: list[float], rate: bool, integer_y: bool) -> "Axes":
        x0, x1 = min(xs), max(xs)
        x_ticks = [t for t in nice_ticks(x0, x1, 8, integer=True) if x0 <= t <= x1]
        # A single x (a run of one round): the point in the middle, one tick under it.
        x_range = (x0 - 0.5, x1 + 0.5) if x1 == x0 else (x0, x1)
        if rate and min(ys) >= 0 and max(ys) <= 1:
            y_ticks = [0.0, 0.25, 0.5, 0.75, 1.0]
        else:
            y_ticks = nice_ticks(min(min(ys), 0.0), max(ys), 7, integer_y)
        return cls(x_ticks, y_ticks, x_range)

    def px(self, x: float, y: float) -> tuple[float, float]:
        (x0, x1), (y0, y1) = self.x_range, (self.y_ticks[0], self.y_ticks[-1])
        w, h = self.width - self.left - self.right, self.height - self.top - self.bottom
        return self.left + (x - x0) / (x1 - x0) * w, self.top + (1 - (y - y0) / (y1 - y0)) * h

    def frame(self, x_title: str, y_title: str) -> list[str]:
        """Grid, ticks and axis titles."""
        right, base = self.width - self.right, self.height - self.bottom
        out = []
        for y, label in zip(self.y_ticks, tick_labels(self.y_ticks)):
            _, py = self.px(0, y)
            out.append(f'<line x1="{self.left}" x2="{right}" y1="{py:.1f}" y2="{py:.1f}" class="grid"/>'
                       f'<text x="{self.left - 6}" y="{py:.1f}" dy="0.35em" text-anchor="end" class="ytick">'
                       f"{label}</text>")
        for x, label in zip(self.x_ticks, tick_labels(self.x_ticks)):
            qx, _ = self.px(x, 0)
            out.append(f'<line x1="{qx:.1f}" x2="{qx:.1f}" y1="{base}" y2="{base + 4}" class="axis"/>'
                       f'<text x="{qx:.1f}" y="{base + 17}" text-anchor="middle" class="xtick">{label}</text>')
        mid_y = (self.top + base) / 2
        out += [f'<line x1="{self.left}" x2="{right}" y1="{base}" y2="{base}" class="axis"/>',
                f'<text x="{(self.left + right) / 2:.1f}" y="{self.height - 6}" text-anchor="middle" '
                f'class="axis-title">{html.escape(x_title)}</text>',
                f'<text transform="translate(13 {mid_y:.1f}) rotate(-90)" text-anchor="middle" '
                f'class="axis-title">{html.escape(y_title)}</text>']
        return out


# ----------------------------------------------------------------------------- charts


def _ramp(i: int, n: int) -> str:
    """Colour ``i`` of ``n`` along the level ramp."""
    t = i / max(1, n - 1) * (len(_RAMP) - 1)
    a, b = _RAMP[int(t)], _RAMP[min(int(t) + 1, len(_RAMP) - 1)]
    f = t - int(t)
    return "#%02x%02x%02x" % tuple(round(a[k] + (b[k] - a[k]) * f) for k in range(3))


def _finite(points: list[tuple]) -> list[tuple]:
    return [p for p in points if all(math.isfinite(v) for v in p)]


def _legend(labels: list[str], colors: list[str], band_labels: list[str], ramp: bool) -> str:
    if ramp and len(labels) > 8:  # a gradient from the first level to the last
        stops = ",".join(_ramp(i, 5) for i in range(5))
        return (f"<div class='legend'><span>{html.escape(labels[0])}<i class='ramp' "
                f"style='background:linear-gradient(90deg,{stops})'></i>{html.escape(labels[-1])}</span></div>")
    items = [f"<span><i class='swatch-band' style='background:{c}'></i>{html.escape(k)}: median, "
             "p10–p90 shaded</span>" for k, c in zip(band_labels, colors)]
    items += [f"<span><i style='background:{c}'></i>{html.escape(k)}</span>"
              for k, c in zip(labels, colors[len(band_labels):])]
    return f"<div class='legend'>{''.join(items)}</div>"


def line_chart(title: str, lines: dict[str, list[tuple[float, float]]], *, y_title: str = "", x_title: str = "round",
               rate: bool = False, integer: bool = False, step: bool = False, ramp: bool = False,
               bands: dict[str, list[tuple[float, float, float, float]]] | None = None,
               x_span: tuple[float, float] | None = None, markers: list[tuple[float, str]] | None = None) -> str:
    """An SVG chart of ``lines`` (label -> [(x, y)]) and ``bands`` (label -> [(x, p10, p50, p90)]:
    p10-p90 shaded, the median drawn). NaN/inf points and empty series are left out. ``rate``:
    a 0..1 axis in quarters; ``integer``: whole y ticks; ``step``: each value held until the
    next x; ``ramp``: the lines are ordered levels; ``x_span``: the x range to cover (the
    page's rounds), if wider than the data's; ``markers``: (x, label) of vertical marks (health alarms
    that started there)."""
    lines = {k: pts for k, v in lines.items() if (pts := _finite(v))}
    bands = {k: pts for k, v in (bands or {}).items() if (pts := _finite(v))}
    head = f"<figure><figcaption>{html.escape(title)}</figcaption>"
    if not lines and not bands:
        return head + "<p class='none empty'>no data yet</p></figure>"
    xs = [p[0] for pts in [*lines.values(), *bands.values()] for p in pts] + list(x_span or [])
    ys = [y for pts in lines.values() for _, y in pts] + [v for pts in bands.values() for p in pts for v in p[1:]]
    ax = Axes.fit(xs, ys, rate, integer)
    colors = ([_ramp(i, len(lines)) for i in range(len(lines))] if ramp
              else [_PALETTE[i % len(_PALETTE)] for i in range(len(bands) + len(lines))])
    dots = sum(map(len, lines.values())) + sum(map(len, bands.values())) <= 400  # hover targets, if not too many
    parts = [f'<svg viewBox="0 0 {ax.width} {ax.height}" role="img" aria-label="{html.escape(title)}">',
             *ax.frame(x_title, y_title)]
    for (label, pts), color in zip(bands.items(), colors):
        parts.append(_band(ax, label, pts, color, x_title, dots))
    for (label, pts), color in zip(lines.items(), colors[len(bands):]):
        parts.append(_line(ax, label, pts, color, x_title, step, dots))
    parts += [_marker(ax, x, label) for x, label in markers or [] if ax.x_range[0] <= x <= ax.x_range[1]]
    parts.append("</svg>")
    return head + "".join(parts) + _legend(list(lines), colors, list(bands), ramp) + "</figure>"


def _marker(ax: Axes, x: float, label: str) -> str:
    qx, _ = ax.px(x, ax.y_ticks[0])
    return (f'<line x1="{qx:.1f}" x2="{qx:.1f}" y1="{ax.top}" y2="{ax.height - ax.bottom}" class="alarm">'
            f"<title>{html.escape(label)}</title></line>")


def _tip(x_title: str, x: float) -> str:
    return f"{x_title} {x:.0f}" if x_title == "round" else f"{x_title}: {fmt(x)}"


def _line(ax: Axes, label: str, pts: list[tuple[float, float]], color: str, x_title: str, step: bool,
          dots: bool) -> str:
    path = [q for a, b in zip(pts, pts[1:]) for q in (a, (b[0], a[1]))] + pts[-1:] if step else pts
    coords = " ".join("%.1f,%.1f" % ax.px(x, y) for x, y in path)
    out = [f'<polyline points="{coords}" stroke="{color}" class="line"><title>{html.escape(label)}</title></polyline>']
    if dots:
        out += [f'<circle cx="{ax.px(x, y)[0]:.1f}" cy="{ax.px(x, y)[1]:.1f}" r="2.5" fill="{color}">'
                f'<title>{html.escape(label)}, {_tip(x_title, x)}: {y:.4g}</title></circle>' for x, y in pts]
    return "".join(out)


def _band(ax: Axes, label: str, pts: list[tuple[float, float, float, float]], color: str, x_title: str,
          dots: bool) -> str:
    upper, lower = [ax.px(x, hi) for x, _, _, hi in pts], [ax.px(x, lo) for x, lo, _, _ in pts]
    area, top, bottom = (" ".join("%.1f,%.1f" % p for p in edge) for edge in (upper + lower[::-1], upper, lower))
    # Dashed edges keep two overlapping bands apart where their fills mix.
    out = [f'<polygon points="{area}" fill="{color}" class="band"><title>{html.escape(label)} p10–p90</title>'
           "</polygon>",
           *(f'<polyline points="{edge}" stroke="{color}" class="edge"/>' for edge in (top, bottom)),
           _line(ax, f"{label} (median)", [(x, mid) for x, _, mid, _ in pts], color, x_title, False, False)]
    if dots:
        out += [f'<circle cx="{ax.px(x, mid)[0]:.1f}" cy="{ax.px(x, mid)[1]:.1f}" r="2.5" fill="{color}">'
                f"<title>{html.escape(label)}, {_tip(x_title, x)}: median {mid:.3g} (p10 {lo:.3g}, p90 {hi:.3g})"
                "</title></circle>" for x, lo, mid, hi in pts]
    return "".join(out)

