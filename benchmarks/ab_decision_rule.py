"""Choose the A/B speed decision rule by simulation on recorded A/A rounds (issue 36).

Reads tests/fixtures/ab/aa_rounds.json (per-round B/A ratios of real A/A runs: identical arms, interleaved
rounds; tests/fixtures/ab/record_aa.py made it) and runs candidate rules sequentially — a verdict after
every round, stop at the first one that is not undecided, at most the cap — on circular block-bootstrap
resamples of each recorded series (:func:`specbench.analysis.ab_decision.simulate`), unchanged (A/A: the
share of *different* is the false-alarm rate) and with a slowdown planted in B (5 % and 10 %: power).

Candidates: the confidence sequence of :mod:`specbench.analysis.ab_decision` at several α, first-verdict
rounds and tuning rounds, and two references computed here with :func:`specbench.stats.t_interval`:
a fixed-n t interval looked at after every round (what not to do) and α spent over the looks by
Bonferroni (a t interval at α / looks). Each row pools every recorded (run, metric, group) series, each
weighing the same, and the groups pooled per method. Then, for the chosen rule, per series: its spread, the
rounds :func:`~specbench.analysis.ab_decision.rounds_for_power` sizes for 90 % power at 10 %, and the
power within that cap. The tables are docs/ab-decision.md's.

    .venv/bin/python benchmarks/ab_decision_rule.py [--sims 2000] [--block 3] [--smoke]
    .venv/bin/python benchmarks/ab_decision_rule.py --fixture tests/fixtures/ab/aa_rounds_idle.json --no-t

One fixture file is one condition (aa_rounds.json: the first runner on a shared machine; aa_rounds_idle.json:
``specbench ab`` A/A invocations of suites/cpu-gate.yaml on an idle machine); run it on each.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specbench.analysis.ab_decision import (  # noqa: E402
    ABRule,
    block_resample,
    regression_sign,
    rounds_for_power,
    simulate,
)
from specbench.stats import t_interval  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "ab" / "aa_rounds.json"
CHANGES = (0.0, 0.05, 0.10)
MIN_SERIES = 12  # rounds a recorded series needs to be resampled (shorter ones are left out)


def centred(lr: np.ndarray) -> np.ndarray:
    """An A/A series with the null imposed: B/A is 1 by construction (identical arms), so the series' own
    mean log ratio is noise, and a bootstrap world in which it were a real change would test nothing."""
    return lr - lr.mean()


def load_series(path: Path) -> tuple[list[tuple[str, str, np.ndarray]], list[tuple[str, str, np.ndarray]]]:
    """``(label, metric, log ratios)`` per recorded group (its runs' rounds in order: the fixture's
    ``series``; :func:`centred`; at least :data:`MIN_SERIES` rounds; TPOT and output tok/s), and per
    (metric, method) the groups' rounds aligned (groups × common rounds)."""
    single, pooled = [], []
    for metric, groups in json.loads(path.read_text())["series"].items():
        if metric == "step_time_s":
            continue  # identical arms take identical steps: its per-round ratio is TPOT's
        logs = {g: centred(np.log(np.asarray(r, float))) for g, r in groups.items() if len(r) >= MIN_SERIES}
        single += [(g, metric, lr) for g, lr in logs.items()]
        for method in sorted({g.split("/")[1] for g in logs}):
            of = [lr for g, lr in logs.items() if g.split("/")[1] == method]
            n = min(lr.size for lr in of)
            if len(of) > 1:
                pooled.append((f"{method} pooled", metric, np.stack([lr[:n] for lr in of])))
    return single, pooled


def t_rule_sim(lr: np.ndarray, metric: str, rule: ABRule, change: float, sims: int, block: int, seed: int,
               bonferroni: bool) -> tuple[float, float, float]:
    """(different, same, mean rounds) of a t-interval rule looked at after every round from ``min_rounds``:
    at level α each look (``bonferroni=False``), or at α / looks."""
    rng = np.random.default_rng(seed)
    seqs = block_resample(lr, rule.max_rounds, sims, block, rng)
    if seqs.ndim == 3:
        seqs = seqs.mean(axis=1)
    worse = regression_sign(metric) * seqs + math.log1p(change)
    looks = rule.max_rounds - rule.min_rounds + 1
    conf = 1 - (rule.alpha / looks if bonferroni else rule.alpha)
    m = rule.log_margin
    diff = same = 0
    used = []
    for s in worse:
        verdict, n = "undecided", rule.max_rounds
        for k in range(rule.min_rounds, rule.max_rounds + 1):
            e = t_interval(list(s[:k]), confidence=conf)
            assert e.ci_low is not None and e.ci_high is not None
            if e.ci_low > m:
                verdict = "different"
            elif -m < e.ci_low and e.ci_high < m:
                verdict = "same"
            elif e.ci_high < -m:
                verdict = "improved"
            if verdict != "undecided":
                n = k
                break
        diff += verdict == "different"
        same += verdict == "same"
        used.append(n)
    return diff / sims, same / sims, float(np.mean(used))


def table(rows: list[tuple[str, ABRule | str]], series: list[tuple[str, str, np.ndarray]], sims: int,
          block: int, base: ABRule) -> None:
    print("| rule | A/A: different (max over series) | A/A: same | A/A rounds | 5 %: different | "
          "10 %: different (min over series) | 10 %: same | 10 % rounds |")
    print("|---|---|---|---|---|---|---|---|")
    for label, rule in rows:
        res: dict[float, list[tuple[float, float, float]]] = {c: [] for c in CHANGES}
        for i, (_, metric, lr) in enumerate(series):
            for c in CHANGES:
                if isinstance(rule, ABRule):
                    s = simulate(lr, metric, rule, change=c, sims=sims, block=block, seed=i)
                    res[c].append((s.different, s.same, s.mean_rounds))
                else:
                    k = max(1, sims // 5)  # the t references loop in Python: fewer resamples
                    res[c].append(t_rule_sim(lr, metric, base, c, k, block, i, bonferroni=rule == "bonferroni"))
        a, p5, p10 = (np.array(res[c]) for c in CHANGES)
        print(f"| {label} | {a[:, 0].mean():.2%} ({a[:, 0].max():.2%}) | {a[:, 1].mean():.1%} | {a[:, 2].mean():.1f} "
              f"| {p5[:, 0].mean():.1%} | {p10[:, 0].mean():.1%} ({p10[:, 0].min():.1%}) | {p10[:, 1].mean():.2%} "
              f"| {p10[:, 2].mean():.1f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixture", type=Path, default=FIXTURE)
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--block", type=int, default=3, help="rounds per bootstrap block")
    ap.add_argument("--margin", type=float, default=0.03)
    ap.add_argument("--no-t", action="store_true", help="leave out the (slow) t-interval references")
    ap.add_argument("--smoke", action="store_true", help="a few resamples, no t references: the tables' shape only")
    args = ap.parse_args()
    if args.smoke:
        args.sims, args.no_t = 20, True
    single, pooled = load_series(args.fixture)
    print(f"{len(single)} recorded series ({', '.join(sorted({m for _, m, _ in single}))}), "
          f"{len(pooled)} pooled; rounds per series {sorted({s.size for _, _, s in single})}")
    spreads = [float(np.std(s, ddof=1)) for _, _, s in single]
    raw = json.loads(args.fixture.read_text())["series"]
    means = [float(np.mean(np.log(r))) for g in raw.values() for r in g.values() if len(r) >= MIN_SERIES]
    print(f"round-to-round spread (sd of log B/A): median {np.median(spreads):.3f}, max {max(spreads):.3f}; "
          f"recorded A/A mean log B/A (before centring): {min(means):+.3f} … {max(means):+.3f}\n")
    base = ABRule(margin=args.margin)
    rows: list[tuple[str, ABRule | str]] = []
    for student in (False, True):
        for alpha in (0.05, 0.01):
            for min_rounds in (4, 8, 12, 16):
                r = base.model_copy(update={"alpha": alpha, "min_rounds": min_rounds, "student": student})
                rows.append((f"CS{' t-corrected' if student else ''} α={alpha:g}, first verdict at {min_rounds}", r))
    if not args.no_t:
        rows += [(f"t interval at α={base.alpha:g} every round from {base.min_rounds}", "naive"),
                 (f"t interval, Bonferroni over {base.max_rounds - base.min_rounds + 1} looks", "bonferroni")]
    print(f"## single groups (margin {args.margin:.0%}, cap {base.max_rounds} rounds, block {args.block}, "
          f"{args.sims} resamples per series)\n")
    table(rows, single, args.sims, args.block, base)
    print("\n## pooled per method\n")
    table([(lab, r) for lab, r in rows if isinstance(r, ABRule) and r.student], pooled, args.sims, args.block, base)

    print(f"\n## the default rule {base!r}: per series, the cap sized for 90 % power at 10 %\n")
    print("| series | metric | rounds | spread | sized cap | power within the cap | A/A different within 40 |")
    print("|---|---|---|---|---|---|---|")
    for i, (label, metric, lr) in enumerate(single):
        sd = float(np.std(lr, ddof=1))
        cap = rounds_for_power(sd, base)
        if cap is None:
            print(f"| {label} | {metric} | {lr.size} | {sd:.3f} | – | – | – |")
            continue
        capped = base.model_copy(update={"max_rounds": max(cap, base.min_rounds)})
        pw = simulate(lr, metric, capped, change=0.10, sims=args.sims, block=args.block, seed=i)
        aa = simulate(lr, metric, base, sims=args.sims, block=args.block, seed=i)
        print(f"| {label} | {metric} | {lr.size} | {sd:.3f} | {cap} | {pw.different:.1%} | {aa.different:.2%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
