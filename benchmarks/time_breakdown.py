"""Where a run's wall time went: the breakdown table of a run directory (issue 16).

A run with a ``time_breakdown`` in its ``manifest.json`` (recorded by ``specbench run``) prints it;
one without (made before issue 16) gets one estimated from its files
(:func:`specbench.analysis.timing_estimate.run_spans`: ``cells.jsonl``, the engine logs, the files' times),
with the engines' start/warmup split and the teacher forcing's own engine start spelled out.

Run: ``python benchmarks/time_breakdown.py RUN_DIR [--reports DIR] [--estimate] [--json]``
(``--reports``: where its reports were written, default as ``specbench run`` puts them;
``--estimate``: estimate even when the manifest has a breakdown, to compare the two).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from specbench.analysis.timing import breakdown, fmt_duration
from specbench.analysis.timing_estimate import engine_spans, ready_times, run_spans
from specbench.engines.vllm_forks import FORK_HINT
from specbench.report.build import time_section
from specbench.report.markdown import md_blocks
from specbench.report.terminal import time_line
from specbench.results import rundir
from specbench.results.manifest import TimeBreakdown
from specbench.results.rundir import reports_dir_for


def estimate(run_dir: Path, reports: Path | None) -> TimeBreakdown:
    spans, wall, notes = run_spans(run_dir, reports if reports is not None else reports_dir_for(run_dir))
    return breakdown(spans, wall, source="estimated", notes=notes)


def teacher_forcing_detail(run_dir: Path) -> str | None:
    """How much of teacher forcing was starting its own engine (estimated: its log's ready line)."""
    span = next((s for s in engine_spans(run_dir) if s.phase == "teacher_forcing"), None)
    if span is None or span.engine is None:
        return None
    year = dt.datetime.fromtimestamp(span.start, dt.timezone.utc).year
    log = run_dir / "engines" / f"{span.engine}.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    ready = [t for t in ready_times(text, year) if span.start <= t <= span.end]
    if not ready:
        return None
    return (f"teacher forcing {fmt_duration(span.seconds)} (estimated): closing the last engine and starting its own "
            f"{fmt_duration(ready[0] - span.start)}, prefilling the samples {fmt_duration(span.end - ready[0])}")


def engine_lines(run_dir: Path) -> list[str]:
    """Per engine (estimated from the files): start, warmup and cells, and whether it was forked
    from a zygote (vLLM imported once for the run's engines) or spawned."""
    spans = engine_spans(run_dir)
    out = []
    for key in dict.fromkeys(s.engine for s in spans if s.engine is not None):
        mine = [s for s in spans if s.engine == key]

        def total(phase: str, mine: list = mine) -> float:
            return sum(s.seconds for s in mine if s.phase == phase)

        log = run_dir / "engines" / f"{key}.log"
        text = log.read_text(errors="replace") if log.is_file() else ""
        spare = "forked" if FORK_HINT in text else "own process" if text else "in-process"
        out.append(f"  {key:32} start {total('engine_start'):6.1f} s ({spare}), warmup {total('warmup'):5.1f} s, "
                   f"cells {total('cells'):6.1f} s" + (f", teacher forcing {total('teacher_forcing'):6.1f} s"
                                                       if total("teacher_forcing") else ""))
    return out


def show(run_dir: Path, bd: TimeBreakdown, as_json: bool) -> None:
    if as_json:
        print(json.dumps(bd.model_dump(mode="json"), indent=1))
        return
    print(f"{run_dir}: {bd.source}")
    print(f"time: {time_line(bd)}")
    detail = teacher_forcing_detail(run_dir)
    if detail:
        print(detail)
    print("per engine (estimated from the files):")
    print("\n".join(engine_lines(run_dir)))
    print()
    section = time_section(rundir.read_manifest(run_dir).model_copy(update={"time_breakdown": bd}))
    assert section is not None
    print("\n".join(md_blocks([section])))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--reports", type=Path, default=None, help="where the run's reports are")
    ap.add_argument("--estimate", action="store_true", help="estimate from the files even when recorded")
    ap.add_argument("--json", action="store_true", help="print the breakdown as JSON")
    ap.add_argument("--smoke", action="store_true",
                    help="every path on one run (the test command's shared run): the recorded breakdown, "
                    "the estimate from the files, and the estimate as JSON")
    args = ap.parse_args(argv)
    manifest = rundir.read_manifest(args.run_dir)
    recorded = manifest.time_breakdown
    if args.smoke:
        if not recorded:
            print(f"{args.run_dir}: no time_breakdown in manifest.json", file=sys.stderr)
            return 1
        show(args.run_dir, recorded, as_json=False)
        bd = estimate(args.run_dir, args.reports)
        show(args.run_dir, bd, as_json=False)
        show(args.run_dir, bd, as_json=True)
        return 0
    bd = (recorded if recorded and not args.estimate
          else estimate(args.run_dir, args.reports))
    show(args.run_dir, bd, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
