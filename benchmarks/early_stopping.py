"""Optional stopping replayed on real per-request records: coverage and prompts saved.

For every group of every run given (``--runs DIR ...``, read with
:func:`specbench.results.rundir.read_requests` / ``read_cells`` and the plan in
``manifest.json``) and every metric it has — pooled τ, TPOT, speedup over
the baseline group at the same target, dataset, temperature and load
(paired by prompt), task accuracy (GSM8k strict, HumanEval pass@1) — the
prompts are taken as the finite population and the *full-set value* is the
metric over all of them (the value ``specbench analyze`` reports). Then,
over ``--replays`` seeded prompt orders (:func:`specbench.analysis.sequential.seeded_order`):

* **CS**: the stop rule of :mod:`specbench.analysis.sequential` — check at
  ``min_prompts`` and every ``check_every`` prompts after, stop once the
  confidence sequence's half-width is at most the target — with the target
  half-width = ``--factor`` (3) × the full set's fixed-n 95 % half-width
  (the percentile bootstrap of :func:`specbench.stats.bootstrap` on all
  prompts). Reported: how often the stopped interval holds the full-set
  value (*coverage*), how often it held it at every check (*uniform*), and
  the prompts used over the prompts available.
* accuracy: the task scores where the run has them (all 0 on the tiny zoo,
  so never narrower than the target), and, marked ``τ≥med*``, a proxy with
  real variation: 1 when a prompt's τ is at least its group's median.
  Both go through the betting confidence sequence of accuracy.
* **naive**: the same rule with the fixed-n percentile bootstrap
  (:func:`specbench.stats.bootstrap`) recomputed at every check, for
  contrast (``--naive-replays`` orders, ``--resamples`` resamples).

A cell with fewer prompts than the rule's defaults (cpu-smoke has 8 GSM8k
and 16 HumanEval prompts) first checks at ``max(8, N // 2)`` prompts and then
every ``max(4, N // 4)``: a cell of 8 prompts never stops early. A replay that reaches the last prompt
stops there with the full-set value itself.

The summary pools the cells of each run per metric (and all runs). Exit
status 1 when any run's (or all runs') pooled stopped-CS coverage of a
metric is below ``--min-coverage`` (0.94), else 0.

Producing the records (neither is committed; they are large)::

    # the held-out zoo run: 320 Spec-Bench questions × baseline, EAGLE-3, DFlash at batch 1
    PYTHONPATH=$PWD .venv/bin/python -m specbench.cli run benchmarks/suites/zoo-heldout.yaml \\
        --out /tmp/heldout --no-report
    # cpu-smoke (optional): its records
    .venv/bin/specbench run suites/cpu-smoke.yaml --out /tmp/smoke --no-report
    PYTHONPATH=$PWD .venv/bin/python benchmarks/early_stopping.py \\
        --runs /tmp/heldout/zoo-heldout/<run-id> /tmp/smoke/cpu-smoke/<run-id>

``--smoke`` runs the whole path at the smallest size on any run (the test command gives it its shared
cpu-smoke run of 2 prompts per cell): cells of 2 prompts or more, 3 CS and 2 naive replays, 200 resamples;
it prints the coverage without judging it.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specbench import stats
from specbench.analysis import metrics, sequential
from specbench.config.dataset_kinds import KINDS, kind_named
from specbench.config.plan import Cell
from specbench.config.stop_rule import METRICS, Metric
from specbench.results import counters, rundir
from specbench.results.manifest import RunManifest
from specbench.results.records import RequestRecord
from specbench.scoring.apply import HEADLINE_SCORE, score_requests


@dataclass
class Case:
    run: str
    group: str
    metric: Metric
    units: dict[str, np.ndarray]
    label: str = ""


@dataclass
class Result:
    case: Case
    n: int
    full: float
    fixed_half: float
    target: float
    min_prompts: int
    check_every: int
    cs_covered: list[bool] = field(default_factory=list)
    cs_uniform: list[bool] = field(default_factory=list)
    cs_used: list[int] = field(default_factory=list)
    cs_early: list[bool] = field(default_factory=list)
    naive_covered: list[bool] = field(default_factory=list)
    naive_used: list[int] = field(default_factory=list)


# ---------------------------------------------------------------------------
# records → per-prompt units


def _scores(run_dir: Path, manifest: RunManifest, cells: list[Cell], reqs: list[RequestRecord]) -> dict:
    """Cached scores (scores.jsonl) plus GSM8k scored in-process; HumanEval only from the cache."""
    cached = rundir.read_scores(run_dir)
    prompts = rundir.read_prompts(run_dir)
    datasets = manifest.suite.datasets if manifest.suite else []
    if not any(kind_named(d.kind).scorer is not None for d in datasets):
        return cached
    scores, _ = score_requests(
        reqs,
        {c.cell_id: c.dataset for c in cells},
        {d.name: d.kind for d in datasets},
        {(p.dataset, p.prompt_id): p.reference for p in prompts},
        allow_code_exec=False,
        cached=cached,
    )
    return scores


def _proxy_accuracy(run: str, gid: str, tau_units: dict[str, np.ndarray]) -> Case:
    """A real 0/1 outcome per prompt where the task scores are all 0: τ of the prompt ≥ the group's median."""
    per = {p: counters.tau(u[0], u[1]) for p, u in tau_units.items() if u[1] > 0}
    med = float(np.median(list(per.values())))
    return Case(run, gid, "accuracy", {p: np.array([float(t >= med)]) for p, t in per.items()}, label="τ≥med*")


def cases_of_run(run_dir: Path, group_filter: re.Pattern[str] | None, proxy_accuracy: bool = True,
                 min_units: int = 8) -> list[Case]:
    manifest = rundir.read_manifest(run_dir)
    cells = manifest.plan.cells if manifest.plan else []
    latest = metrics.latest_cell_records(rundir.read_cells(run_dir))
    reqs = metrics.unique_requests(rundir.read_requests(run_dir))
    by_group = metrics.requests_by_group(cells, latest, reqs)
    scores = _scores(run_dir, manifest, cells, reqs)
    kinds = {d.name: d.kind for d in manifest.suite.datasets} if manifest.suite else {}
    first: dict[str, Cell] = {}
    for c in cells:
        first.setdefault(c.group_id, c)
    baselines = {c.baseline_group_key: c.group_id for c in first.values() if c.method_kind == "baseline"}
    run = manifest.suite_name
    out: list[Case] = []
    for gid, c in first.items():
        recs = by_group.get(gid) or []
        if not recs or (group_filter and not group_filter.search(gid)):
            continue
        if c.method_kind != "baseline" and recs and all(r.spec is not None for r in recs if r.error is None):
            tau_units = sequential.prompt_units("tau", recs)
            out.append(Case(run, gid, "tau", tau_units))
            if proxy_accuracy and tau_units:
                out.append(_proxy_accuracy(run, gid, tau_units))
        out.append(Case(run, gid, "tpot", sequential.prompt_units("tpot", recs)))
        base = baselines.get(c.baseline_group_key)
        if c.method_kind != "baseline" and base and by_group.get(base):
            out.append(Case(run, gid, "speedup", sequential.prompt_units("speedup", recs, by_group[base])))
        kind = KINDS.get(kinds.get(c.dataset, ""))
        score_metric = HEADLINE_SCORE.get(kind.scorer) if kind is not None and kind.scorer is not None else None
        if score_metric and any(k[0] == r.cell_id for r in recs[:1] for k in scores):
            u = sequential.prompt_units("accuracy", recs, scores=scores, score_metric=score_metric)
            out.append(Case(run, gid, "accuracy", u, label=score_metric))
    return [x for x in out if len(x.units) >= min_units]


# ---------------------------------------------------------------------------
# replays


def _first_stop(half: np.ndarray, checks: list[int], target: float) -> int:
    for n in checks:
        h = half[n - 1]
        if np.isfinite(h) and h <= target:
            return n
    return checks[-1]


def replay(case: Case, args: argparse.Namespace) -> Result:
    pids = sorted(case.units)
    n = len(pids)
    all_rows = sequential.ordered_units(case.units, pids)
    full = sequential.estimate(case.metric, all_rows)

    def stat(blocks: np.ndarray) -> np.ndarray:
        return sequential.estimates(case.metric, blocks)

    fixed = stats.bootstrap(all_rows, stat, resamples=args.resamples, vectorized=True)
    fixed_half = (fixed.ci_high - fixed.ci_low) / 2 if fixed.ci_low is not None and fixed.ci_high is not None else 0.0
    target = args.factor * fixed_half
    min_p = min(args.min_prompts, max(8, n // 2))
    every = min(args.check_every, max(4, n // 4))
    rule = sequential.StopRule(metric=case.metric, abs_half_width=max(target, 1e-300), min_prompts=min_p,
                               check_every=every, alpha=args.alpha)
    checks = sequential.check_points(rule, n)
    res = Result(case, n, full, fixed_half, target, min_p, every)
    for seed in range(args.replays):
        u = sequential.ordered_units(case.units, sequential.seeded_order(pids, seed))
        _, lo, hi = sequential.confidence_path(case.metric, u, alpha=args.alpha, planned_n=rule.planned(n))
        half = (hi - lo) / 2
        stop = _first_stop(half, checks, target)
        inside = (lo <= full + 1e-12 * abs(full)) & (full - 1e-12 * abs(full) <= hi)
        res.cs_used.append(stop)
        res.cs_early.append(stop < n)
        res.cs_covered.append(bool(stop == n or inside[stop - 1]))
        res.cs_uniform.append(bool(all(inside[k - 1] for k in checks[:-1])))
        if seed < args.naive_replays:
            stop_n = checks[-1]
            for k in checks[:-1]:
                b = stats.bootstrap(u[:k], stat, resamples=args.resamples, vectorized=True)
                if b.ci_low is not None and b.ci_high is not None and (b.ci_high - b.ci_low) / 2 <= target:
                    stop_n = k
                    res.naive_covered.append(bool(b.ci_low <= full <= b.ci_high))
                    break
            else:
                res.naive_covered.append(True)  # ran every prompt: the full-set value itself
            res.naive_used.append(stop_n)
    return res


# ---------------------------------------------------------------------------
# output


def _pct(xs: list[bool]) -> str:
    return f"{100 * np.mean(xs):5.1f}%" if xs else "    –"


def _frac(used: list[int], n: int) -> str:
    return f"{np.mean(used) / n:.2f} (≤{max(used) / n:.2f})" if used else "–"


def print_table(results: list[Result], args: argparse.Namespace) -> dict[str, float]:
    hdr = (f"{'run':<12} {'group':<38} {'metric':<16} {'N':>4} {'full value':>11} {'fixed hw':>9} "
           f"{'target hw':>9} {'checks':>7} {'CS cover':>8} {'uniform':>7} {'early':>6} {'CS used/N':>13} "
           f"{'naive cover':>11} {'naive used/N':>13}")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        name = r.case.metric + (f":{r.case.label}" if r.case.label else "")
        print(f"{r.case.run:<12} {r.case.group:<38} {name:<16} {r.n:>4} {r.full:>11.5g} {r.fixed_half:>9.3g} "
              f"{r.target:>9.3g} {f'{r.min_prompts}+{r.check_every}':>7} {_pct(r.cs_covered):>8} "
              f"{_pct(r.cs_uniform):>7} {_pct(r.cs_early):>6} {_frac(r.cs_used, r.n):>13} "
              f"{_pct(r.naive_covered):>11} {_frac(r.naive_used, r.n):>13}")
    print()
    by_key: dict[tuple[str, str], list[Result]] = defaultdict(list)
    def kind(r: Result) -> str:  # the proxy accuracy apart from task accuracy
        return r.case.metric + ("*" if r.case.label.endswith("*") else "")

    for r in results:
        by_key[(r.case.run, kind(r))].append(r)
        by_key[("all runs", kind(r))].append(r)
    cover: dict[str, float] = {}
    print(f"{'run':<12} {'metric':<9} {'cells':>5} {'replays':>8} {'CS cover':>8} {'uniform':>7} {'early':>6} "
          f"{'CS used/N':>9} {'max used/N':>10} {'naive replays':>13} {'naive cover':>11} {'naive used/N':>12}")
    runs = list(dict.fromkeys(r.case.run for r in results))
    for run in runs + (["all runs"] if len(runs) > 1 else []):
        for m in ("tau", "speedup", "tpot", "accuracy", "accuracy*"):
            rs = by_key.get((run, m))
            if not rs:
                continue
            cov = [x for r in rs for x in r.cs_covered]
            uni = [x for r in rs for x in r.cs_uniform]
            early = [x for r in rs for x in r.cs_early]
            used = [u / r.n for r in rs for u in r.cs_used]
            ncov = [x for r in rs for x in r.naive_covered]
            nused = [u / r.n for r in rs for u in r.naive_used]
            cover[f"{run}/{m}"] = float(np.mean(cov))
            print(f"{run:<12} {m:<9} {len(rs):>5} {len(cov):>8} {_pct(cov):>8} {_pct(uni):>7} {_pct(early):>6} "
                  f"{np.mean(used):>9.2f} {max(used):>10.2f} {len(ncov):>13} {_pct(ncov):>11} "
                  f"{np.mean(nused) if nused else 0:>12.2f}")
    return cover


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", type=Path, required=True, help="run directories (…/<suite>/<run-id>)")
    p.add_argument("--replays", type=int, default=500, help="seeded orders per cell and metric (CS)")
    p.add_argument("--naive-replays", type=int, default=500, help="orders per cell for the naive bootstrap")
    p.add_argument("--resamples", type=int, default=stats.DEFAULT_RESAMPLES, help="bootstrap resamples (fixed-n half-width, naive)")
    p.add_argument("--factor", type=float, default=3.0, help="target half-width / full set's fixed-n half-width")
    p.add_argument("--min-prompts", type=int, default=32)
    p.add_argument("--check-every", type=int, default=32)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--min-coverage", type=float, default=0.94)
    p.add_argument("--groups", default=None, help="regex: only groups whose id matches")
    p.add_argument("--metrics", default=",".join(METRICS))
    p.add_argument("--no-proxy-accuracy", action="store_true",
                   help="leave out the proxy 0/1 outcome (a prompt's τ ≥ its group's median) beside task accuracy")
    p.add_argument("--smoke", action="store_true",
                   help="the whole path at the smallest size (the test command runs it on its shared cpu-smoke run): "
                   "cells of 2+ prompts, 3 CS / 2 naive replays, 200 resamples; coverage is printed, not judged")
    args = p.parse_args(argv)
    min_units = 8
    if args.smoke:
        args.replays, args.naive_replays, args.resamples, min_units = 3, 2, 200, 2
    wanted = set(args.metrics.split(","))
    flt = re.compile(args.groups) if args.groups else None
    t0 = time.monotonic()
    cases = [c for d in args.runs for c in cases_of_run(d, flt, not args.no_proxy_accuracy, min_units)
             if c.metric in wanted]
    if not cases:
        print(f"early stopping: no cell of {min_units}+ prompts with a metric in {sorted(wanted)}", file=sys.stderr)
        return 2
    results = [replay(c, args) for c in cases]
    print(f"early stopping: {len(cases)} cells × metrics from {len(args.runs)} run(s); target half-width = "
          f"{args.factor:g} × the full set's fixed-n 95 % bootstrap half-width; CS α = {args.alpha}; "
          f"{args.replays} CS / {args.naive_replays} naive replays per cell, {args.resamples} resamples")
    cover = print_table(results, args)
    low = {m: c for m, c in cover.items() if c < args.min_coverage}
    print(f"\n{time.monotonic() - t0:.0f} s. " + (
        f"FAIL: stopped-CS coverage below {args.min_coverage:.0%}: {low}" if low
        else f"ok: stopped-CS coverage ≥ {args.min_coverage:.0%} for every metric"))
    return 1 if low and not args.smoke else 0


if __name__ == "__main__":
    sys.exit(main())
