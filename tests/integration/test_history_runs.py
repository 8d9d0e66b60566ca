"""History on real runs (issue 15): five runs of a small suite on real vLLM CPU (seeds 0-4)
stored into SQLite and into a real PostgreSQL server that the test starts; ``trend`` renders
the same numbers from both; adding a run twice is a no-op; a planted step fails
``gate --baseline history`` naming the group and the first run of the step.

The five runs share one engine (ngram on the tiny target, greedy and sampled), kept running
between them (``api.run(keep=...)``): one engine start, and runs 2-5 say ``kept_from`` run 1's log.
PostgreSQL comes from ``scripts/install.sh --test``; the test fails (never skips) without it.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from specbench import api
from specbench.cli import app
from specbench.regression.history import History, metrics_t, runs_t
from specbench.report import auto_digits, fmt_est

SUITE = """
name: history-smoke
targets:
  - name: tiny
    model: tiny
    dtype: float32
    max_model_len: 1024
    chat_template: false
    hardware: cpu
    engine_patches: [vllm-cpu-expand-float]
    methods:
      - method: ngram
        num_speculative_tokens: 3
datasets:
  - name: humaneval
    kind: humaneval
    limit: 48
sampling:
  temperatures: [0.0, 1.0]
  max_tokens: 24
  seed: {seed}
load:
  batch_sizes: [16]
"""
SEEDS = range(5)
GREEDY = "tiny/ngram/humaneval/T0/b16"
runner = CliRunner()


# --------------------------------------------------------------------------
# a throwaway PostgreSQL server: initdb + pg_ctl in a temp dir, unix socket only


def pg_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)),
                                       None)
    if not found:
        pytest.fail(f"PostgreSQL's {name} is not installed: run `bash scripts/install.sh --test` "
                    "(apt-get install postgresql)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """PostgreSQL refuses to run as root: as root the cluster belongs to the 'postgres' user (runuser)."""
    initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
    root = Path(tempfile.mkdtemp(prefix="specbench-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")  # created by Debian's postgresql package
        for p in (root, sock):
            os.chown(p, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]

    def run(*cmd: str) -> None:
        out = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"{' '.join(cmd)}: {out.stdout}\n{out.stderr}"

    port = _free_port()
    started = False
    try:
        run(initdb, "-D", str(data), "-A", "trust", "-U", "specbench", "--no-sync", "-E", "UTF8")
        run(pg_ctl, "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60", "-o",
            f"-k {sock} -p {port} -c listen_addresses='' -c fsync=off", "start")
        started = True
        yield f"postgresql+psycopg://specbench@/postgres?host={sock}&port={port}"
    finally:
        if started:
            subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True,
                           timeout=120)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def five_runs(tmp_path_factory, kept_engines) -> list[Path]:
    d = tmp_path_factory.mktemp("history-runs")
    runs = []
    for seed in SEEDS:
        (d / f"s{seed}.yaml").write_text(SUITE.format(seed=seed))
        runs.append(api.run(d / f"s{seed}.yaml", out=d / "results", keep=kept_engines))
    return runs


@pytest.mark.integration
def test_the_five_runs_share_one_engine(five_runs):
    from specbench.results import rundir

    engines = [rundir.read_manifest(r).engines for r in five_runs]
    assert all(len(e) == 1 and e[0].status == "started" for e in engines), engines
    kept_from = [e[0].describe.kept_from if e[0].describe else None for e in engines]
    # Run 1 started it (or took over one an earlier test's run left with the same arguments).
    first_log = kept_from[0] or str(five_runs[0] / "engines" / "tiny--ngram.log")
    assert kept_from[1:] == [first_log] * 4, kept_from
    assert Path(first_log).stat().st_size > 0
    assert f"its log: {first_log}" in (five_runs[3] / "engines" / "tiny--ngram.log").read_text()


def _counts(url: str) -> tuple[int, int]:
    with History(url) as h, h.engine.connect() as c:
        return tuple(c.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()  # type: ignore[return-value]
                     for t in (runs_t, metrics_t))


@pytest.mark.integration
def test_five_runs_into_sqlite_and_postgres_give_the_same_trend(five_runs, pg_url, tmp_path):
    summaries = [api.load_summary(r) for r in five_runs]
    for s in summaries:
        assert [g.status for g in s.groups] == ["ok", "ok"], [(g.group_id, g.reasons) for g in s.groups]
    # the seed reached the sampled cells: the runs really differ
    from specbench.results import rundir
    sampled = [{(r.prompt_id, r.sample_index): r.output_token_ids for r in rundir.read_requests(run) if "/T1/" in r.cell_id}
               for run in five_runs]
    assert any(sampled[0][k] != sampled[1][k] for k in sampled[0])

    sqlite_url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    md = {}
    for name, url in (("sqlite", sqlite_url), ("postgres", pg_url)):
        res = runner.invoke(app, ["history", "add", *map(str, five_runs), "--db", url])
        assert res.exit_code == 0 and res.output.count("added") == 5, res.output
        before = _counts(url)
        res = runner.invoke(app, ["history", "add", str(five_runs[2]), "--db", url])
        assert res.exit_code == 0 and "already stored" in res.output, res.output
        assert _counts(url) == before and before[0] == 5
        res = runner.invoke(app, ["trend", "--db", url, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        md[name] = (tmp_path / name / "trend-history-smoke.md").read_text()
        html = (tmp_path / name / "trend-history-smoke.html").read_text()
        assert html.count('src="data:image/png;base64,') == 2
    assert md["sqlite"] == md["postgres"]
    text = md["sqlite"]
    for s in summaries:  # every run's numbers, as its summary has them
        for g in s.groups:
            tps = fmt_est(g.output_tps, auto_digits(g.output_tps.value if g.output_tps else None))
            tau = fmt_est(g.tau, 2)  # τ has 2 decimals everywhere (the metric catalogue)
            rows = [ln for ln in text.splitlines() if ln.startswith(f"| {s.run_id} |") and tps in ln]
            # (a group with no τ in any run, e.g. ngram drafting nothing on sampled text, has no τ column)
            assert len(rows) == 1 and (g.tau is None or g.tau.value is None or tau in rows[0]), (g.group_id, tps, tau)
    with History(pg_url) as h:
        assert h.runs()[0].vllm_version and h.runs()[0].hardware_class.startswith("cpu:")


@pytest.mark.integration
def test_planted_step_fails_the_history_gate(five_runs, tmp_path):
    db = f"sqlite:///{tmp_path / 'history.sqlite'}"
    assert runner.invoke(app, ["history", "add", *map(str, five_runs), "--db", db]).exit_code == 0

    def copy(src: Path, n: int, tau_scale: float) -> Path:
        """A copy of a real run under a new id and a later date, τ of the greedy group scaled in its JSON."""
        dst = tmp_path / f"copy{n}"
        shutil.copytree(src, dst)
        man, summ = json.loads((dst / "manifest.json").read_text()), json.loads((dst / "summary.json").read_text())
        man["run_id"] = summ["run_id"] = f"{summ['run_id']}-copy{n}"
        man["created_at"] = f"2999-01-0{n}T00:00:00+00:00"
        for g in summ["groups"]:
            if g["group_id"] == GREEDY and tau_scale != 1.0:
                g["tau"].update({k: g["tau"][k] * tau_scale for k in ("value", "ci_low", "ci_high")})
        (dst / "manifest.json").write_text(json.dumps(man))
        (dst / "summary.json").write_text(json.dumps(summ))
        return dst

    unchanged = copy(five_runs[-1], 1, 1.0)
    res = runner.invoke(app, ["gate", str(unchanged), "--baseline", "history:5", "--db", db, "--no-step-summary"])
    assert res.exit_code == 0, res.output
    planted = copy(five_runs[-1], 2, 0.9)
    assert runner.invoke(app, ["history", "add", str(planted), "--db", db]).exit_code == 0
    new = copy(five_runs[-2], 3, 0.9)
    res = runner.invoke(app, ["gate", str(new), "--baseline", "history:5", "--db", db, "--no-step-summary"])
    assert res.exit_code == 1, res.output
    fails = [ln for ln in res.output.splitlines() if ln.startswith("- FAIL")]
    assert len(fails) == 1 and f"tau on {GREEDY}" in fails[0], res.output
    assert f"first seen in run {json.loads((planted / 'summary.json').read_text())['run_id']}" in fails[0]
