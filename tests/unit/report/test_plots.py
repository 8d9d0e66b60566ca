"""Figures: present when there is data, valid PNGs, one colour per method everywhere."""

from __future__ import annotations

import io

import numpy as np
import pytest
from matplotlib.image import imread
from support.factories import run_summary, stored_summary

from specbench.report.figure import KNOWN_COLORS, PALETTE, method_colors
from specbench.report.plots import make_figures


@pytest.fixture(scope="module")
def full_figures() -> dict[str, bytes]:
    return make_figures(stored_summary())


def pixels(png: bytes) -> np.ndarray:
    return (imread(io.BytesIO(png), format="png")[..., :3] * 255).round().astype(int)


def has_colour(img: np.ndarray, hex_colour: str, min_pixels: int = 20) -> bool:
    rgb = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(img - rgb).sum(axis=-1) <= 6).sum()) >= min_pixels


def test_full_summary_gives_every_figure(full_figures: dict[str, bytes]) -> None:
    assert list(full_figures) == ["tau", "per_position", "speedup_vs_load", "latency_vs_throughput",
                                  "serving_speedup", "accuracy_speedup"]
    for name, png in full_figures.items():
        assert png.startswith(b"\x89PNG\r\n\x1a\n"), name
        img = pixels(png)
        assert img.shape[0] > 300 and img.shape[1] > 600, name
        assert img.std() > 10, f"{name} looks blank"
        # Opaque light face: the corners (inside the border) are white.
        assert (img[5, 5] >= 250).all(), name


def test_method_colour_is_the_same_in_every_figure(full_figures: dict[str, bytes]) -> None:
    eagle, peagle, base = KNOWN_COLORS["eagle3"], KNOWN_COLORS["p-eagle"], KNOWN_COLORS["baseline"]
    for name, png in full_figures.items():
        img = pixels(png)
        assert has_colour(img, eagle) and has_colour(img, peagle), name
    assert has_colour(pixels(full_figures["accuracy_speedup"]), base)
    assert not has_colour(pixels(full_figures["tau"]), KNOWN_COLORS["dspark"])  # skipped: not drawn


def test_sparse_and_empty_summaries() -> None:
    assert list(make_figures(stored_summary("minimal"))) == ["tau", "per_position"]
    empty = run_summary(run_id="x", suite_name="x")
    assert make_figures(empty) == {}


def test_figures_are_deterministic() -> None:
    s = stored_summary("minimal")
    assert make_figures(s) == make_figures(s)


def test_method_colors_stable_and_distinct() -> None:
    pairs = [("eagle3", "eagle3"), ("baseline", "baseline"), ("eagle3-k5", "eagle3"), ("mine", "draft_model")]
    a = method_colors(pairs)
    assert a == method_colors(reversed(pairs))
    assert a["eagle3"] == KNOWN_COLORS["eagle3"] and a["baseline"] == KNOWN_COLORS["baseline"]
    assert a["mine"] == KNOWN_COLORS["draft_model"]  # a custom label takes its kind's free colour
    assert a["eagle3-k5"] in PALETTE  # eagle3's colour is taken by the plain eagle3
    many = method_colors((f"custom-{i}", "x") for i in range(len(PALETTE)))
    assert len(set(many.values())) == len(PALETTE)
    # A label keeps its colour whatever else the run holds (when its slot is free).
    assert method_colors([("custom-3", "x")])["custom-3"] == method_colors([("custom-3", "x"), ("eagle3", "eagle3")])[
        "custom-3"]
