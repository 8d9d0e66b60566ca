"""History database (SQLite), gate against history, trend pages, old schemas (no engine).

Runs are built from the committed fixtures: ``summary_full.json`` copied
under new run ids and dates, with τ of one group changed through the JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from support.paths import FIXTURES
from typer.testing import CliRunner

from specbench.cli import app
from specbench.regression.gate_history import evaluate_history_gate, history_window, window_baseline
from specbench.regression.gate_rules import load_rules
from specbench.regression.history import History, groups_t, metrics_t, runs_t
from specbench.results.manifest import RunManifest
from specbench.results.migrations import (
    MANIFEST_SCHEMA_VERSION,
    SUMMARY_SCHEMA_VERSION,
    SchemaError,
    upgrade_summary,
)
from specbench.results.rundir import read_manifest
from specbench.results.summary import RunSummary

GROUP = "llama-3.1-8b/eagle3/gsm8k/T0/b1"
HW = {"platform": "Linux", "machine": "x86_64", "cpu": "Test CPU", "cpu_count": 2}


def make_run(root: Path, i: int, *, tau_scale: float = 1.0, group: str = GROUP, day: int | None = None) -> Path:
    """Run ``i`` of the fixture suite (date 2026-05-<day>), τ of ``group`` scaled by ``tau_scale``."""
    summary = json.loads((FIXTURES / "summary_full.json").read_text())
    manifest = json.loads((FIXTURES / "manifest_full.json").read_text())
    run_id = f"202605{day or i + 1:02d}T120000Z-r{i}"
    summary["run_id"] = manifest["run_id"] = run_id
    manifest.update(created_at=f"2026-05-{day or i + 1:02d}T12:00:00+00:00", git_commit=f"{i:040x}", hardware=HW)
    manifest.pop("hardware_class", None)
    for g in summary["groups"]:
        if g["group_id"] == group and tau_scale != 1.0:
            g["tau"] = {**g["tau"], **{k: g["tau"][k] * tau_scale for k in ("value", "ci_low", "ci_high")}}
    d = root / run_id
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'h.sqlite'}"


def counts(hist: History) -> tuple[int, ...]:
    with hist.engine.connect() as c:
        return tuple(c.execute(sa.select(sa.func.count()).select_from(t)).scalar_one() for t in (runs_t, groups_t, metrics_t))


def test_group_id_constant_matches_fixture() -> None:
    summary = RunSummary.load(json.loads((FIXTURES / "summary_full.json").read_text()))
    assert summary.group(GROUP) is not None and summary.group(GROUP).tau is not None  # type: ignore[union-attr]


def test_add_twice_changes_nothing_and_metrics_round_trip(tmp_path: Path, db: str) -> None:
    d = make_run(tmp_path / "runs", 0)
    with History(db) as hist:
        first = hist.add_run(d)
        before = counts(hist)
        again = hist.add_run(d)
        assert first.added and not again.added and counts(hist) == before
        assert before[0] == 1 and before[2] == first.n_metrics > 20
        summary = RunSummary.load(json.loads((d / "summary.json").read_text()))
        series = hist.series(hist.runs())
        for g in summary.groups:
            if g.status == "ok" and g.tau is not None and g.tau.value is not None:
                assert series[(g.group_id, "tau")][0].estimate == g.tau
            if g.status == "ok" and g.speedup is not None and g.speedup.value is not None:
                assert series[(g.group_id, "speedup")][0].estimate == g.speedup
        verdicts = {k: v[0].verdict for k, v in series.items() if k[1].startswith("equivalence.")}
        assert "divergent" in verdicts.values()
        run = hist.runs()[0]
        assert run.hardware_class == "cpu:Test CPU x2" and run.git_commit == f"{0:040x}"
        assert run.vllm_version == "0.32.0"


def test_every_older_fixture_loads_through_the_current_code(tmp_path: Path, db: str) -> None:
    olds = sorted((FIXTURES / "schema").glob("*.json"))
    assert {p.name for p in olds} >= {"summary_v1_full.json", "summary_v1_minimal.json", "manifest_v1_full.json",
                                      "manifest_v1_minimal.json"}
    for p in olds:
        data = json.loads(p.read_text())
        if p.name.startswith("summary"):
            s = RunSummary.load(data)
            assert s.schema_version == SUMMARY_SCHEMA_VERSION and s.groups
        else:
            m = RunManifest.load(data)
            assert m.schema_version == MANIFEST_SCHEMA_VERSION and m.run_id
    # schema 1's hand-made serving rows become typed Speedup rows; "agree" becomes "flag"
    full = RunSummary.load(json.loads((FIXTURES / "schema" / "summary_v1_full.json").read_text()))
    assert full.extra.serving and all(r.metric == "throughput" for r in full.extra.serving)  # type: ignore[union-attr]
    assert [r.flag for r in full.extra.cross_check] == [False, True]
    # and an old run goes into the history
    d = tmp_path / "old"
    d.mkdir()
    (d / "summary.json").write_text((FIXTURES / "schema" / "summary_v1_full.json").read_text())
    (d / "manifest.json").write_text((FIXTURES / "schema" / "manifest_v1_full.json").read_text())
    assert read_manifest(d).hardware_class.startswith("gpu:")
    with History(db) as hist:
        assert hist.add_run(d).added
        assert hist.runs()[0].run_id == "20260501T120000Z-full"


def test_newer_schema_is_refused() -> None:
    with pytest.raises(SchemaError, match="newer"):
        upgrade_summary({"schema_version": SUMMARY_SCHEMA_VERSION + 1, "groups": []})


def test_history_window_spec() -> None:
    assert history_window("history") == 5 and history_window("history:12") == 12
    assert history_window("results/x") is None and history_window("history:0") is None


def test_window_baseline_is_the_median_with_spread() -> None:
    from specbench.regression.history import Point, RunInfo
    from specbench.stats import Estimate

    run = RunInfo(run_id="r", suite="s", created_at="2026", hardware_class="cpu")
    pts = [Point(run=run, estimate=Estimate(value=v, ci_low=v - 0.1, ci_high=v + 0.1, n=8)) for v in (1, 2, 3, 10, 2)]
    b = window_baseline(pts)
    assert b is not None and b.value == 2.0 and b.n == 5
    assert b.ci_high - 2.0 == pytest.approx(1.96 * 1.4826 * 1.0)  # MAD of (1,2,3,10,2) around 2 is 1


def _history(tmp_path: Path, db: str, scales: list[float]) -> None:
    with History(db) as hist:
        for i, s in enumerate(scales):
            hist.add_run(make_run(tmp_path / "runs", i, tau_scale=s))


def gate_cli(new: Path, db: str, *extra: str, env: dict | None = None):
    # the fixture carries one divergent equivalence verdict in every run: not what these tests are about
    rules = new.parent / "rules.yaml"
    rules.write_text("rules: {equivalence: null}\n")
    return CliRunner().invoke(app, ["gate", str(new), "--baseline", "history:5", "--db", db, "--rules", str(rules),
                                    *extra], env=env)


def test_planted_step_fails_the_gate_naming_group_and_first_run(tmp_path: Path, db: str) -> None:
    # five unchanged runs, then a run whose τ on one group is 10% lower (the step), stored
    _history(tmp_path, db, [1.0, 1.0, 1.0, 1.0, 1.0, 0.9])
    new = make_run(tmp_path / "new", 6, tau_scale=0.9)
    summary_file = tmp_path / "step-summary.md"
    res = gate_cli(new, db, env={"GITHUB_STEP_SUMMARY": str(summary_file)})
    assert res.exit_code == 1, res.output
    assert f"FAIL tau on {GROUP}" in res.output
    assert "first seen in run 20260506T120000Z-r5" in res.output
    assert "FAIL tau on" in summary_file.read_text()
    with History(db) as hist:
        result = evaluate_history_gate(RunSummary.load(json.loads((new / "summary.json").read_text())),
                                       read_manifest(new), hist, 5, load_rules(new.parent / "rules.yaml"))
    failing = [(c.group_id, c.metric, c.first_run) for c in result.failures]
    assert failing == [(GROUP, "tau", "20260506T120000Z-r5")]


def test_unchanged_run_passes_and_a_new_step_names_the_new_run(tmp_path: Path, db: str) -> None:
    _history(tmp_path, db, [1.0] * 5)
    res = gate_cli(make_run(tmp_path / "new", 6), db, "--no-step-summary")
    assert res.exit_code == 0, res.output
    assert "PASS" in res.output and "history: per metric, the median of the last 5 runs" in res.output
    res = gate_cli(make_run(tmp_path / "new2", 7, tau_scale=0.9), db, "--no-step-summary")
    assert res.exit_code == 1 and "first seen in this run 20260508T120000Z-r7" in res.output, res.output


def test_gate_history_without_runs_is_bad_input(tmp_path: Path, db: str) -> None:
    res = gate_cli(make_run(tmp_path / "new", 0), db)
    assert res.exit_code == 2 and "no earlier run" in res.output


def test_cli_history_add_and_trend(tmp_path: Path, db: str) -> None:
    dirs = [make_run(tmp_path / "runs", i, tau_scale=0.9 if i >= 4 else 1.0) for i in range(6)]
    runner = CliRunner()
    res = runner.invoke(app, ["history", "add", *map(str, dirs), "--db", db])
    assert res.exit_code == 0 and res.output.count("added") == 6, res.output
    res = runner.invoke(app, ["history", "add", str(dirs[0]), "--db", db])
    assert "already stored" in res.output
    res = runner.invoke(app, ["trend", "--db", db, "--out", str(tmp_path / "trend")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "trend" / "trend-gsm8k-gpu.md").read_text()
    html = (tmp_path / "trend" / "trend-gsm8k-gpu.html").read_text()
    # τ with the catalogue's 2 decimals (trend had 3 before the catalogue)
    assert f"| {GROUP} | tau | 2.56 [2.51, 2.62] | 2.56 [2.51, 2.62] | +0.0% | REGRESSION 2.85 → 2.565 from " \
           "20260505T120000Z-r4 |" in md
    assert md.count("| 20260501T120000Z-r0 |") >= 6  # one row per group table
    assert "| llama-3.1-8b/p-eagle/humaneval/T0/b8 | equivalence.overall | divergent | divergent | – | – |" in md
    assert html.count('src="data:image/png;base64,') == 12  # one figure per measured group
    assert 'class=bad' in html


def test_metric_in_fewer_than_half_the_window_has_no_baseline(tmp_path: Path, db: str) -> None:
    """A metric measured now and then (e.g. τ of a group that drafted in one run of five) is not gated."""
    flaky = "llama-3.1-8b/p-eagle/gsm8k/T0/b1"
    with History(db) as hist:
        for i in range(5):
            d = make_run(tmp_path / "runs", i)
            if i:  # τ measured in the first run only
                s = json.loads((d / "summary.json").read_text())
                for g in s["groups"]:
                    if g["group_id"] == flaky:
                        g["tau"] = None
                (d / "summary.json").write_text(json.dumps(s))
            hist.add_run(d)
    new = make_run(tmp_path / "new", 5)
    s = json.loads((new / "summary.json").read_text())
    for g in s["groups"]:
        if g["group_id"] == flaky:
            g["tau"] = None
    (new / "summary.json").write_text(json.dumps(s))
    res = gate_cli(new, db, "--no-step-summary")
    assert res.exit_code == 0, res.output
    assert f"tau on {flaky}" not in res.output


def test_gate_and_compare_with_a_run_directory_write_the_step_summary(tmp_path: Path) -> None:
    base, new = make_run(tmp_path / "runs", 0), make_run(tmp_path / "runs", 1, tau_scale=0.9)
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules: {equivalence: null}\n")
    out = tmp_path / "summary.md"
    res = CliRunner().invoke(app, ["gate", str(new), "--baseline", str(base), "--rules", str(rules)],
                             env={"GITHUB_STEP_SUMMARY": str(out)})
    assert res.exit_code == 1 and f"FAIL tau on {GROUP}" in res.output, res.output
    res = CliRunner().invoke(app, ["compare", str(new), "--baseline", str(base)], env={"GITHUB_STEP_SUMMARY": str(out)})
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert text.index("## specbench gate: FAIL") < text.index(GROUP) and "compare" in text.lower()
    before = out.read_text()
    CliRunner().invoke(app, ["compare", str(new), "--baseline", str(base), "--no-step-summary"],
                       env={"GITHUB_STEP_SUMMARY": str(out)})
    assert out.read_text() == before


def test_compare_takes_the_baseline_as_gate_does_and_the_old_form_still_works(tmp_path: Path) -> None:
    """``compare NEW --baseline BASE`` (as ``gate``); ``compare BASE NEW`` gives the same, with a deprecation note."""
    base, new = make_run(tmp_path / "runs", 0), make_run(tmp_path / "runs", 1, tau_scale=0.9)
    runner = CliRunner()
    new_form = runner.invoke(app, ["compare", str(new), "--baseline", str(base), "--no-step-summary"])
    old_form = runner.invoke(app, ["compare", str(base), str(new), "--no-step-summary"])
    swapped = runner.invoke(app, ["compare", str(base), "--baseline", str(new), "--no-step-summary"])
    assert new_form.exit_code == old_form.exit_code == swapped.exit_code == 0, (new_form.output, old_form.output)
    assert GROUP in new_form.stdout and new_form.stdout == old_form.stdout != swapped.stdout
    assert new_form.stderr == "" and swapped.stderr == ""
    assert "`compare BASE NEW` is deprecated" in old_form.stderr
    assert f"specbench compare {new} --baseline {base}" in old_form.stderr.replace("\n", "")
    for args in (["compare", str(new)], ["compare", str(base), str(new), "--baseline", str(base)]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and "give the new run and --baseline BASE" in res.stderr, res.output


def test_checkpoints_name_the_speculator_and_what_the_engine_loaded(tmp_path: Path, db: str) -> None:
    d = tmp_path / "rec"
    import shutil

    shutil.copytree(FIXTURES / "recorded", d)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["plan"]["engines"][1]["method"]["speculator"] = "tiny:eagle3"
    manifest["engines"][1]["describe"]["llm_kwargs"]["speculative_config"]["model"] = "~/.cache/x/eagle3"
    (d / "manifest.json").write_text(json.dumps(manifest))
    from specbench import api

    api.analyze(d)
    with History(db) as hist:
        assert hist.add_run(d).added
        groups = hist.groups([manifest["run_id"]])
    assert groups["tiny/ngram/humaneval/T0/b4"]["checkpoint"] == "tiny:eagle3 (~/.cache/x/eagle3)"
    assert groups["tiny/baseline/humaneval/T0/b4"]["checkpoint"] is None


def test_history_add_analyzes_a_run_without_its_summary(tmp_path: Path, db: str) -> None:
    import shutil

    d = tmp_path / "rec"
    shutil.copytree(FIXTURES / "recorded", d)
    assert not (d / "summary.json").exists()
    res = CliRunner().invoke(app, ["history", "add", str(d), "--db", db])
    assert res.exit_code == 0 and "added" in res.output, res.output
    assert (d / "summary.json").exists()


def test_an_ab_run_stores_its_verdicts_tau_and_identity(tmp_path: Path, db: str) -> None:
    from specbench.analysis.ab_decision import ABRule, ABVerdict
    from specbench.analysis.ab_rounds import ABResult, GroupExact
    from specbench.stats import Estimate

    run = make_run(tmp_path, 0)
    g = "tiny/baseline/humaneval/T0/b1"
    verdict = ABVerdict(metric="tpot_s", verdict="different", ratio=Estimate(value=1.09, ci_low=1.035, ci_high=1.146,
                        n=19, method="cs"), rounds=19, margin=0.03, alpha=0.01, spread=0.05, more_rounds_help=False,
                        rounds_to_decide=None)
    pooled = verdict.model_copy(update={"verdict": "undecided", "groups": 2})
    ab = ABResult(rule=ABRule(), metrics=["tpot_s"], groups=[verdict], group_ids=[g], pooled=[pooled],
                  pooled_ids=["tiny/baseline"], exact=[GroupExact(group=g, tau_a=None, tau_b=None, identical=3, compared=4)],
                  rounds_run=24)
    (run / "ab.json").write_text(ab.model_dump_json())
    with History(db) as hist:
        assert hist.add_run(run).added
        with hist.engine.connect() as c:
            rows = {(r.group_id, r.metric): r for r in c.execute(sa.select(metrics_t).where(metrics_t.c.metric.like("ab.%")))}
            kinds = dict(c.execute(sa.select(groups_t.c.group_id, groups_t.c.method_kind)).all())
    got = rows[(f"ab:{g}", "ab.tpot_s")]
    assert (got.value, got.ci_low, got.ci_high, got.n, got.verdict) == (1.09, 1.035, 1.146, 19, "different")
    assert rows[("ab:tiny/baseline (pooled)", "ab.tpot_s")].verdict == "undecided"
    assert rows[(f"ab:{g}", "ab.identical")].value == 0.75 and rows[(f"ab:{g}", "ab.identical")].n == 4
    assert kinds[f"ab:{g}"] == kinds["ab:tiny/baseline (pooled)"] == "ab"
    res = CliRunner().invoke(app, ["trend", "--db", db, "--out", str(tmp_path / "trend")])
    assert res.exit_code == 0, res.output
    md = "".join(p.read_text() for p in (tmp_path / "trend").glob("*.md"))
    assert f"ab:{g}" in md and "different" in md, md
