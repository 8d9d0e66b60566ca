"""The sequential decision of an A/B speed comparison (pure: numpy, no I/O; issue 36).

Arms A and B run the same cells in interleaved rounds. After every round the runner hands this module,
per group (and pooled per method), the paired per-round **log ratios** ``log(B_r / A_r)`` of a speed
metric of the catalogue (``tpot_s``, ``step_time_s``, ``output_tps``: the metric computed over the
round's requests of each arm) and gets a :class:`ABVerdict`:

* ``same``: the interval of B/A lies inside ``[1/(1+margin), 1+margin]``;
* ``different``: B is worse than A beyond the margin (the whole interval lies past ``1+margin`` on the
  regression side: above for TPOT or step time, below ``1/(1+margin)`` for throughput);
* ``improved``: B is better than A beyond the margin (the mirror of ``different``);
* ``undecided``: anything else, or fewer than :attr:`ABRule.min_rounds` rounds.

Looking after every round and stopping at the first decision would make a fixed-n interval cover less
than it claims; the interval here is the asymptotic confidence sequence of
:mod:`specbench.analysis.sequential` (Robbins' normal mixture, Waudby-Smith et al. 2021) for the mean
log ratio: valid at every round at once, so at whatever round the runner stops. The rule (its α, the
rounds before the first decision, the round ρ is tuned for) was chosen by simulation on block-bootstrap
resamples of recorded A/A rounds (``benchmarks/ab_decision_rule.py``, ``docs/ab-decision.md``).

Rounds are the unit: a round's log ratio already pairs A and B measured minutes apart at most, so the
drift between rounds cancels in it. Pooled per method (:func:`pool_rounds`): per round, the mean log
ratio over the method's groups, over the rounds every group has (groups measured in one round share
its drift, so the round stays the unit).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy import stats as sps

from specbench.analysis.sequential import ZERO_SPREAD, normal_mixture_radius, rho_for
from specbench.results import metric_catalog as catalog
from specbench.results import speed_estimators
from specbench.stats import Estimate

ABVerdictKind = Literal["same", "different", "improved", "undecided"]
#: The change the rule must see with power (B/A of a time: +10 %), and the power required.
POWER_CHANGE = 0.10
POWER = 0.90
MAX_SIZED_ROUNDS = 10_000  # rounds_for_power / rounds_to_decide search no further


class ABRule(BaseModel):
    """How an A/B speed comparison is decided (the defaults were chosen by simulation, see the module).

    ``margin``: the equivalence margin, a fraction (0.03: B/A inside [1/1.03, 1.03] is *same*).
    ``alpha``: 1 − coverage of the confidence sequence (two-sided; it holds over all rounds at once).
    ``min_rounds``: no verdict before this many rounds (the spread of fewer is not worth trusting).
    ``max_rounds``: the cap; a group undecided here stays undecided (more rounds no longer help).
    ``planned_rounds``: the round the sequence is tightest at (ρ of :func:`~specbench.analysis.sequential.rho_for`).
    ``student``: widen the sequence for the spread being estimated (see :meth:`multiplier`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    margin: float = Field(0.03, gt=0, lt=1)
    alpha: float = Field(0.01, gt=0, lt=1)
    min_rounds: int = Field(12, ge=2)
    max_rounds: int = Field(40, ge=2)
    planned_rounds: int = Field(12, ge=2)
    student: bool = True

    @model_validator(mode="after")
    def _caps(self) -> ABRule:
        if self.max_rounds < self.min_rounds:
            raise ValueError("max_rounds must be >= min_rounds")
        return self

    @property
    def log_margin(self) -> float:
        return math.log1p(self.margin)

    def multiplier(self, n: np.ndarray | int) -> np.ndarray:
        """Half-width per unit of the round-to-round spread (sd of one log ratio) after ``n`` rounds
        (see :meth:`multiplier_at`), from a table kept per rule."""
        table = _multipliers(self)
        k = np.asarray(n, dtype=np.int64)
        return table[np.clip(k, 0, MAX_SIZED_ROUNDS)]

    def multiplier_at(self, n: np.ndarray | int) -> np.ndarray:
        """Half-width per unit of the round-to-round spread (sd of one log ratio) after ``n`` rounds:
        the normal-mixture radius, times t_{n−1}/z at 1 − α/2 with ``student`` (the spread is estimated
        from n rounds; the factor tends to 1 as n grows, 1.31 at 6 rounds, 1.12 at 12)."""
        r = normal_mixture_radius(n, rho_for(self.planned_rounds, self.alpha), self.alpha)
        if not self.student:
            return r
        q = 1 - self.alpha / 2
        with np.errstate(invalid="ignore"):
            return r * sps.t.ppf(q, np.maximum(np.asarray(n, float) - 1, 1)) / sps.norm.ppf(q)


@functools.lru_cache(maxsize=64)
def _multipliers(rule: ABRule) -> np.ndarray:
    """:meth:`ABRule.multiplier_at` for n = 0 … :data:`MAX_SIZED_ROUNDS` (entry n; n < 2: inf)."""
    n = np.arange(MAX_SIZED_ROUNDS + 1, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = rule.multiplier_at(np.maximum(n, 1))
    out[n < 2] = np.inf
    out.setflags(write=False)
    return out


class ABVerdict(BaseModel):
    """One gated metric's verdict for one group (or one method pooled over its groups).

    ``ratio``: B/A of the metric (the exponentiated mean log ratio) with its confidence-sequence interval;
    its ``n`` and ``rounds`` are the rounds the verdict rests on. ``spread``: sd of one round's log
    ratio. ``rounds_to_decide``: the round at which the interval would be decided if the estimate and
    spread stayed as they are (None: never, e.g. an estimate right on the margin); ``more_rounds_help``:
    undecided, and that round is within the rule's cap.
    """

    model_config = ConfigDict(extra="forbid")

    metric: str
    verdict: ABVerdictKind
    ratio: Estimate
    rounds: int
    groups: int = 1
    margin: float
    alpha: float
    spread: float | None
    more_rounds_help: bool
    rounds_to_decide: int | None

    def describe(self) -> str:
        """'TPOT B/A 1.12 [1.06, 1.19], different (12 rounds)'."""
        return f"{catalog.label(self.metric)} B/A {self.ratio.fmt(3)}, {self.verdict} ({self.rounds} rounds)"


class DecisionPath(NamedTuple):
    """The rule applied after every round of one sequence (arrays of its length; entry i: rounds 0..i).

    ``worse``: mean log ratio on the regression side (positive: B worse); ``half``: the sequence's
    half-width on that scale; ``verdict``: the verdict each round would give (``undecided`` before
    ``min_rounds``).
    """

    worse: np.ndarray
    half: np.ndarray
    verdict: np.ndarray

    def first_decided(self) -> int | None:
        """Index of the first round whose verdict is not undecided (the round a runner stops at)."""
        hit = np.flatnonzero(self.verdict != "undecided")
        return int(hit[0]) if hit.size else None


def regression_sign(metric: str) -> float:
    """+1 when a rise of ``metric`` is a regression (a time), −1 when a drop is (a throughput)."""
    m = catalog.spec(metric)
    if m is None or not m.speed or m.direction == "none":
        raise ValueError(f"{metric!r} is not a speed metric of the catalogue with a direction")
    return -1.0 if m.higher_is_better else 1.0


def log_ratios(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    """Per round ``log(b_r / a_r)`` of a metric measured in both arms (paired by round; B as the method:
    :func:`~specbench.results.speed_estimators.round_log_ratio`)."""
    av, bv = np.asarray(a, float), np.asarray(b, float)
    if av.shape != bv.shape:
        raise ValueError(f"A has {av.size} rounds, B {bv.size}: rounds pair one to one")
    if np.any(~(av > 0)) or np.any(~(bv > 0)):
        raise ValueError("a speed metric per round must be positive and finite")
    return np.asarray(speed_estimators.round_log_ratio(bv, av), float)


def block_units(rounds: Sequence[tuple[int, float]]) -> tuple[np.ndarray, int]:
    """The rule's units from per-round log ratios, each tagged with the engine instance it was measured on (in
    run order): per instance, the mean of its rounds when the rounds span two instances or more (an instance's
    own offset is then spread between units, which the rule estimates); else the rounds themselves. Returns the
    units and the number of instances."""
    per: dict[int, list[float]] = {}
    for inst, lr in rounds:
        per.setdefault(inst, []).append(float(lr))
    if len(per) >= 2:
        return np.array([float(np.mean(v)) for v in per.values()], float), len(per)
    return np.array([float(lr) for _, lr in rounds], float), max(1, len(per))


def pool_rounds(per_group: Mapping[str, Sequence[float]]) -> np.ndarray:
    """Per round, the mean log ratio over the groups, over the rounds all of them have (the first
    ``min(len)``): each group weighs the same, and the round stays the unit (groups measured in one
    round share its drift, so the pooled value of a round is one paired observation)."""
    series = [np.asarray(v, float) for v in per_group.values()]
    if not series:
        return np.empty(0)
    common = min(s.size for s in series)
    return np.mean([s[:common] for s in series], axis=0)


_CODES = np.array(["undecided", "same", "different", "improved"], dtype=object)


def margin_code(lo: np.ndarray | float, hi: np.ndarray | float, log_margin: float) -> np.ndarray:
    """Where an interval of log ratios on the regression side (positive: B worse) lies against ±margin, as an
    index into ``_CODES``: 2 *different* (past +margin), 3 *improved* (past −margin), 1 *same* (inside), else 0."""
    m = log_margin
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    return np.where(lo > m, 2, np.where(hi < -m, 3, np.where((lo > -m) & (hi < m), 1, 0)))


def _path_codes(worse: np.ndarray, rule: ABRule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, half-width and verdict code (index into ``_CODES``) after every round, along the last axis
    of ``worse`` (log ratios on the regression side: positive means B worse; any leading axes are
    independent sequences)."""
    x = np.asarray(worse, float)
    n = np.arange(1, x.shape[-1] + 1, dtype=float)
    y = x - x[..., :1]  # shifted by the first round: running sums without cancellation (rounds all alike: 0)
    mean_y = np.cumsum(y, axis=-1) / n
    mean = mean_y + x[..., :1]
    with np.errstate(divide="ignore", invalid="ignore"):
        var = (np.cumsum(y * y, axis=-1) - n * mean_y * mean_y) / (n - 1)
        sd = np.sqrt(np.clip(var, 0, None))
        half = sd * rule.multiplier(n)
    half = np.where((n < 2) | (sd <= ZERO_SPREAD), np.inf, half)  # rounds all alike: no width to trust
    code = margin_code(mean - half, mean + half, rule.log_margin)
    code = np.where(n < rule.min_rounds, 0, code)
    return mean, half, code


def decision_path(lr: Sequence[float] | np.ndarray, metric: str, rule: ABRule | None = None) -> DecisionPath:
    """Apply ``rule`` after every round of the log ratios ``lr`` (in the order the rounds ran);
    :func:`decide` is its last entry."""
    rule = rule or ABRule()
    x = regression_sign(metric) * np.asarray(lr, float).reshape(-1)
    if not np.all(np.isfinite(x)):
        raise ValueError("log ratios must be finite")
    mean, half, code = _path_codes(x, rule)
    return DecisionPath(mean, half, _CODES[code])


def decide(lr: Sequence[float] | np.ndarray, metric: str, rule: ABRule | None = None, *,
           groups: int = 1) -> ABVerdict:
    """The verdict after the rounds ``lr`` (per round ``log(B/A)`` of ``metric``, in run order).

    Safe to call after every round: the interval is a confidence sequence, so stopping at the first
    round that is not undecided keeps the error rates of ``rule`` (false *different* on identical arms
    ≤ α/2 asymptotically, far less with the margin; see ``docs/ab-decision.md`` for the simulated rates).
    """
    rule = rule or ABRule()
    x = np.asarray(lr, float).reshape(-1)
    n = int(x.size)
    if n == 0:
        return ABVerdict(metric=metric, verdict="undecided", ratio=Estimate(value=None, n=0, rounds=0), rounds=0,
                         groups=groups, margin=rule.margin, alpha=rule.alpha, spread=None,
                         more_rounds_help=True, rounds_to_decide=None)
    path = decision_path(x, metric, rule)
    sign = regression_sign(metric)
    worse, half = float(path.worse[-1]), float(path.half[-1])
    spread = float(np.std(x, ddof=1)) if n > 1 else None
    ends = sorted(sign * v for v in (worse - half, worse + half))  # back on the log(B/A) scale
    ratio = Estimate(value=math.exp(sign * worse), ci_low=math.exp(ends[0]) if math.isfinite(ends[0]) else 0.0,
                     ci_high=math.exp(ends[1]) if math.isfinite(ends[1]) else math.inf, n=n,
                     method="confidence sequence", rounds=n)
    verdict: ABVerdictKind = path.verdict[-1]
    to_decide = None if verdict != "undecided" else _rounds_to_decide(worse, spread, n, rule)
    return ABVerdict(metric=metric, verdict=verdict, ratio=ratio, rounds=n, groups=groups, margin=rule.margin,
                     alpha=rule.alpha, spread=spread,
                     more_rounds_help=verdict == "undecided" and (
                         n < rule.min_rounds or (to_decide is not None and to_decide <= rule.max_rounds)),
                     rounds_to_decide=to_decide)


def decide_pooled(per_group: Mapping[str, Sequence[float]], metric: str, rule: ABRule | None = None) -> ABVerdict:
    """One method's verdict pooled over its groups (:func:`pool_rounds`)."""
    return decide(pool_rounds(per_group), metric, rule, groups=len(per_group))


def _first_round(need: float, spread: float, start: int, rule: ABRule) -> int | None:
    """Smallest n ≥ ``start`` with half-width ``spread × multiplier(n)`` ≤ ``need`` (None: none up to
    :data:`MAX_SIZED_ROUNDS`)."""
    if need <= 0 or not math.isfinite(need):
        return None
    n = np.arange(max(2, start), MAX_SIZED_ROUNDS + 1)
    ok = np.flatnonzero(spread * rule.multiplier(n) <= need)
    return int(n[ok[0]]) if ok.size else None


def _rounds_to_decide(worse: float, spread: float | None, n: int, rule: ABRule) -> int | None:
    """When the interval would clear the nearest margin if the estimate and spread held (undecided only)."""
    if spread is None or spread <= ZERO_SPREAD:
        return None
    m = rule.log_margin
    need = m - abs(worse) if abs(worse) < m else abs(worse) - m
    first = _first_round(need, spread, n + 1, rule)
    return None if first is None else max(first, rule.min_rounds)


def rounds_for_power(spread: float, rule: ABRule | None = None, *, change: float = POWER_CHANGE,
                     power: float = POWER) -> int | None:
    """Rounds after which a true slowdown of ``change`` (B/A of a time = 1 + change) is called
    *different* with probability ≥ ``power``, for a round-to-round spread ``spread`` (sd of one
    round's log ratio, e.g. :attr:`ABVerdict.spread` of the rounds so far).

    At round n *different* needs D = mean − ŝ·M(n) > log(1 + margin), M the rule's
    :meth:`~ABRule.multiplier`. D is about normal with mean log(1+change) − spread·M(n) and variance
    spread²·(1/n + M(n)²/(2(n−1))) (the mean's, and the estimated spread's, whose sd is about
    spread/√(2(n−1))); n is the first round where D clears the margin with probability ``power``. The
    looks before n only add chances to decide, and the simulation on recorded A/A rounds checks it
    (tests/unit/test_ab_decision.py). A runner gives an undecided group rounds up to this cap (and
    :attr:`ABRule.max_rounds`). None: a change at or within the margin, or more than
    :data:`MAX_SIZED_ROUNDS` rounds.
    """
    rule = rule or ABRule()
    if not spread > 0:
        raise ValueError("the spread must be positive")
    gap = math.log1p(change) - rule.log_margin
    if gap <= 0:
        return None
    z = float(sps.norm.ppf(power))
    n = np.arange(rule.min_rounds, MAX_SIZED_ROUNDS + 1)
    m = rule.multiplier(n)
    ok = np.flatnonzero(spread * (m + z * np.sqrt(1 / n + m * m / (2 * (n - 1)))) <= gap)
    return int(n[ok[0]]) if ok.size else None


# ---------------------------------------------------------------------------
# choosing the rule: sequential runs simulated on resampled recorded rounds


class Simulated(NamedTuple):
    """Verdict shares over ``sims`` simulated sequential comparisons, and the rounds they used
    (the round of the first verdict that is not undecided, else the cap)."""

    sims: int
    same: float
    different: float
    improved: float
    undecided: float
    mean_rounds: float
    max_rounds: int


def block_resample(rounds: np.ndarray, length: int, sims: int, block: int,
                   rng: np.random.Generator) -> np.ndarray:
    """``sims`` circular moving-block bootstrap sequences of ``length`` rounds of a recorded series.

    ``rounds``: shape (n,) or (groups, n), the groups measured in the same rounds (resampled together,
    so the drift they share stays shared). Blocks of ``block`` consecutive rounds keep what drifts over a
    few rounds (serial correlation) in the resamples. Returns (sims, length) or (sims, groups, length).
    """
    r = np.asarray(rounds, float)
    n = r.shape[-1]
    if n < 2:
        raise ValueError("a block bootstrap needs at least 2 recorded rounds")
    b = max(1, min(block, n))
    starts = rng.integers(0, n, size=(sims, -(-length // b)))
    idx = ((starts[:, :, None] + np.arange(b)) % n).reshape(sims, -1)[:, :length]
    return r[..., idx].transpose(1, 0, 2) if r.ndim == 2 else r[idx]


def simulate(rounds: np.ndarray, metric: str, rule: ABRule | None = None, *, change: float = 0.0,
             sims: int = 2000, block: int = 3, seed: int = 0) -> Simulated:
    """Run ``rule`` sequentially (a verdict after every round, stop at the first decided one, at most
    ``rule.max_rounds``) on ``sims`` block-bootstrap resamples of recorded per-round log ratios
    ``rounds`` of ``metric`` (one group: shape (n,); a method's groups: (groups, n), pooled per round as
    :func:`pool_rounds` does). ``change``: a slowdown planted in arm B (B/A of a time × (1 + change);
    of a throughput ÷), applied to every resampled round. On A/A rounds with ``change=0`` the share of
    *different* is the false-alarm rate; with ``change=0.10`` it is the power at 10 %."""
    rule = rule or ABRule()
    rng = np.random.default_rng(seed)
    seqs = block_resample(np.asarray(rounds, float), rule.max_rounds, sims, block, rng)
    if seqs.ndim == 3:
        seqs = seqs.mean(axis=1)
    worse = regression_sign(metric) * seqs + math.log1p(change)
    _, _, code = _path_codes(worse, rule)
    decided = code != 0
    first = np.where(decided.any(axis=1), decided.argmax(axis=1), rule.max_rounds - 1)
    final = code[np.arange(sims), first]
    share = np.bincount(final, minlength=4) / sims
    return Simulated(sims=sims, same=float(share[1]), different=float(share[2]), improved=float(share[3]),
                     undecided=float(share[0]), mean_rounds=float(np.mean(first + 1)), max_rounds=rule.max_rounds)
