"""Pictures of a criterion's evidence for the HTML report: pure functions from evidence to inline SVG markup.

No script and no network: each picture is one <svg> with a viewBox, so it scales down to a narrow screen and prints.
Every text placed in a picture goes through `html_text` and `escape` (numbers are formatted here, but part names,
call strings and the words of the report's language are text all the same). The evidence these functions read:

- overfit criteria: `curve` (one loss per step) or `returned_losses` with `curve_steps` (the step of each), the
  `threshold` the loss must end under, the final eval loss (`final_eval_loss` or `final_loss`), an `optimum`;
- causality: `max_change_per_prefix` (for each t, the largest change at positions <= t when the input after t
  changed) and `leak_tolerance`;
- weights and mask values: `attention_map`, {"index", "got", "expected"}: a [Tq, Tk] slice of each;
- parameter counts: `counts`, a list of {"part", "expected", "observed"}, and `counts_config` when they are the
  parts of one configuration;
- rotary pairing: `channels_reached_from` and `expected_reached_from` (for each input channel, the output
  channels it reaches).

Non-finite numbers arrive as strings ("nan", "inf"), as report.json stores them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from markupsafe import Markup, escape

from grader.render.safe_text import html_text

FONT = ('font-family="system-ui, -apple-system, &quot;Segoe UI&quot;, &quot;Noto Sans CJK SC&quot;, '
        '&quot;Noto Sans SC&quot;, &quot;PingFang SC&quot;, &quot;Microsoft YaHei&quot;, sans-serif"')
INK, MUTED, GRID, LINE, BAD, GOOD = "#1f2328", "#57606a", "#d0d7de", "#0969da", "#cf222e", "#1a7f37"


def number(value) -> float | None:
    """A finite float from an evidence value, or None (a string such as "nan", a bool, a missing value)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def short(value: float) -> str:
    """A number in at most about six characters: 0.1, 3.9e-05, 4448."""
    if value == 0:
        return "0"
    if abs(value) >= 1e5 or abs(value) < 1e-3:
        return f"{value:.2g}"
    return f"{value:.3g}"


def _text(x: float, y: float, content, anchor: str = "start", size: int = 11, color: str = MUTED,
          cls: str = "", rotate: bool = False) -> str:
    turn = f' transform="rotate(-90 {x:.1f} {y:.1f})"' if rotate else ""
    klass = f' class="{cls}"' if cls else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="{color}"{turn}{klass}>'
            f"{escape(html_text(str(content)))}</text>")


def _svg(cls: str, width: float, height: float, label, body: list[str]) -> Markup:
    return Markup(f'<svg class="picture {cls}" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
                  f'height="{height:.0f}" role="img" aria-label="{escape(html_text(str(label)))}" {FONT} '
                  f'xmlns="http://www.w3.org/2000/svg">' + "".join(body) + "</svg>")


def _x_axis(left: float, length: float, y: float) -> str:
    return f'<line class="axis x" x1="{left}" x2="{left + length}" y1="{y}" y2="{y}" stroke="{INK}"/>'


def _nice_step(span: float, most: int = 6) -> int:
    """A step of 1, 2 or 5 times a power of ten giving at most `most` ticks over `span` steps."""
    if span <= 0:
        return 1
    power = 10 ** max(0, math.floor(math.log10(span / most)))
    return int(next(m * power for m in (1, 2, 5, 10) if span / (m * power) <= most))


def _decade_label(exponent: int) -> str:
    return f"{10.0 ** exponent:g}" if -2 <= exponent <= 3 else f"1e{exponent}"


# --- loss curves --------------------------------------------------------------------------------------------

def loss_curve(evidence: Mapping, words: Mapping[str, str]) -> Markup:
    """The loss against the step of fitting on a log-scale y axis, with the threshold the final loss must be under,
    the optimum where the evidence has one, and the final eval loss marked and labelled."""
    if "curve" in evidence:
        losses = list(evidence["curve"] or [])
        steps = list(range(len(losses)))
    else:
        losses = list(evidence.get("returned_losses") or [])
        steps = list(evidence.get("curve_steps") or range(len(losses)))
    points = [(s, v) for s, v in zip(steps, (number(x) for x in losses), strict=False) if v is not None and v > 0]
    threshold = number(evidence.get("threshold"))
    optimum = number(evidence.get("optimum"))
    final = number(evidence.get("final_eval_loss", evidence.get("final_loss")))
    last_step = max(steps) if steps else 1
    levels = [v for _, v in points] + [v for v in (threshold, optimum, final) if v is not None and v > 0]
    if not levels:
        levels = [1.0]
    low, high = math.floor(math.log10(min(levels))), math.ceil(math.log10(max(levels)))
    if high == low:
        high += 1
    width, height, left, right, top, bottom = 560, 250, 58, 96, 12, 44
    plot_w, plot_h = width - left - right, height - top - bottom

    def x_at(step: float) -> float:
        return left + plot_w * step / max(last_step, 1)

    def y_at(value: float) -> float:
        return top + plot_h * (high - math.log10(value)) / (high - low)

    body = [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#f6f8fa"/>']
    for exponent in range(low, high + 1):
        y = y_at(10.0 ** exponent)
        body.append(f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>')
        body.append(_text(left - 6, y + 4, _decade_label(exponent), "end", cls="tick y"))
    tick = _nice_step(last_step)
    for step in range(0, last_step + 1, tick):
        x = x_at(step)
        body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + plot_h}" y2="{top + plot_h + 4}" stroke="{MUTED}"/>')
        body.append(_text(x, top + plot_h + 16, step, "middle", cls="tick x"))
    body.append(_x_axis(left, plot_w, top + plot_h))
    body.append(f'<line class="axis y" x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="{INK}"/>')
    body.append(_text(left + plot_w / 2, height - 6, words["step"], "middle", 12, INK, "axis-title x"))
    body.append(_text(14, top + plot_h / 2, words["loss_log"], "middle", 12, INK, "axis-title y", rotate=True))
    for value, name, color, cls in ((optimum, words["optimum"], MUTED, "optimum"),
                                    (threshold, words["threshold"], BAD, "threshold")):
        if value is not None and value > 0:
            y = y_at(value)
            body.append(f'<line class="{cls}" x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
                        f'stroke="{color}" stroke-width="1.5" stroke-dasharray="6 4"/>')
            below = cls == "optimum" and threshold is not None  # the threshold sits just above the optimum
            body.append(_text(left + plot_w + 4, y + (13 if below else -3), f"{name} {short(value)}",
                              color=color, cls=cls))
    if points:
        path = " ".join(f"{x_at(s):.1f},{y_at(v):.1f}" for s, v in points)
        body.append(f'<polyline class="loss" fill="none" stroke="{LINE}" stroke-width="2" points="{path}"/>')
    if final is not None and final > 0:
        x, y = x_at(last_step), y_at(final)
        color = GOOD if threshold is None or final < threshold else BAD
        body.append(f'<circle class="final" cx="{x:.1f}" cy="{y:.1f}" r="4.5" fill="{color}"/>')
        body.append(_text(x - 8, y + 16 if y < top + 20 else y - 8, f"{words['final']} {short(final)}", "end",
                          color=color, cls="final-label"))
    first = points[0][1] if points else None
    label = f"{words['loss_log']}: {short(first) if first else '?'} → {short(final) if final else '?'}"
    return _svg("loss-curve", width, height, label, body)


# --- causality: what reached the earlier positions ---------------------------------------------------------

def leak_bars(evidence: Mapping, words: Mapping[str, str]) -> Markup:
    """One bar per position t: the largest change at positions 0..t when everything after t changed, on a log
    scale; bars above the tolerance (leaks) in red, a NaN as a full red bar marked NaN."""
    changes = list(evidence.get("max_change_per_prefix") or [])
    tolerance = number(evidence.get("leak_tolerance")) or 1e-10
    finite = [v for v in (number(c) for c in changes) if v is not None and v > 0]
    low = math.floor(math.log10(tolerance)) - 1
    high = max(low + 2, math.ceil(math.log10(max(finite))) if finite else low + 2)
    width, height, left, right, top, bottom = 560, 220, 58, 16, 12, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    slot = plot_w / max(len(changes), 1)

    def y_at(value: float) -> float:
        value = min(max(value, 10.0 ** low), 10.0 ** high)
        return top + plot_h * (high - math.log10(value)) / (high - low)

    body = [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#f6f8fa"/>']
    for exponent in range(low, high + 1, max(1, (high - low) // 5)):
        y = y_at(10.0 ** exponent)
        body.append(f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>')
        body.append(_text(left - 6, y + 4, _decade_label(exponent), "end", cls="tick y"))
    for t, change in enumerate(changes):
        value = number(change)
        leaked = value is None or value > tolerance
        top_y = top if value is None else y_at(max(value, 10.0 ** low))
        x = left + t * slot + slot * 0.15
        body.append(f'<rect class="bar {"leak" if leaked else "clean"}" x="{x:.1f}" y="{top_y:.1f}" '
                    f'width="{slot * 0.7:.1f}" height="{top + plot_h - top_y:.1f}" fill="{BAD if leaked else GOOD}"/>')
        if value is None:
            body.append(_text(x + slot * 0.35, top + 14, str(change), "middle", 10, "#ffffff"))
        body.append(_text(left + (t + 0.5) * slot, top + plot_h + 16, t, "middle", cls="tick x"))
    y = y_at(tolerance)
    body.append(f'<line class="tolerance" x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="{INK}" '
                f'stroke-dasharray="6 4"/>')
    body.append(_text(left + plot_w - 4, y - 4, f"{words['tolerance']} {short(tolerance)}", "end", color=INK))
    body.append(_x_axis(left, plot_w, top + plot_h))
    body.append(_text(left + plot_w / 2, height - 6, words["prefix_position"], "middle", 12, INK, "axis-title x"))
    body.append(_text(14, top + plot_h / 2, words["change_log"], "middle", 12, INK, "axis-title y", rotate=True))
    leaks = sum(1 for c in changes if number(c) is None or number(c) > tolerance)
    return _svg("leaks", width, height, f"{words['prefix_position']}: {leaks}/{len(changes)}", body)


# --- attention weights and masks: yours and the expected, side by side --------------------------------------

def _cell_color(value: float | None, scale: float) -> str:
    if value is None:
        return "#8250df"
    share = min(abs(value) / scale, 1.0) if scale else 0.0
    base = (9, 105, 218) if value >= 0 else (188, 76, 0)
    return "#" + "".join(f"{round(255 - (255 - c) * share):02x}" for c in base)


def attention_maps(evidence: Mapping, words: Mapping[str, str]) -> Markup:
    """Two heat maps, the student's [Tq, Tk] slice and the expected one; the student's cells that differ from the
    expected are outlined in red (for a causal mask, the future keys that changed), non-finite values are purple
    with a cross."""
    data = evidence.get("attention_map") or {}
    got, want = data.get("got") or [], data.get("expected") or []
    rows = max(len(got), len(want))
    cols = max([len(r) for r in got + want] or [0])
    if not rows or not cols:
        return Markup("")
    cell = max(10.0, min(24.0, 240 / cols))
    pad, gap, head = 26, 24, 34
    panel = pad + cols * cell
    width, height = 2 * panel + gap + 8, head + rows * cell + 8
    scale = max([abs(v) for r in got + want for v in (number(x) for x in r) if v is not None] or [1.0])
    index = "".join(f"{i}, " for i in data.get("index") or [])
    body = []
    for p, (grid, other, name) in enumerate(((got, want, words["yours"]), (want, got, words["expected"]))):
        x0 = p * (panel + gap) + pad
        body.append(_text(x0, 13, name, size=12, color=INK, cls="map-title"))
        body.append(_text(x0 + cols * cell, 13, f"[{index}:{rows}, :{cols}]", "end", 10, cls="map-index"))
        body.append(_text(x0 + cols * cell / 2, head - 4, words["key_axis"], "middle", 10))
        body.append(_text(x0 - 14, head + rows * cell / 2, words["query_axis"], "middle", 10, rotate=True))
        body.append(f'<rect x="{x0}" y="{head}" width="{cols * cell:.1f}" height="{rows * cell:.1f}" fill="#ffffff" '
                    f'stroke="{GRID}"/>')
        for i, row in enumerate(grid):
            for j, raw in enumerate(row):
                value = number(raw)
                x, y = x0 + j * cell, head + i * cell
                body.append(f'<rect class="cell" x="{x:.1f}" y="{y:.1f}" width="{cell:.1f}" height="{cell:.1f}" '
                            f'fill="{_cell_color(value, scale)}" stroke="{GRID}" stroke-width="0.5">'
                            f'<title>[{i}, {j}] {escape(html_text(str(raw)))}</title></rect>')
                if value is None:
                    near, far = x + 2, x + cell - 2
                    body.append(f'<path class="nonfinite" d="M{near:.1f},{y + 2:.1f}L{far:.1f},{y + cell - 2:.1f}'
                                f'M{far:.1f},{y + 2:.1f}L{near:.1f},{y + cell - 2:.1f}" stroke="#ffffff"/>')
                theirs = other[i][j] if i < len(other) and j < len(other[i]) else None
                if p == 0 and _differs(raw, theirs):
                    body.append(f'<rect class="differs" x="{x + 1:.1f}" y="{y + 1:.1f}" width="{cell - 2:.1f}" '
                                f'height="{cell - 2:.1f}" fill="none" stroke="{BAD}" stroke-width="2"/>')
    return _svg("attention-maps", width, height, f"{words['yours']} / {words['expected']}", body)


def _differs(a, b, tolerance: float = 1e-4) -> bool:
    x, y = number(a), number(b)
    if x is None or y is None:
        return str(a) != str(b)
    return abs(x - y) > tolerance


# --- parameter counts -------------------------------------------------------------------------------------

def count_bars(evidence: Mapping, words: Mapping[str, str]) -> Markup:
    """For each part (or call), the expected count as a grey bar and the student's below it, green when equal
    and red when not, each with its number."""
    counts = [c for c in evidence.get("counts") or [] if isinstance(c, Mapping)]
    if not counts:
        return Markup("")
    numbers = [number(c.get(key)) for c in counts for key in ("expected", "observed")]
    scale = max([abs(v) for v in numbers if v is not None] or [1.0])
    width, left, bar_w, row = 560, 8, 400, 52
    caption = evidence.get("counts_config")  # the config the parts belong to, when they are parts of one
    first = 26 if caption else 8
    height = first + row * len(counts) + 18
    body = [_text(left, 14, caption, size=11, color=MUTED, cls="caption")] if caption else []
    for k, item in enumerate(counts):
        y = first + k * row
        expected, observed = number(item.get("expected")), number(item.get("observed"))
        same = item.get("observed") == item.get("expected")
        body.append(_text(left, y + 10, item.get("part", ""), size=11, color=INK, cls="part"))
        bars = ((expected, item.get("expected"), "#8c959f", "expected"),
                (observed, item.get("observed"), GOOD if same else BAD, "observed"))
        for r, (value, raw, color, cls) in enumerate(bars):
            yy = y + 16 + r * 15
            length = bar_w * abs(value) / scale if value is not None else 0
            body.append(f'<rect class="count {cls}" x="{left}" y="{yy}" width="{length:.1f}" height="12" '
                        f'fill="{color}"/>')
            shown = f"{value:,.0f}" if value is not None and value == int(value) else str(raw)
            body.append(_text(left + length + 6, yy + 10, f"{shown}", size=10, color=INK if r == 0 else color))
    legend_y = height - 6
    body.append(f'<rect x="{left}" y="{legend_y - 9}" width="10" height="10" fill="#8c959f"/>')
    body.append(_text(left + 14, legend_y, words["expected"], size=10))
    body.append(f'<rect x="{left + 110}" y="{legend_y - 9}" width="10" height="10" fill="{BAD}"/>')
    body.append(_text(left + 124, legend_y, words["yours"], size=10))
    return _svg("counts", width, height, f"{words['expected']} / {words['yours']}", body)


# --- rotary pairing --------------------------------------------------------------------------------------

def _pairs(reached: Mapping) -> set[tuple[int, int]]:
    pairs = set()
    for source, targets in reached.items():
        for target in targets if isinstance(targets, Sequence) else []:
            if isinstance(target, int) and str(source).isdigit() and int(source) != target:
                pairs.add((min(int(source), target), max(int(source), target)))
    return pairs


def rope_pairing(evidence: Mapping, words: Mapping[str, str]) -> Markup:
    """The channels as dots in a row, twice: arcs join the channels that turn together, expected above and the
    student's below; an arc the expected pairing does not have is red."""
    got, want = evidence.get("channels_reached_from"), evidence.get("expected_reached_from")
    if not isinstance(got, Mapping) or not isinstance(want, Mapping):
        return Markup("")
    channels = max([int(k) for k in list(got) + list(want) if str(k).isdigit()] or [0]) + 1
    width, left, step, lane = 560, 110, min(52.0, 430 / max(channels, 1)), 86
    height = 2 * lane + 8
    expected = _pairs(want)
    body = []
    for lane_index, (pairs, name) in enumerate(((expected, words["expected"]), (_pairs(got), words["yours"]))):
        base = lane_index * lane + lane - 24
        body.append(_text(8, base + 4, name, size=12, color=INK, cls="lane-title"))
        for a, b in sorted(pairs):
            xa, xb = left + a * step, left + b * step
            rise = min(60.0, 12 + (xb - xa) / 3)
            wrong = (a, b) not in expected
            body.append(f'<path class="pair{" wrong" if wrong else ""}" d="M{xa:.1f},{base:.1f} '
                        f'C{xa:.1f},{base - rise:.1f} {xb:.1f},{base - rise:.1f} {xb:.1f},{base:.1f}" fill="none" '
                        f'stroke="{BAD if wrong else LINE}" stroke-width="2"/>')
        for c in range(channels):
            x = left + c * step
            body.append(f'<circle cx="{x:.1f}" cy="{base:.1f}" r="4" fill="{INK}"/>')
            body.append(_text(x, base + 16, c, "middle", 10))
    body.append(_text(width - 8, height - 4, words["channel"], "end", 10))
    return _svg("rope-pairing", width, height, f"{words['channel']}: {words['expected']} / {words['yours']}", body)


# --- which pictures a criterion gets ------------------------------------------------------------------------

def curve_pictures(kind: str, evidence: Mapping, words: Mapping[str, str]) -> list[Markup]:
    """The loss curve of an overfit criterion, passed or not."""
    has_curve = "curve" in evidence or "returned_losses" in evidence
    return [loss_curve(evidence, words)] if kind == "overfit" and has_curve else []


def failure_pictures(evidence: Mapping, words: Mapping[str, str]) -> list[Markup]:
    """The pictures of a criterion that did not pass, one per kind of evidence it recorded."""
    drawn = []
    if "max_change_per_prefix" in evidence:
        drawn.append(leak_bars(evidence, words))
    if isinstance(evidence.get("attention_map"), Mapping):
        drawn.append(attention_maps(evidence, words))
    if evidence.get("counts"):
        drawn.append(count_bars(evidence, words))
    if "channels_reached_from" in evidence and "expected_reached_from" in evidence:
        drawn.append(rope_pairing(evidence, words))
    return [picture for picture in drawn if picture]
