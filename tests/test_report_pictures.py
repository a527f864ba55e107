"""The report's pictures, drawn from evidence: well-formed SVG, the scales and lines they claim, every text escaped."""

import math
import re
from xml.etree import ElementTree

import pytest

from grader.render.labels import LABELS
from grader.render.pictures import (attention_maps, count_bars, curve_pictures, failure_pictures, leak_bars,
                                    loss_curve, rope_pairing)

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = "<script>alert(1)</script>&amp;"


def parsed(markup) -> ElementTree.Element:
    """The picture as XML: it must be well-formed, so no text placed in it opened an element."""
    svg = ElementTree.fromstring(str(markup))
    assert svg.tag == SVG + "svg" and svg.get("viewBox")
    return svg


def of_class(svg, tag: str, cls: str) -> list:
    return [e for e in svg.iter(SVG + tag) if cls in (e.get("class") or "").split()]


def texts(svg) -> list[str]:
    return ["".join(e.itertext()) for e in svg.iter(SVG + "text")]


def y_of_tick(svg, label: str) -> float:
    tick = next(e for e in of_class(svg, "text", "tick") if "y" in e.get("class").split() and e.text == label)
    return float(tick.get("y")) - 4  # the label sits 4 px below its grid line


CURVE = {"curve": [1.36, 0.5, 0.05, 3.9e-3, 3.9e-5], "final_eval_loss": 3.9e-5, "threshold": 0.1}


def test_loss_curve_has_a_log_scale_axes_titles_threshold_and_final_value():
    svg = parsed(loss_curve(CURVE, LABELS["en"]))
    ticks = [e.text for e in of_class(svg, "text", "tick") if "y" in e.get("class").split()]
    assert ticks == ["1e-5", "1e-4", "1e-3", "0.01", "0.1", "1", "10"]  # one line per decade, bottom up
    # log scale: every decade takes the same height, and 0.1 lies on its decade line
    heights = [y_of_tick(svg, b) - y_of_tick(svg, a) for a, b in zip(ticks, ticks[1:], strict=False)]
    assert max(heights) - min(heights) < 0.2
    threshold = of_class(svg, "line", "threshold")
    assert len(threshold) == 1 and abs(float(threshold[0].get("y1")) - y_of_tick(svg, "0.1")) < 0.2
    titles = {e.text for e in of_class(svg, "text", "axis-title")}
    assert titles == {"step", "loss (log scale)"}
    assert [e.text for e in of_class(svg, "text", "tick") if "x" in e.get("class").split()] == ["0", "1", "2", "3", "4"]
    final = of_class(svg, "circle", "final")
    assert len(final) == 1 and final[0].get("fill") == "#1a7f37"  # below the threshold: green
    assert any(t == "final 3.9e-05" for t in texts(svg))
    # the point 3.9e-5 lies between the 1e-4 and 1e-5 decade lines, at log distance 0.41 below 1e-4
    y_final = float(final[0].get("cy"))
    decade = y_of_tick(svg, "1e-5") - y_of_tick(svg, "1e-4")
    assert y_final == pytest.approx(y_of_tick(svg, "1e-4") + decade * (-4 - math.log10(3.9e-5)), abs=0.2)


def test_loss_curve_speaks_the_reports_language_and_reads_training_evidence():
    evidence = {"returned_losses": [1.4, 0.03, 0.5], "curve_steps": [0, 10, 19], "final_loss": 0.4, "threshold": 0.1}
    svg = parsed(loss_curve(evidence, LABELS["zh"]))
    assert {e.text for e in of_class(svg, "text", "axis-title")} == {"步数", "损失（对数刻度）"}
    points = of_class(svg, "polyline", "loss")[0].get("points").split()
    xs = [float(p.split(",")[0]) for p in points]
    assert xs[1] - xs[0] == pytest.approx((xs[2] - xs[0]) * 10 / 19, abs=0.2)  # drawn at their steps
    assert of_class(svg, "circle", "final")[0].get("fill") == "#cf222e"  # 0.4 is above 0.1: red


def test_loss_curve_survives_non_finite_and_empty_curves():
    svg = parsed(loss_curve({"curve": ["nan", "inf"], "final_eval_loss": "nan", "threshold": 0.1}, LABELS["en"]))
    assert of_class(svg, "line", "threshold") and not of_class(svg, "polyline", "loss")
    assert not of_class(svg, "circle", "final")


def test_contradictory_labels_draw_optimum_and_threshold():
    evidence = {"curve": [1.3, 0.4, 0.35], "final_eval_loss": 0.347, "optimum": 0.3466, "threshold": 0.3966}
    svg = parsed(loss_curve(evidence, LABELS["en"]))
    assert len(of_class(svg, "line", "optimum")) == 1 and len(of_class(svg, "line", "threshold")) == 1


def test_leak_bars_mark_each_position_that_leaked():
    evidence = {"max_change_per_prefix": [0.0, 1e-12, 0.3, "nan"], "leak_tolerance": 1e-10}
    svg = parsed(leak_bars(evidence, LABELS["en"]))
    bars = of_class(svg, "rect", "bar")
    assert ["leak" in b.get("class") for b in bars] == [False, False, True, True]
    assert len(of_class(svg, "line", "tolerance")) == 1
    assert "nan" in texts(svg)


def test_attention_maps_outline_the_cells_that_differ():
    evidence = {"attention_map": {"index": [1, 0], "got": [[1.0, 0.0], [0.5, 0.5], ["nan", "nan"]],
                                  "expected": [[1.0, 0.0], [0.5, 0.5], [0.0, 0.0]]}}
    svg = parsed(attention_maps(evidence, LABELS["en"]))
    assert len(of_class(svg, "rect", "cell")) == 12
    assert len(of_class(svg, "rect", "differs")) == 2          # the NaN row, outlined on the student's map only
    assert len(of_class(svg, "path", "nonfinite")) == 2
    assert {e.text for e in of_class(svg, "text", "map-title")} == {"yours", "expected"}
    assert "[1, 0, :3, :2]" in texts(svg)
    assert attention_maps({"attention_map": {"got": [], "expected": []}}, LABELS["en"]) == ""


def test_causal_mask_map_highlights_the_future_keys_read():
    got = [[1.0 if j <= i + 1 else 0.0 for j in range(4)] for i in range(4)]   # reads one key ahead
    want = [[1.0 if j <= i else 0.0 for j in range(4)] for i in range(4)]
    svg = parsed(attention_maps({"attention_map": {"index": [], "got": got, "expected": want}}, LABELS["en"]))
    outlined = {(round(float(r.get("y"))), round(float(r.get("x")))) for r in of_class(svg, "rect", "differs")}
    assert len(outlined) == 3                                    # (0,1), (1,2), (2,3): the future keys


def test_count_bars_show_expected_and_observed_per_part():
    evidence = {"counts": [{"part": "blocks", "expected": 12, "observed": 8},
                           {"part": "head", "expected": 3, "observed": 3},
                           {"part": HOSTILE, "expected": 5, "observed": "5.0"}], "counts_config": "config(d_model=4)"}
    svg = parsed(count_bars(evidence, LABELS["en"]))
    assert [e.text for e in of_class(svg, "text", "caption")] == ["config(d_model=4)"]
    observed = of_class(svg, "rect", "observed")
    assert [o.get("fill") for o in observed] == ["#cf222e", "#1a7f37", "#cf222e"]
    widths = [float(e.get("width")) for e in of_class(svg, "rect", "expected")]
    assert widths[0] == pytest.approx(widths[1] * 4)
    assert HOSTILE in texts(svg)                                 # shown as text, never markup
    assert "<script>" not in str(count_bars(evidence, LABELS["en"]))


def test_rope_pairing_shows_wrong_pairs_in_red():
    adjacent = {str(j): sorted({j, j ^ 1}) for j in range(8)}
    half = {str(j): sorted({j, (j + 4) % 8}) for j in range(8)}
    svg = parsed(rope_pairing({"channels_reached_from": adjacent, "expected_reached_from": half}, LABELS["en"]))
    pairs = of_class(svg, "path", "pair")
    assert len(pairs) == 8 and len(of_class(svg, "path", "wrong")) == 4
    right = parsed(rope_pairing({"channels_reached_from": half, "expected_reached_from": half}, LABELS["en"]))
    assert not of_class(right, "path", "wrong")


def test_which_pictures_a_criterion_gets():
    assert len(curve_pictures("overfit", CURVE, LABELS["en"])) == 1
    assert curve_pictures("values", CURVE, LABELS["en"]) == []
    evidence = {"max_change_per_prefix": [0.1], "attention_map": {"index": [], "got": [[1.0]], "expected": [[0.0]]},
                "counts": [{"part": "x", "expected": 1, "observed": 2}],
                "channels_reached_from": {"0": [0, 1]}, "expected_reached_from": {"0": [0, 1]}}
    classes = [parsed(p).get("class") for p in failure_pictures(evidence, LABELS["zh"])]
    assert classes == ["picture leaks", "picture attention-maps", "picture counts", "picture rope-pairing"]
    assert failure_pictures({"grad_norms": {"q": 1.0}}, LABELS["en"]) == []


def test_every_word_placed_is_escaped():
    words = {key: HOSTILE for key in LABELS["en"]}
    pictures = [loss_curve(CURVE, words), leak_bars({"max_change_per_prefix": [1.0]}, words),
                attention_maps({"attention_map": {"index": [], "got": [[HOSTILE]], "expected": [[1]]}}, words),
                count_bars({"counts": [{"part": "\x1b[2J", "expected": 1, "observed": 1}]}, words)]
    for picture in pictures:
        svg = parsed(picture)
        assert not [e for e in svg.iter() if e.tag.endswith("script")]
        assert "\x1b" not in str(picture)
    assert re.search(r"\\x1b\[2J", str(pictures[-1]))           # a control character is shown, not obeyed
