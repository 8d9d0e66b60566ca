"""A speed round's schedule (pure): which engines run together, in which order, and in which batches.

Rounds (specbench.execution.rounds) and the headline's speed blocks (specbench.execution.headline_blocks)
alternate the engines that are compared with each other by batch, in an order balanced over pairs of rounds.
"""

from __future__ import annotations

from specbench.config.plan import round_order
from specbench.execution.jobs import CellWork


def ab_round_order(keys: list[str], pairs: dict[str, str], arms: dict[str, str], round_index: int,
                   seed: int) -> list[str]:
    """An A/B run's order in one round: the engine pairs in a seeded order, and within each pair the arms
    alternating round by round (A B | B A | A B | …: ABBA over two rounds), from a seeded phase per pair."""
    import random

    units = sorted(set(pairs.values()))
    order = round_order(units, round_index, seed)
    out: list[str] = []
    for u in order:
        members = sorted((k for k in keys if pairs[k] == u), key=lambda k: arms[k])
        phase = random.Random(f"{seed}:{u}").randrange(2)
        out += members if (round_index + phase) % 2 == 0 else members[::-1]
    return out


def batch_order(span: tuple[int, int], unit: int, members: int = 2) -> list[tuple[tuple[int, int], tuple[int, ...]]]:
    """A round ``span`` of cells that ``members`` engines run on the same prompts, in batches of ``unit``
    prompts (:func:`~specbench.config.plan.prompts_per_batch`), each with the order the engines run it in:
    forwards, backwards, forwards, … (ABBA by batch: over two batches every engine has the same mean place,
    and every two engines have each gone first once; the round's order already alternates round by round).
    An A/B pair is two members: (0, 1), (1, 0), (0, 1), …"""
    a, b = span
    unit = max(1, unit)
    chunks = [(s, min(b, s + unit)) for s in range(a, b, unit)]
    fwd = tuple(range(members))
    return [(c, fwd if j % 2 == 0 else fwd[::-1]) for j, c in enumerate(chunks)]


def interleave_unit(span: tuple[int, int], batch_unit: int, request_rate: float | None) -> int:
    """Prompts an engine runs before the next engine of a round's step takes its turn: one batch of a
    closed-loop cell, or the whole round of a request-rate cell (one Poisson stream, not cut)."""
    return span[1] - span[0] if request_rate is not None else batch_unit


def slot_of(work: CellWork) -> tuple:
    """Cells of one round that a normal run interleaves by batch: the same prompts at the same load (a
    method, its reference and the baseline on one dataset, temperature, load and repeat: what the headline
    and the speedups pair)."""
    c = work.request.cell
    return (*c.baseline_group_key, c.repeat)
