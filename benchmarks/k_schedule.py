"""The K sweep predicted from one run at the largest K, against the Ks the run measured (issue 37).

For every run given (``--runs DIR ...``; a cpu-smoke run measures EAGLE-3, P-EAGLE and DFlash at
K = 1 and K = 3), :func:`specbench.api.schedule` predicts τ(K) for K ≤ 3 from each K=3 group's
per-position acceptance (:mod:`specbench.analysis.k_prediction`) and this script prints, per
method, dataset and temperature, the τ predicted at K = 1 against the τ measured at K = 1, the
error and the check of issue 37: |predicted − measured| ≤ max(0.05, the measured interval's
half-width), asserted for autoregressive drafters (EAGLE-3, a draft model), stated for parallel
ones (P-EAGLE, DFlash, DSpark: their block may depend on K). Then the error per drafter kind
and, without ``--smoke``, the schedules (``num_speculative_tokens_per_batch_size``) per method.

Producing a run (not committed)::

    .venv/bin/specbench run suites/cpu-smoke.yaml --out /tmp/smoke --no-report
    python benchmarks/k_schedule.py --runs /tmp/smoke/cpu-smoke/<run-id>

``--smoke``: the whole path on the runs given (the tests' shared cpu-smoke run), the K = 1 table
and the error per drafter kind only. Exit status 1 when an autoregressive drafter misses the check
(0 with ``--smoke``: the tests' run is 2 prompts per cell).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from specbench import api
from specbench.report.markdown import md_blocks
from specbench.report.schedule_section import schedule_table


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", type=Path, required=True, help="run directories with a K sweep")
    p.add_argument("--k", type=int, default=1, help="the measured K to compare with (default 1)")
    p.add_argument("--smoke", action="store_true", help="the K table and the error per drafter kind only")
    args = p.parse_args()
    missed = 0
    for run in args.runs:
        with tempfile.TemporaryDirectory() as tmp:
            made, _ = api.schedule(run, Path(tmp) / "schedule.json")
        print(f"\n## {made.suite_name} {made.run_id}: τ at K={args.k} predicted from the largest K\n")
        print("| target | method | drafter | dataset | T | from | predicted | measured | error | tolerance | within |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        errors: dict[str, list[float]] = {}
        for pred in made.predictions:
            pt = next((x for x in pred.points if x.k == args.k and x.k != pred.source_k), None)
            if pt is None or pt.tau_error is None or pt.tolerance is None or pt.measured_tau is None:
                continue
            ok = abs(pt.tau_error) <= pt.tolerance
            missed += int(not ok and pred.drafter == "autoregressive")
            errors.setdefault(pred.drafter, []).append(pt.tau_error)
            print(f"| {pred.target} | {pred.method} | {pred.drafter} | {pred.dataset} | {pred.temperature:g} "
                  f"| K={pred.source_k} | {pt.tau.fmt(3)} | {pt.measured_tau.fmt(3)} | {pt.tau_error:+.3f} "
                  f"| {pt.tolerance:.3f} | {'yes' if ok else 'NO'} |")
        print()
        for kind, errs in sorted(errors.items()):
            mean_abs = sum(abs(e) for e in errs) / len(errs)
            print(f"{kind}: {len(errs)} comparisons, mean |error| {mean_abs:.3f}, "
                  f"max |error| {max(abs(e) for e in errs):.3f}, mean error {sum(errs) / len(errs):+.3f}")
        if not args.smoke:
            print("\n" + "\n".join(md_blocks([schedule_table(made)])))
    print(f"\nautoregressive drafters outside the tolerance: {missed}")
    return 1 if missed and not args.smoke else 0


if __name__ == "__main__":
    raise SystemExit(main())
