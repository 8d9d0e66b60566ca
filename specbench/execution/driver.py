"""The driver: turns a plan into engine jobs, hands them to an executor and is
the only writer of the run's files.

Each engine config becomes one job (its cells, their prepared prompts and
resume skip-sets); sampled equivalence adds one teacher-forcing job per
target once the cells are done. Executors (:mod:`specbench.execution.executors`) run
the jobs wherever they run and stream back typed events
(:mod:`specbench.execution.jobs`); every request record is appended to
``records.jsonl`` the moment its event arrives and a cell's ``CellRecord``
when it ends (ok, skipped or failed), so resume and crash isolation hold
whatever executes the jobs. A job that ends abnormally (its worker or node
died) fails the cells it left unfinished, with the reason.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from specbench import datasets
from specbench.analysis.metrics import complete_conversations
from specbench.config.plan import Cell, EngineConfig, Plan, RunDecisions
from specbench.config.suite import TargetSpec
from specbench.engines.factory import engine_gpus, resolve_engine, target_model_path
from specbench.engines.loadgen import LoadProfile
from specbench.errors import SpecbenchError
from specbench.execution.executors import Executor
from specbench.execution.executors.local import LocalExecutor
from specbench.execution.jobs import (
    CellDone,
    CellStarted,
    CellWork,
    EngineJob,
    EngineState,
    JobEnded,
    PhaseTimed,
    RequestDone,
    ScoresDone,
)
from specbench.execution.teacher_forcing import (
    SCORE_BATCH,
    teacher_forcing_engine,
    teacher_forcing_work,
)
from specbench.execution.worker import now_iso, warmup_requests
from specbench.results import rundir
from specbench.results.records import CellRecord, RequestRecord
from specbench.results.requests import (
    CellRequest,
    PreparedPrompt,
    SamplingRequest,
    ScoreItem,
    ScoreRow,
    StoredPrompt,
)
from specbench.results.rundir import JsonlAppender, read_cells, read_requests, write_prompts
from specbench.settings import settings


class RunProgress(BaseModel):
    """What the driver tells a progress display: an engine starting, a cell starting or
    ending (``cell_<status>``), a request recorded; ``cell`` where one is concerned."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["engine_start", "cell_start", "request", "cell_ok", "cell_failed", "cell_skipped"]
    cell: Cell | None = None
    message: str = ""


Progress = Callable[[RunProgress], None]


def detect_platform() -> str:
    """'cuda' when a CUDA device is visible to torch, else 'cpu'."""
    forced = settings().platform
    if forced:
        return forced
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def sampling_for(run: RunDecisions, cell: Cell) -> SamplingRequest:
    """What an engine samples for ``cell`` (the planner decided it per temperature)."""
    at = run.sampling_at(cell.temperature)
    return SamplingRequest(
        temperature=cell.temperature,
        max_tokens=run.max_tokens,
        top_p=run.top_p,
        seed=run.seed,
        samples_per_prompt=at.samples_per_prompt,
        logprobs=at.logprobs,
    )


class RunRefused(SpecbenchError, ValueError):
    """The jobs cannot run where they were sent (e.g. a local path a cluster's workers cannot see);
    raised with the list of lines to show."""


class Runner:
    def __init__(
        self,
        plan: Plan,
        run_dir: Path,
        run_id: str,
        *,
        limit: int | None = None,
        progress: Progress | None = None,
        platform: str | None = None,
        assets_factory: Callable[[], Any] | None = None,
        executor: Executor | None = None,
    ):
        self.plan = plan
        self.run_plan = plan.decisions()  # everything decided from the suite besides the cells
        self.run_dir = run_dir
        self.run_id = run_id
        self.limit = limit
        self.progress = progress or (lambda event: None)
        self.platform = platform or detect_platform()
        self.assets_factory = assets_factory
        self.executor: Executor = executor or LocalExecutor()
        self._prompts: dict[tuple[str, bool, str], list[PreparedPrompt]] = {}
        self._tokenizers: dict[str, Any] = {}
        self._cells = {c.cell_id: c for c in plan.cells}
        self.engine_status: dict[str, dict[str, Any]] = {}
        self.phases: list[PhaseTimed] = []  # engine starts, warmups, cells, teacher forcing
        self._round_records: list[RequestRecord] | None = None  # an earlier attempt's, read once (headline)
        self._jobs: dict[str, EngineJob] = {}
        self._ended_cells: set[str] = set()
        self._records: JsonlAppender | None = None
        self._cells_out: JsonlAppender | None = None
        self._scores_out: JsonlAppender | None = None

    # -- data ---------------------------------------------------------------

    def prompts(self, cell: Cell) -> list[PreparedPrompt]:
        """The prompts of a cell's dataset (prepared once per dataset and chat mode; a dataset with
        ``input_tokens`` once per target, for its tokenizer, and only the cell's length)."""
        run = self.run_plan
        spec = run.dataset(cell.dataset)
        target = self.plan.target(cell.target)
        key = (cell.dataset, target.chat_template, target.name if spec.input_tokens else "")
        if key not in self._prompts:
            base = Path(run.dataset_base) if run.dataset_base is not None else Path.cwd()
            tok = self._tokenizer(target) if spec.input_tokens else None
            ps = datasets.prepare(spec, base, chat=target.chat_template, tokenizer=tok,
                                  template_kwargs=target.chat_template_kwargs)
            if self.limit and spec.input_tokens:  # the first prompts of each length
                ps = [p for n in spec.input_tokens for p in [q for q in ps if q.meta["input_tokens"] == n][: self.limit]]
            elif self.limit:
                ps = ps[: self.limit]
            self._prompts[key] = ps
        ps = self._prompts[key]
        return ps if cell.input_tokens is None else [p for p in ps if p.meta["input_tokens"] == cell.input_tokens]

    def _tokenizer(self, target: TargetSpec) -> Any:
        """The target's own tokenizer (prompts of given token lengths are built for it)."""
        if target.name not in self._tokenizers:
            from transformers import AutoTokenizer

            self._tokenizers[target.name] = AutoTokenizer.from_pretrained(target_model_path(target, self.assets_factory))
        return self._tokenizers[target.name]

    def _write_prompts(self) -> None:
        """``prompts.jsonl``: every prompt with its dataset and reference (for scoring)."""
        seen: set[tuple[str, str]] = set()
        rows = []
        for (dataset, _chat, _target), prompts in self._prompts.items():
            for p in prompts:
                if (dataset, p.prompt_id) in seen:
                    continue
                seen.add((dataset, p.prompt_id))
                rows.append(StoredPrompt(dataset=dataset, **p.model_dump()))
        write_prompts(self.run_dir, rows)

    def _resume_state(self) -> tuple[set[str], dict[str, list[RequestRecord]]]:
        """Cells already finished (ok or skipped) and records of unfinished ones."""
        if not rundir.has_cells(self.run_dir):
            return set(), {}
        latest: dict[str, CellRecord] = {}
        for c in read_cells(self.run_dir):
            latest[c.cell_id] = c
        done = {cid for cid, c in latest.items() if c.status in ("ok", "skipped")}
        partial: dict[str, list[RequestRecord]] = defaultdict(list)
        for r in read_requests(self.run_dir):
            if r.cell_id not in done:
                partial[r.cell_id].append(r)
        return done, partial

    # -- jobs ---------------------------------------------------------------

    def _cell_request(self, cell: Cell, earlier: list[RequestRecord]) -> CellWork:
        prompts = self.prompts(cell)
        subset = self.run_plan.sampling_at(cell.temperature).prompt_limit
        if subset is not None:
            prompts = prompts[:subset]  # the sampled-equivalence cells take the first N prompts
        # Errored requests (server died, timeout) are tried again; their records stay as attempts.
        # A conversation counts only complete and without error; any other is redone whole.
        earlier = complete_conversations(earlier)
        redo = {r.conversation_id for r in earlier if r.error is not None and r.conversation_id is not None}
        earlier = [r for r in earlier if r.error is None and (r.conversation_id is None or r.conversation_id not in redo)]
        request = CellRequest(
            run_id=self.run_id, cell=cell, prompts=prompts, sampling=sampling_for(self.run_plan, cell),
            skip={(r.prompt_id, r.sample_index) for r in earlier},
        )
        work = CellWork(request=request, earlier_requests=len(earlier), earlier_counters=[r.spec for r in earlier])
        if cell.stop is not None:
            work.earlier_records = earlier
            work.dataset_kind = self.run_plan.dataset(cell.dataset).kind
            work.order_seed = self.run_plan.seed
        return work

    def _headline_fields(self, cfg: EngineConfig, cells: list[Cell]) -> dict[str, Any]:
        """A vLLM engine's part in the headline's speed rounds (the plan's ``headline``): the spec, the target's
        reference method and what an earlier attempt measured in rounds on its cells."""
        spec = self.run_plan.headline
        if spec is None or cfg.target.engine == "reference" or self.run_plan.rounds < 2:
            return {}
        ids = {c.cell_id for c in cells}
        if self._round_records is None:
            self._round_records = [r for r in read_requests(self.run_dir, speed_rounds=True) if r.round is not None] \
                if rundir.has_cells(self.run_dir) else []
        return {"headline": spec, "headline_reference": self.run_plan.reference_of.get(cfg.target.name),
                "round_records": [r for r in self._round_records if r.cell_id in ids]}

    def _recorded_caps(self, work: CellWork) -> CellWork:
        """``replay: recorded``: each replayed turn's max_tokens is its recorded reply's length in the
        target's tokens (the reply is the prompt's reference)."""
        prompts = work.request.prompts
        if not any(p.turn is not None and p.reference is not None for p in prompts):
            return work
        tok = self._tokenizer(self.plan.target(work.request.cell.target))
        capped = [p.model_copy(update={"max_tokens": max(1, len(tok.encode(p.reference, add_special_tokens=False)))})
                  if p.turn is not None and p.reference is not None else p for p in prompts]
        work.request = work.request.model_copy(update={"prompts": capped})
        return work

    def _needs_pairs(self) -> bool:
        """Speedup stop rules: baselines run first, their records go to the paired cells' jobs."""
        return any(c.stop is not None and c.stop.metric == "speedup" for c in self.plan.cells)

    def _pair(self, jobs: list[EngineJob]) -> None:
        """Give every speculative cell with a speedup stop rule its baseline cell's records (now on disk)."""
        by_cell: dict[str, list[RequestRecord]] = defaultdict(list)
        for r in read_requests(self.run_dir):
            by_cell[r.cell_id].append(r)
        baseline_of = {(c.baseline_group_key, c.repeat): c.cell_id for c in self.plan.cells if c.method_kind == "baseline"}
        for job in jobs:
            for w in job.cells:
                c = w.request.cell
                if c.stop is not None and c.stop.metric == "speedup" and c.k is not None:
                    base = baseline_of.get((c.baseline_group_key, c.repeat))
                    w.paired = by_cell.get(base, []) if base is not None else None

    def _load(self) -> LoadProfile:
        # The load shape comes from each cell (concurrency in batch_size, or a Poisson
        # request_rate capped at batch_size in flight); these are the bounds, warmup and
        # seed every cell shares (see LoadProfile.for_cell).
        bounds = self.run_plan.load
        return LoadProfile(
            num_requests=bounds.num_requests,
            duration_s=bounds.duration_s,
            warmup_requests=bounds.warmup_requests,
            seed=self.run_plan.seed,
            request_timeout_s=settings().request_timeout,
        )

    def cell_jobs(self, done: set[str], partial: dict[str, list[RequestRecord]]) -> list[EngineJob]:
        """One job per engine with cells left; an engine that cannot even be resolved fails its cells here."""
        jobs = []
        for cfg in self.plan.engines:
            todo = [c for c in self.plan.cells_for(cfg.key) if c.cell_id not in done]
            if not todo:
                self.engine_status[cfg.key] = {"status": "done earlier"}
                continue
            try:
                res = resolve_engine(cfg, self.platform, self.assets_factory)
            except Exception as exc:  # noqa: BLE001 - a bad checkpoint/asset fails this engine only
                self._fail_cells(cfg.key, todo, f"cannot prepare engine: {type(exc).__name__}: {exc}")
                continue
            works = [self._recorded_caps(self._cell_request(c, partial.get(c.cell_id, [])))
                     for c in todo]
            jobs.append(EngineJob(
                job_id=cfg.key, run_id=self.run_id, run_dir=str(self.run_dir), platform=self.platform, engine=res,
                load=self._load() if cfg.target.engine == "vllm-server" else None, cells=works,
                # The reference simulator's time is not a vLLM measurement: nothing to warm up.
                warmup=warmup_requests([w.request for w in works])
                if self.run_plan.warmup and cfg.target.engine != "reference" else [],
                gpus=engine_gpus(cfg, self.platform),
                # Speed rounds: vLLM engines only (the reference simulator's time is not a measurement).
                rounds=self.run_plan.rounds if cfg.target.engine != "reference" else 1, round_seed=self.run_plan.seed,
                instances=self.run_plan.instances if cfg.target.engine != "reference" else 1,
                **self._headline_fields(cfg, todo),
            ))
        if isinstance(self.executor, LocalExecutor):
            jobs = self._teacher_forcing_on_baselines(jobs)
            # On CPU a zygote imports vLLM once for the offline engines of one environment that follow
            # (they are forked from it); a scorer of its own starts after the cells of a target with
            # sampled cells and no baseline doing the teacher forcing.
            forced = {j.engine.config.target.name for j in jobs if j.teacher_forcing_after}
            scorer_follows = self.run_plan.teacher_forcing and any(
                c.temperature > 0 and c.target not in forced for c in self.plan.cells)
            kept_runs = self.executor.kept is not None  # a keeper's later runs fork theirs from it too
            for i, job in enumerate(jobs):
                later = jobs[i + 1 :]
                job.offline_engine_follows = self.platform == "cpu" and job.engine.config.target.engine == "vllm-offline" \
                    and (scorer_follows or kept_runs or any(j.engine.config.target.engine == "vllm-offline"
                                                            and j.engine.env == job.engine.env for j in later))
        return jobs

    def _teacher_forcing_on_baselines(self, jobs: list[EngineJob]) -> list[EngineJob]:
        """Local runs with a sampled test: each target's vLLM baseline runs last, started with
        full-vocabulary logprobs, and teacher-forces its target's outputs once its cells are done
        (no engine start of its own). Not with speedup stop rules (baselines run first there)."""
        if not self.run_plan.teacher_forcing or self._needs_pairs():
            return jobs
        late = []
        for job in jobs:
            cfg = job.engine.config
            if cfg.method.method == "baseline" and cfg.target.engine == "vllm-offline" and cfg.speculative_config is None:
                job.teacher_forcing_after = True
                job.engine.engine_kwargs["max_logprobs"] = -1
                late.append(job)
        self.executor.follow_up = self._follow_up  # type: ignore[attr-defined]
        late_ids = {j.job_id for j in late}
        return [j for j in jobs if j.job_id not in late_ids] + late

    def _follow_up(self, job: EngineJob) -> list[ScoreItem]:
        """The target's not-yet-scored sampled outputs (every job of the target has run)."""
        self.progress(RunProgress(kind="engine_start", message=f"teacher forcing on {job.job_id} (already up)"))
        try:
            work = teacher_forcing_work(self.run_dir, self.plan)
        except Exception as exc:  # noqa: BLE001 - the teacher-forcing job after the cells reports it
            self._scores([ScoreRow(target=None, error=f"cannot read records: {type(exc).__name__}: {exc}")])
            return []
        return work.get(job.engine.config.target.name, [])

    def teacher_forcing_jobs(self) -> list[EngineJob]:
        try:
            work = teacher_forcing_work(self.run_dir, self.plan)
        except Exception as exc:  # noqa: BLE001 - recorded, not raised
            self._scores([ScoreRow(target=None, error=f"cannot read records: {type(exc).__name__}: {exc}")])
            return []
        jobs = []
        for target, items in work.items():
            try:
                res = teacher_forcing_engine(self.plan, target, self.platform)
            except Exception as exc:  # noqa: BLE001
                self._scores([ScoreRow(target=target, error=f"teacher-forcing engine did not start: {exc}")])
                continue
            jobs.append(EngineJob(
                job_id=res.config.key, kind="teacher_forcing", run_id=self.run_id, run_dir=str(self.run_dir),
                platform=self.platform, engine=res, score_items=items, score_batch=SCORE_BATCH,
                gpus=engine_gpus(res.config, self.platform),
            ))
        return jobs

    # -- execution ----------------------------------------------------------

    def run(self) -> None:
        # Load every dataset first: a bad dataset is bad input, found before any engine starts.
        for c in self.plan.cells:
            self.prompts(c)
        self._write_prompts()
        done, partial = self._resume_state()
        self._records = rundir.records_appender(self.run_dir)
        self._cells_out = rundir.cells_appender(self.run_dir)
        try:
            jobs = self.cell_jobs(done, partial)
            problems = self.executor.check(jobs)
            if self.run_plan.rounds > 1 and not isinstance(self.executor, LocalExecutor):
                problems.append(f"rounds: {self.run_plan.rounds} keeps a target's engines up together and alternates "
                                "them in one process: use the local executor (or rounds: 1)")
            if problems:
                raise RunRefused(problems)
            if self._needs_pairs():
                first = [j for j in jobs if j.engine.config.method.method == "baseline"]
                self._execute(first)
                rest = [j for j in jobs if j.engine.config.method.method != "baseline"]
                self._pair(rest)
                self._execute(rest)
            else:
                self._execute(jobs)
            if self.run_plan.teacher_forcing:
                self.progress(RunProgress(kind="engine_start", message="teacher forcing (target without speculation)"))
                self._execute(self.teacher_forcing_jobs())
        except BaseException:
            self.executor.shutdown()  # a stop signal, or a bug: no engine outlives the run
            raise
        finally:
            self.executor.shutdown()
            for out in (self._records, self._cells_out, self._scores_out):
                if out is not None:
                    out.close()

    def _execute(self, jobs: list[EngineJob]) -> None:
        for job in jobs:
            self._jobs[job.job_id] = job
        self.executor.run(jobs, self.on_event)

    # -- events (the single writer) -----------------------------------------

    def on_event(self, ev: Any) -> None:
        if isinstance(ev, RequestDone):
            assert self._records is not None
            self._records.append(ev.record)
            self.progress(RunProgress(kind="request", cell=self._cells.get(ev.record.cell_id), message=ev.record.prompt_id))
        elif isinstance(ev, CellDone):
            assert self._cells_out is not None
            self._cells_out.append(ev.record)
            self._ended_cells.add(ev.record.cell_id)
            self.progress(RunProgress(kind=f"cell_{ev.record.status}", cell=self._cells.get(ev.record.cell_id),
                                      message=ev.record.reason or ""))
        elif isinstance(ev, CellStarted):
            self.progress(RunProgress(kind="cell_start", cell=self._cells.get(ev.cell_id), message=f"{ev.prompts} prompts"))
        elif isinstance(ev, EngineState):
            self._engine_state(ev)
        elif isinstance(ev, ScoresDone):
            self._scores(ev.rows)
        elif isinstance(ev, PhaseTimed):
            self.phases.append(ev)
        elif isinstance(ev, JobEnded) and ev.error is not None:
            job = self._jobs.get(ev.job_id)
            self.engine_status.setdefault(ev.job_id, {})
            self.engine_status[ev.job_id].update(status="failed", reason=ev.error)
            if job is not None and job.kind == "cells":
                left = [self._cells[c] for c in job.cell_ids if c not in self._ended_cells]
                self._fail_cells(job.job_id, left, ev.error)
            elif job is not None:
                self._scores([ScoreRow(target=job.engine.config.target.name, error=ev.error)])

    def _engine_state(self, ev: EngineState) -> None:
        status = self.engine_status.setdefault(ev.job_id, {})
        if ev.placement is not None:
            status["placement"] = ev.placement.model_dump(mode="json")
        if ev.state == "starting":
            self.progress(RunProgress(kind="engine_start", message=ev.job_id))
        elif ev.state == "started":
            describe = dict(ev.describe)
            attention = describe.pop("draft_attention", None)
            status.update(status="started", describe=describe)
            status.pop("reason", None)
            if attention is not None:
                status["draft_attention"] = attention
        elif ev.state == "closed" and ev.describe and status.get("status") == "started":
            status["describe"] = {**status.get("describe", {}),
                                  **{k: v for k, v in ev.describe.items() if k != "draft_attention"}}
        elif ev.state in ("failed", "skipped"):
            status.update(status=ev.state, reason=ev.reason)
        elif ev.state == "restarting":
            status["restarts"] = status.get("restarts", 0) + 1

    def _fail_cells(self, engine_key: str, cells: list[Cell], reason: str) -> None:
        assert self._cells_out is not None
        for c in cells:
            self._cells_out.append(CellRecord(
                run_id=self.run_id, cell_id=c.cell_id, engine_key=engine_key, status="failed", reason=reason,
                finished_at=now_iso(),
            ))
            self._ended_cells.add(c.cell_id)
            self.progress(RunProgress(kind="cell_failed", cell=c, message=reason))

    def _scores(self, rows: list[ScoreRow]) -> None:
        if self._scores_out is None:
            self._scores_out = rundir.equivalence_appender(self.run_dir)
        for row in rows:
            self._scores_out.append(row.stored())

