"""Every script under ``benchmarks/`` runs its whole path at the smallest size (``--smoke``), so a refactor
cannot break one unseen. Scripts that read runs get the session's shared cpu-smoke run; the others start the
fewest engines their path needs (listed per script). One subprocess per script, as a user starts it, two at
a time, the longest first (one script alone leaves a core idle most of its time: imports, engine starts, one
engine's cells), the Ray one alone after them; a smoke checks a path, not a speed (its speed checks accept
any value)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _table_rows(out: str, first_cell: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()
            if line.startswith(f"| {first_cell}")]


def check_aa_gate(out: str) -> None:
    # The shared run read twice: an A/A pair whose speed changes are exactly 0, so no alarm anywhere.
    # within-run intervals and with the calibration (floor 0: the same intervals): nothing outside either
    for metric in ("output_tps", "speedup", "speedup_ratio"):
        assert re.search(rf"^\| {metric} \| ±0\.00 % \| 0/[1-9]\d* \(0 %\) \| 0/[1-9]\d* \(0 %\) \|$", out, re.M), out
    assert "gate (gates.example.yaml, with the calibration) false alarms: 0/2 (0 %)" in out, out
    assert "0 faster↔slower flips" in out and "power: not measured" in out
    # what catching 15 % would take: a floor from the gate's own multiplicity (none calibrated here: 0)
    need = re.search(r"needs a speedup floor ≤ ±(\d+\.\d+) % \(calibrated: ±0\.00 %\)", out)
    assert need and 0 < float(need.group(1)) < 15, out


def check_client_overhead(out: str) -> None:
    rows = [r for r in _table_rows(out, "") if r and r[0].isdigit()]
    assert len(rows) == 4, out  # levels 1 and 2, one probe gap at the top level, the 4-token-chunk row
    assert {r[2] for r in rows} == {"1", "4"}
    assert all(r[-3] != "–" for r in rows), "vllm bench serve gave no ITL"


def check_cpu_binding(out: str) -> None:
    walls = {m.group(1): (float(m.group(2)), float(m.group(3))) for m in
             re.finditer(r"^(solo, bound|bound pair|unbound pair)\s+([\d.]+)\s+([\d.]+)$", out, re.M)}
    assert set(walls) == {"solo, bound", "bound pair", "unbound pair"}, out
    assert all(w > 0 for pair in walls.values() for w in pair)
    assert re.search(r"^bound pair / solo: [\d.]+, [\d.]+ \(check: at most 1.2: (yes|NO)\)$", out, re.M), out


def check_context_length(out: str) -> None:
    # The session's cpu-lengths run (test_context_length's): HumanEval at 128, 384, 768 and Spec-Bench at 64, 768.
    rows = [r for r in _table_rows(out, "") if r and r[0] in ("eagle3", "p-eagle")]
    assert {(r[0], int(r[1])) for r in rows} == {(m, n) for m in ("eagle3", "p-eagle") for n in (64, 128, 384, 768)}, out
    assert all(r[3] != "–" and r[5] != "–" for r in rows), out  # τ and step time at every length


def check_dflash_flip(out: str) -> None:
    r = json.loads(next(line for line in out.splitlines() if line.strip().startswith("{")))
    assert r["anchors"] > 0 and r["noncausal"]["tau_proxy"] >= 1 and r["causal"]["tau_proxy"] >= 1


def check_drafter_depth_probe(out: str) -> None:
    # one 2-layer DFlash trained 4 steps and served by vLLM: its row (kind, layers, steps, train s, loss, τ, 2|1,
    # 3|2, step ms) with a τ and a step time, so the deep drafter loaded and drafted
    rows = [r for r in _table_rows(out, "dflash") if len(r) == 9]
    assert [r[:3] for r in rows] == [["dflash", "2", "4"]], out
    assert float(rows[0][5]) >= 1 and float(rows[0][8]) > 0, out
    assert "conditional acceptance i|i-1 = accepted[i] / accepted[i-1]" in out, out


def check_early_stopping(out: str) -> None:
    n = int(re.search(r"early stopping: (\d+) cells × metrics", out).group(1))  # type: ignore[union-attr]
    assert n > 0
    assert re.search(r"^cpu-tour\s+tau\s+\d+\s+\d+", out, re.M), out


def check_equivalence_power(out: str) -> None:
    assert "## vLLM CPU, the teacher-forced samples of run" in out
    assert re.search(r"^exact: baseline at T \[\d+ tok\]", out, re.M), out
    assert re.search(r"^exact: tiny/eagle3-k3 at T \(run\) \[\d+ tok\]", out, re.M), out
    assert "False alarms vs the nominal level" in out and "Rejection rate" in out  # both sections


def check_executor_overhead(out: str) -> None:
    ratio = float(re.search(r"wall\(ray ×2\) / wall\(ray ×1\) = ([\d.]+)", out).group(1))  # type: ignore[union-attr]
    assert ratio > 0


def check_k_schedule(out: str) -> None:
    # τ at K=1 predicted from K=3 beside the measured K=1 of the shared run's sweep, per method
    rows = [r for r in _table_rows(out, "tiny ") if len(r) == 11]
    assert {r[1] for r in rows} >= {"eagle3", "p-eagle", "dflash"}, out
    for r in rows:
        assert r[5] == "K=3" and r[6] != "–" and r[7] != "–", r
        assert abs(float(r[6].split()[0]) - float(r[7].split()[0]) - float(r[8])) < 2e-3, r  # error = pred − meas
    assert re.search(r"^autoregressive: \d+ comparisons, mean \|error\| [\d.]+", out, re.M), out
    assert re.search(r"^autoregressive drafters outside the tolerance: \d+$", out, re.M), out


def check_parallel_vs_eagle3(out: str) -> None:
    for method in ("dflash", "p-eagle"):
        (row,) = _table_rows(out, method)
        assert int(re.search(r"\(n=(\d+)\)", row[1]).group(1)) > 0, row  # type: ignore[union-attr]


def check_ab_gate(out: str) -> None:
    assert "## A/A (identical arms): 1 invocation(s)" in out and "## planted slowdown (10% of every step, sleep)" in out, out
    rows = re.findall(r"^\| 1 \| (\d) \| (\d+) \| (\d+) \| \d+ \| [\d.]+ \| \d+ \| \d+ \| (\d+) / (\d+) \| "
                      r"(\d+) / (\d+) \|$", out, re.M)
    assert len(rows) == 2, out
    code, rounds, instances, tau_eq, groups, same, compared = rows[0]  # A/A: τ and outputs identical in each group
    assert code == "0" and rounds == "4" and instances == "2", out  # 4 rounds on 2 engine instances per arm
    assert tau_eq == groups == "1" and same == compared and int(compared) > 0, out
    assert rows[1][3] == rows[1][4] and rows[1][5] == rows[1][6], out  # a delay changes no token


def check_ab_decision_rule(out: str) -> None:
    assert "## single groups" in out and "## pooled per method" in out, out
    assert re.search(r"\| CS t-corrected α=0\.01, first verdict at 12 \| \d", out), out


def check_time_breakdown(out: str) -> None:
    assert ": recorded" in out and ": estimated" in out
    bd = json.loads(out[out.rindex("\n{") + 1:])
    assert bd["source"] == "estimated" and bd["wall_s"] > 0


def check_vllm_cpu_expand_bug(out: str) -> None:
    assert re.search(r"3\. engine \(as shipped\): \d+ verified positions", out), out
    patched = re.search(r"3\. engine \(patched\): (\d+) verified positions, (\d+) NaN", out)
    assert patched and int(patched.group(1)) > 0 and int(patched.group(2)) == 0, out


def check_zoo_target_levers(out: str) -> None:
    res = json.loads(out.strip().splitlines()[-1])
    assert res["train"]["steps"] == 4 and res["train"]["heldout_loss"] > 0, out
    assert {k: v["n"] for k, v in res["degeneracy"].items()} == {"gsm8k": 2, "humaneval": 2, "chat": 3}, out
    assert all(v["short"] == v["n"] for v in res["degeneracy"].values()), out  # 8 tokens: all short


def check_target_regime(out: str) -> None:
    rows = {r[0]: r for r in re.findall(r"^\| (trained|1024) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)}
    assert set(rows) == {"trained", "1024"}, out
    assert int(rows["1024"][1]) > int(rows["trained"][1]), out  # the widened copy carries more weight bytes
    assert "ms per MB of weights" in out, out


def check_goodput_cross_check(out: str) -> None:
    rows = {r[0].split(" (")[0]: r for r in _table_rows(out, "") if r[0].startswith(("specbench", "vllm bench"))}
    assert set(rows) == {"specbench", "vllm bench serve"}, out
    assert rows["specbench"][1] == rows["vllm bench serve"][1] == "4", out  # every request in both clients
    assert re.search(r"both shares inside the smaller run's interval: (yes|NO)$", out, re.M), out
    assert re.search(r"recomputed from records\.jsonl with vllm bench serve's definition: \d+ \(equal\)", out), out


#: script -> (extra arguments, given the shared run's directory; the check of its output)
SMOKES = {
    "ab_gate.py": (lambda run: [], check_ab_gate),  # 2 × specbench ab at once (2 engines each), B a layered env
    "ab_decision_rule.py": (lambda run: [], check_ab_decision_rule),  # no engine: the recorded A/A rounds
    "aa_gate.py": (lambda run: ["--runs", str(run)], check_aa_gate),  # no engine: the shared run, twice
    "client_overhead.py": (lambda run: [], check_client_overhead),  # no engine: a fake server
    "cpu_binding.py": (lambda run: [], check_cpu_binding),  # 4 engines, 2 at a time (bound pair, unbound pair)
    # no engine: prints the length groups of the session's cpu-lengths run (test_context_length's)
    "context_length.py": (lambda run: ["--runs", "{lengths_run}"], check_context_length),
    "dflash_flip_sensitivity.py": (lambda run: [], check_dflash_flip),  # PyTorch, no engine
    "drafter_depth_probe.py": (lambda run: [], check_drafter_depth_probe),  # trains 4 steps; 1 engine
    "early_stopping.py": (lambda run: ["--runs", str(run)], check_early_stopping),
    "equivalence_power.py": (lambda run: ["--vllm-run", str(run)], check_equivalence_power),  # no engine
    "executor_overhead.py": (lambda run: [], check_executor_overhead),
    "goodput_cross_check.py": (lambda run: [], check_goodput_cross_check),  # 1 vLLM server, 2 clients  # reference engine × (local, ray ×1, ×2)
    "k_schedule.py": (lambda run: ["--runs", str(run)], check_k_schedule),  # no engine: the shared run's K sweep
    "parallel_vs_eagle3.py": (lambda run: ["--runs", str(run)], check_parallel_vs_eagle3),
    "time_breakdown.py": (lambda run: [str(run)], check_time_breakdown),
    "target_regime.py": (lambda run: [], check_target_regime),  # 2 engines, one after the other
    "vllm_cpu_expand_bug.py": (lambda run: [], check_vllm_cpu_expand_bug),  # 1 engine, in-process
    "zoo_target_levers.py": (lambda run: ["--label", "smoke"], check_zoo_target_levers),  # PyTorch, no engine
}


def test_every_benchmark_has_a_smoke():
    assert sorted(p.name for p in (REPO / "benchmarks").glob("*.py")) == sorted(SMOKES)


#: The scripts that take longest alone (≥ 8 s here; 2026-12-06, s alone: ab_gate 43, drafter_depth_probe 42,
#: cpu_binding 32, goodput_cross_check 28, target_regime 18, vllm_cpu_expand_bug 13, zoo_target_levers 13,
#: client_overhead 13, dflash_flip_sensitivity 9; the others 1–5), started first, longest first, so that
#: the pair ends together.
LONGEST_FIRST = ["ab_gate.py", "drafter_depth_probe.py", "cpu_binding.py", "goodput_cross_check.py",
                 "target_regime.py", "vllm_cpu_expand_bug.py", "zoo_target_levers.py", "client_overhead.py",
                 "dflash_flip_sensitivity.py"]
#: Run after the others, alone: its local Ray instance once exited 1 after printing its table with another
#: smoke beside it (a clean clone, 2026-12-05; never alone), which no check here could explain.
ALONE = ["executor_overhead.py"]


def _smoke(script: str, args: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--smoke", *args],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )
    return proc, time.monotonic() - t0


@pytest.fixture(scope="module")
def smokes(smoke_run, lengths_run) -> dict[str, tuple[subprocess.CompletedProcess, float]]:
    """Every script's smoke and its wall time: two at a time, then ``ALONE`` by itself."""
    run_dir, lengths_dir = str(smoke_run[0]), str(lengths_run[0])

    def smoke(script: str) -> tuple[subprocess.CompletedProcess, float]:
        return _smoke(script, [lengths_dir if a == "{lengths_run}" else a for a in SMOKES[script][0](run_dir)])

    order = LONGEST_FIRST + sorted(set(SMOKES) - set(LONGEST_FIRST) - set(ALONE))
    with ThreadPoolExecutor(max_workers=2) as pairs:
        done = dict(zip(order, pairs.map(smoke, order), strict=True))
    return done | {script: smoke(script) for script in ALONE}


@pytest.mark.parametrize("script", sorted(SMOKES))
def test_benchmark_smoke(script: str, smokes: dict[str, tuple[subprocess.CompletedProcess, float]]) -> None:
    proc, seconds = smokes[script]
    print(f"{script} --smoke: {seconds:.1f} s ({'alone' if script in ALONE else 'beside another'})")
    assert proc.returncode == 0, f"{script} --smoke exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    SMOKES[script][1](proc.stdout)
