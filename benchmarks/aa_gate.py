"""A/A test of the speed verdicts: identical-code runs, their intervals, compare, gate and the headline (issue 22).

What it measures is what speed rules comparing runs made at different times can see (a trend); the
speed gate is ``specbench ab`` (both sides in one job), measured by ``benchmarks/ab_gate.py``.

Reads N finished runs of one suite made with identical code on one machine (``--runs DIR ...``), or
makes them (``--suite S --n N``: ``specbench run S`` N times in a row; the load average before each
run is printed). The first ``--calibrate-on`` runs (default: half, at least 2) calibrate the speed
noise floor (:func:`specbench.regression.calibrate_noise.aa_noise_calibration`); every pair of the *other* runs is judged:

* per speed metric (speedup, output tok/s, TPOT, throughput, the headline's speedup ratio): the share
  of (pair, group) changes outside their two 95 % intervals (the difference interval excludes 0, no
  multiplicity), with the within-run intervals as stored and with the intervals a run analysed with
  the calibration reports (:func:`specbench.analysis.apply_noise.with_speed_noise`: between-run noise
  added in quadrature) — the issue's check is on the latter;
* the false-alarm rate of ``compare`` (any significant speed change, with the calibrated floor as
  ``--speed-noise-floor-pct``) and of ``gate`` (``--rules``, default ``gates.example.yaml``, with the
  calibration, exit ≠ 0) over all judged pairs, both orders;
* headline verdicts (faster / slower / not distinguishable) that flip between runs, and best-K changes;
* power: runs with a real planted slowdown, given (``--planted DIR ...``) or made
  (``--suite S --plant-delay-ms 5 10 20``: ``--planted-n`` runs per delay with the ``planted-step-delay``
  engine patch, a sleep in every model step of each speculating engine, the baseline untouched);
  per set, the median speedup change it caused and the share of (planted, judged run) pairs the
  gate fails, and the smallest change caught in ≥ 90 % of pairs. Not measured without planted runs.

``--write-noise FILE`` stores the calibration (``specbench calibrate`` writes the same file). ``--smoke`` checks the
whole path on the runs given (the integration test passes the shared cpu-smoke run, read twice: an
A/A pair whose changes are exactly 0), calibrating and judging on the same runs when fewer than 4 are
given (said in the output). Exit 1 when a check of the issue fails on ≥ 4 runs (outside-interval share
> 10 % for a metric with the calibration, a gate false alarm, a headline flip between faster and slower,
or > 10 % of headline verdicts moving to or from "not distinguishable"), else 0.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specbench.analysis.apply_noise import with_speed_noise  # noqa: E402
from specbench.api import load_summary  # noqa: E402
from specbench.engines.vllm_patches import PLANTED_DELAY_ENV  # noqa: E402
from specbench.regression.calibrate_noise import aa_noise_calibration, floor_for_power  # noqa: E402
from specbench.regression.gate import evaluate_gate  # noqa: E402
from specbench.regression.gate_rules import load_rules  # noqa: E402
from specbench.regression.run_diff import compare_runs, estimates_of, headline_key, metric_change  # noqa: E402
from specbench.results import metric_catalog as catalog  # noqa: E402
from specbench.results import rundir  # noqa: E402
from specbench.results.noise_calibration import NoiseCalibration, save_noise  # noqa: E402
from specbench.results.summary import RunSummary  # noqa: E402
from specbench.stats import Estimate  # noqa: E402

SPEED = ("speedup", "output_tps", "tpot_s", "throughput_tps", "speedup_ratio")
SPECS = tuple(m for m in catalog.CATALOG if m.name in SPEED and m.source == "group")


def _speed_estimates(s: RunSummary, metric: str) -> dict[str, Estimate]:
    """Group id (headline key for the speedup ratio) → the run's estimate of ``metric``."""
    if metric == "speedup_ratio":
        return {headline_key(r): r.speedup_ratio for r in s.headline}
    out = {}
    for g in s.groups:
        e = estimates_of(g, SPECS).get(metric) if g.status in ("ok", "partial") else None
        if e is not None:
            out[g.group_id] = e
    return out


def outside_share(runs: list[RunSummary], metric: str) -> tuple[int, int]:
    """(changes whose difference interval excludes 0, changes) over every pair and shared group."""
    out = total = 0
    for a, b in itertools.combinations(runs, 2):
        ea, eb = _speed_estimates(a, metric), _speed_estimates(b, metric)
        for key in ea.keys() & eb.keys():
            c = metric_change(metric, ea[key], eb[key])
            if c is None or c.diff_low is None:
                continue
            total += 1
            out += int(c.significant)
    return out, total


def headline_moves(runs: list[RunSummary]) -> tuple[int, int, int, int]:
    """(flips faster↔slower, moves to/from "not distinguishable", best-K changes, verdicts compared)."""
    flips = moves = best = n = 0
    for a, b in itertools.combinations(runs, 2):
        va = {(r.method, r.reference, r.target, r.dataset, r.temperature, r.batch_size): r for r in a.headline}
        for r in b.headline:
            o = va.get((r.method, r.reference, r.target, r.dataset, r.temperature, r.batch_size))
            if o is None:
                continue
            n += 1
            if o.verdict != r.verdict:
                flips += int({o.verdict, r.verdict} == {"faster", "slower"})
                moves += int({o.verdict, r.verdict} != {"faster", "slower"})
            best += int(o.method_k != r.method_k)
    return flips, moves, best, n


def gate_fails(new: RunSummary, base: RunSummary, rules_path: Path, cal: NoiseCalibration) -> bool:
    return evaluate_gate(new, base, load_rules(rules_path), noise=cal).exit_code != 0


def needed_measurement(a: RunSummary, b: RunSummary, rules_path: Path, cal: NoiseCalibration,
                       drop_pct: float = 15.0) -> str:
    """What catching a ``drop_pct`` % speedup drop in 90 % of pairs would take of this gate: the floor it
    needs (:func:`floor_for_power`, at the gate's own multiplicity) against the calibrated one, and how
    many times longer each group would have to be measured (the floor shrinks as 1/√seconds)."""
    gate = evaluate_gate(a, b, load_rules(rules_path), noise=cal)
    need = floor_for_power(drop_pct, gate.widen)
    have = cal.floor_pct("speedup")
    times = "–" if not have else f"{(have / need) ** 2:.1f} ×"
    return (f"to catch a {drop_pct:g} % speedup drop in 90 % of pairs, this gate (intervals ×{gate.widen:.2f} over "
            f"{gate.n_comparisons} comparisons) needs a speedup floor ≤ ±{need:.2f} % (calibrated: "
            f"{'–' if have is None else f'±{have:.2f} %'}): each group measured {times} as long as now")


def compare_alarms(a: RunSummary, b: RunSummary, floor: float | None) -> bool:
    """Any significant speed change between two runs (speed is tested when both were analysed with a
    calibration, or with ``floor``)."""
    comp = compare_runs(a, b, speed_noise_floor_pct=floor)
    return any(c.significant and c.metric.split(".")[0] in SPEED for _, c in comp.changes(significant_only=True))


def make_runs(suite: Path, n: int, delay_ms: float | None = None) -> list[Path]:
    """``specbench run`` ``n`` times; with ``delay_ms`` every vLLM target gets the ``planted-step-delay``
    engine patch (a real sleep per model step of each speculating engine; the baseline is untouched)."""
    dirs = []
    run_suite, env = suite, dict(os.environ)
    if delay_ms is not None:
        data = yaml.safe_load(suite.read_text())
        for t in data["targets"]:
            if t.get("engine", "vllm-offline") != "reference":
                t["engine_patches"] = [*t.get("engine_patches", []), "planted-step-delay"]
        run_suite = suite.parent / f".{suite.stem}-planted.yaml"  # relative dataset paths still resolve
        run_suite.write_text(yaml.safe_dump(data, sort_keys=False))
        env[PLANTED_DELAY_ENV] = f"{delay_ms:g}"
    try:
        for i in range(n):
            what = f"planted {delay_ms:g} ms/step " if delay_ms is not None else ""
            print(f"{what}run {i + 1}/{n}: load average {os.getloadavg()}", flush=True)
            before = set((REPO / "results").glob("*/*"))
            subprocess.run([sys.executable, "-m", "specbench.cli", "run", str(run_suite), "--no-report"],
                           check=True, cwd=REPO, env=env)
            dirs += sorted(set((REPO / "results").glob("*/*")) - before)[-1:]
    finally:
        if run_suite != suite:
            run_suite.unlink(missing_ok=True)
    return dirs


def median_speedup_change(planted: list[RunSummary], judged: list[RunSummary]) -> float | None:
    """Median relative change of speedup, planted against identical-code runs (what the delay did)."""
    changes = []
    for p in planted:
        pg = {g.group_id: g.speedup for g in p.groups}
        for a in judged:
            for g in a.groups:
                b, n = g.speedup, pg.get(g.group_id)
                if b is not None and n is not None and b.value and n.value is not None:
                    changes.append(n.value / b.value - 1)
    return float(np.median(changes)) if changes else None


def pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.0f} %)" if n else "–"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="*", type=Path, default=[], help="finished identical-code runs of one suite")
    ap.add_argument("--suite", type=Path, help="make --n runs of this suite instead")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--calibrate-on", type=int, help="the first K runs calibrate (default: half, at least 2)")
    ap.add_argument("--planted", nargs="*", type=Path, default=[], help="runs with a planted slowdown (power)")
    ap.add_argument("--plant-delay-ms", nargs="*", type=float, default=[],
                    help="with --suite: also make --planted-n runs per delay with the planted-step-delay patch")
    ap.add_argument("--planted-n", type=int, default=2)
    ap.add_argument("--rules", type=Path, default=REPO / "gates.example.yaml")
    ap.add_argument("--write-noise", type=Path, help="store the calibration here (specbench gate --noise)")
    ap.add_argument("--smoke", action="store_true", help="the whole path on the runs given (≥ 1; read twice if 1)")
    args = ap.parse_args()
    dirs = list(args.runs) + (make_runs(args.suite, args.n) if args.suite else [])
    if args.smoke and len(dirs) == 1:
        dirs = dirs * 2
    if len(dirs) < 2:
        ap.error("need at least 2 runs (--runs DIR DIR ... or --suite S --n N)")
    runs = [load_summary(d) for d in dirs]
    hw = rundir.read_manifest(dirs[0]).hardware_class
    k = args.calibrate_on or max(2, len(runs) // 2)
    if len(runs) - k >= 2:
        cal_runs, judged, note = runs[:k], runs[k:], f"calibrated on runs 1–{k}, judged on the other {len(runs) - k}"
    else:
        cal_runs, judged, note = runs, runs, "fewer than 4 runs: calibrated and judged on the same runs (not a check)"
    cal = aa_noise_calibration(cal_runs, hw)
    if args.write_noise:
        save_noise(cal, args.write_noise)
    print(f"# A/A: {len(runs)} runs of {runs[0].suite_name} on {hw}; {note}\n")
    # The judged runs as a run analysed with this calibration reports them (between-run noise included).
    widened = [with_speed_noise(r, cal) for r in judged]
    print("| metric | noise floor | outside both 95 % intervals: within-run | with the calibration |")
    print("|---|---|---|---|")
    checks = len(runs) >= 4 and len(runs) - k >= 2
    bad = False
    for m in SPEED:
        out, total = outside_share(judged, m)
        w_out, w_total = outside_share(widened, m)
        floor = cal.floor_pct(m)
        print(f"| {m} | {'–' if floor is None else f'±{floor:.2f} %'} | {pct(out, total)} | {pct(w_out, w_total)} |")
        bad |= checks and w_total > 0 and w_out > 0.10 * w_total
    pairs = list(itertools.permutations(widened, 2))
    g_alarms = sum(gate_fails(b, a, args.rules, cal) for a, b in pairs)
    c_alarms = sum(compare_alarms(a, b, None) for a, b in pairs)
    flips, moves, best, n = headline_moves(widened)
    w_flips, w_moves, _, _ = headline_moves(judged)
    print(f"\ngate ({args.rules.name}, with the calibration) false alarms: {pct(g_alarms, len(pairs))} of ordered pairs")
    print(f"compare (runs analysed with the calibration) false alarms: {pct(c_alarms, len(pairs))} of ordered pairs")
    print(f"headline (with the calibration): {flips} faster↔slower flips, {pct(moves, n)} moves to/from not "
          f"distinguishable, {best} best-K changes over {n} verdict pairs (within-run intervals: {w_flips} flips, "
          f"{pct(w_moves, n)} moves)")
    bad |= checks and (flips > 0 or moves > 0.10 * max(n, 1))
    planted_sets: list[tuple[str, list[Path]]] = [("given", list(args.planted))] if args.planted else []
    if args.suite:
        planted_sets += [(f"{d:g} ms/step", make_runs(args.suite, args.planted_n, d)) for d in args.plant_delay_ms]
    if not planted_sets:
        print("power: not measured (give --planted DIR ... or --suite S --plant-delay-ms D ...)")
    smallest = None
    for label, pdirs in planted_sets:
        planted = [with_speed_noise(load_summary(d), cal) for d in pdirs]
        caught = sum(gate_fails(p, a, args.rules, cal) for p in planted for a in widened)
        total = len(planted) * len(widened)
        move = median_speedup_change(planted, judged)
        moved = "–" if move is None else f"{100 * move:+.1f} %"
        print(f"power, planted {label} (median speedup change {moved}): caught by gate in {pct(caught, total)} "
              "of pairs")
        if total and caught >= 0.9 * total and move is not None and (smallest is None or abs(move) < smallest):
            smallest = abs(move)
    print(needed_measurement(widened[1], widened[0], args.rules, cal))
    if planted_sets:
        print("smallest planted slowdown caught in ≥ 90 % of pairs: "
              + ("none" if smallest is None else f"{100 * smallest:.1f} % (median speedup change)"))
    bad |= checks and g_alarms > 0
    return 1 if bad and not args.smoke else 0


if __name__ == "__main__":
    sys.exit(main())
