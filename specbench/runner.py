"""Executes a plan: engines, warmups, cells, failures, resume.

Each engine config gets one engine, reused by all its cells. Every request
record is appended to ``records.jsonl`` the moment it arrives; a cell's
``CellRecord`` is appended when it ends (ok, skipped or failed). An engine
that cannot start skips or fails its own cells; one that dies mid-cell fails
that cell and is restarted once for the cells left.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbench import datasets
from specbench.engines.base import CellFailed, Engine, EngineUnavailable
from specbench.engines.vllm_offline import VllmOfflineEngine, close_spare
from specbench.engines.vllm_patches import patch_env
from specbench.methods import get_method
from specbench.plan import Cell, EngineConfig, Plan, sampled_equivalence_temperature, sampled_prompt_limit
from specbench.records import CellRecord, RequestRecord, SpecCounters
from specbench.requests import CellRequest, PreparedPrompt, SamplingRequest
from specbench.settings import settings
from specbench.store import CELLS, PROMPTS, RECORDS, JsonlAppender, read_cells, read_requests
from specbench.suite import Suite

Progress = Callable[[str, Cell | None, str], None]  # (event, cell, message)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


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


@dataclass
class ResolvedEngine:
    """An engine config with its model/speculator paths and vLLM arguments."""

    config: EngineConfig
    model_path: str
    speculator_path: str | None
    engine_kwargs: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)


def resolve_engine(cfg: EngineConfig, platform: str, assets_factory: Callable[[], Any] | None = None) -> ResolvedEngine:
    """Turn ``tiny`` / ``tiny:<kind>`` / ``target`` references into paths and
    build the engine's vLLM arguments (with CPU defaults on CPU)."""
    from specbench.engines.vllm_offline import build_engine_kwargs

    model = cfg.target.model
    spec_ref = cfg.method.speculator
    assets = None
    if model == "tiny" or (spec_ref or "").startswith("tiny:"):
        if assets_factory is None:
            from specbench.assets import ensure_assets_for

            assets = ensure_assets_for(cfg.target.assets)
        else:
            assets = assets_factory()
    model_path = str(assets.target) if model == "tiny" and assets is not None else model
    spec_path: str | None = None
    if spec_ref == "target":
        spec_path = model_path
    elif spec_ref is not None and spec_ref.startswith("tiny:"):
        from specbench.assets import resolve_speculator

        assert assets is not None
        spec_path = str(resolve_speculator(spec_ref, assets))
    elif spec_ref is not None:
        spec_path = spec_ref
    kwargs = build_engine_kwargs(cfg, model_path, spec_path)
    env: dict[str, str] = {}
    if platform == "cpu":
        kwargs.setdefault("enforce_eager", True)
        env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")
        # One process per engine: a killed engine leaves no EngineCore orphan.
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if model == "tiny" or (spec_ref or "").startswith("tiny:"):
        env["HF_HUB_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
    if cfg.target.engine != "reference":
        env.update(patch_env(cfg.target.engine_patches))
        env.update(get_method(cfg.method.method).env_for(platform))
    return ResolvedEngine(cfg, model_path, spec_path, kwargs, env)


def make_engine(res: ResolvedEngine, run_dir: Path, suite: Suite | None = None) -> Engine:
    log = run_dir / "engines" / f"{res.config.key}.log"
    engine = res.config.target.engine
    if engine == "vllm-offline":
        from specbench.engines.vllm_offline import VllmOfflineEngine

        return VllmOfflineEngine(res.config, res.engine_kwargs, log, res.env)
    if engine == "vllm-server":
        from specbench.engines.loadgen import LoadProfile
        from specbench.engines.vllm_server import VllmServerEngine

        load = None
        if suite is not None:
            # The load shape comes from each cell (concurrency in batch_size, or a
            # Poisson request_rate capped at batch_size in flight); these are the
            # bounds, warmup and seed every cell shares (see LoadProfile.for_cell).
            load = LoadProfile(
                num_requests=suite.load.num_requests,
                duration_s=suite.load.duration_s,
                warmup_requests=suite.load.warmup_requests,
                seed=suite.sampling.seed,
                request_timeout_s=settings().request_timeout,
            )
        return VllmServerEngine(
            res.config, res.engine_kwargs, log, res.env, base_url=res.config.target.base_url, load=load
        )
    if engine == "reference":
        from specbench.engines.reference import ReferenceEngine

        return ReferenceEngine(res.config, res.model_path, res.speculator_path)
    raise ValueError(f"unknown engine {engine!r}")


def sampling_for(suite: Suite, cell: Cell) -> SamplingRequest:
    s = suite.sampling
    samples = s.samples_per_prompt if cell.temperature > 0 else 1
    sampled = suite.equivalence.sampled
    if sampled is not None and sampled.samples_per_prompt and cell.temperature == sampled_equivalence_temperature(suite):
        samples = sampled.samples_per_prompt
    logprobs = None
    if suite.equivalence.greedy and cell.temperature == 0:
        logprobs = suite.equivalence.logprobs
    return SamplingRequest(
        temperature=cell.temperature,
        max_tokens=s.max_tokens,
        top_p=s.top_p,
        seed=s.seed,
        samples_per_prompt=samples,
        logprobs=logprobs,
    )


class Runner:
    def __init__(
        self,
        suite: Suite,
        plan: Plan,
        run_dir: Path,
        run_id: str,
        *,
        limit: int | None = None,
        progress: Progress | None = None,
        platform: str | None = None,
        assets_factory: Callable[[], Any] | None = None,
    ):
        self.suite = suite
        self.plan = plan
        self.run_dir = run_dir
        self.run_id = run_id
        self.limit = limit
        self.progress = progress or (lambda event, cell, msg: None)
        self.platform = platform or detect_platform()
        self.assets_factory = assets_factory
        self._prompts: dict[tuple[str, bool], list[PreparedPrompt]] = {}
        self.engine_status: dict[str, dict[str, Any]] = {}
        self.draft_attention: dict[str, dict[str, Any]] = {}

    # -- data ---------------------------------------------------------------

    def prompts(self, dataset: str, chat: bool) -> list[PreparedPrompt]:
        key = (dataset, chat)
        if key not in self._prompts:
            spec = next(d for d in self.suite.datasets if d.name == dataset)
            base = Path(self.suite.source_path).parent if self.suite.source_path else Path.cwd()
            ps = datasets.prepare(spec, base, chat=chat)
            self._prompts[key] = ps[: self.limit] if self.limit else ps
        return self._prompts[key]

    # -- execution ----------------------------------------------------------

    def run(self) -> None:
        # Load every dataset first: a bad dataset is bad input, found before any engine starts.
        for c in self.plan.cells:
            self.prompts(c.dataset, self._chat(c))
        self._write_prompts()
        done_cells, partial = self._resume_state()
        records = JsonlAppender(self.run_dir / RECORDS)
        cells_out = JsonlAppender(self.run_dir / CELLS)
        try:
            for cfg in self.plan.engines:
                todo = [c for c in self.plan.cells_for(cfg.key) if c.cell_id not in done_cells]
                if not todo:
                    self.engine_status[cfg.key] = {"status": "done earlier"}
                    continue
                self._run_engine(cfg, todo, partial, records, cells_out)
        finally:
            records.close()
            cells_out.close()
            if self.suite.equivalence.sampled is None:
                close_spare()
        try:
            if self.suite.equivalence.sampled is not None:
                self._teacher_force()
        finally:
            close_spare()

    def _teacher_force(self) -> None:
        """Score sampled outputs under the target without speculation (issue: equivalence)."""
        try:
            from specbench.equivalence_run import teacher_force_run
        except ImportError:
            return
        self.progress("engine_start", None, "teacher forcing (target without speculation)")
        teacher_force_run(self.run_dir, self.suite, self.plan, self.platform)

    def _write_prompts(self) -> None:
        """``prompts.jsonl``: every prompt with its dataset and reference (for scoring)."""
        seen: set[tuple[str, str]] = set()
        rows = []
        for (dataset, _chat), prompts in self._prompts.items():
            for p in prompts:
                if (dataset, p.prompt_id) in seen:
                    continue
                seen.add((dataset, p.prompt_id))
                rows.append({"dataset": dataset, **p.model_dump(mode="json")})
        with open(self.run_dir / PROMPTS, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")

    def _resume_state(self) -> tuple[set[str], dict[str, list[RequestRecord]]]:
        """Cells already finished (ok or skipped) and records of unfinished ones."""
        if not (self.run_dir / CELLS).exists():
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

    def _fail_all(self, cells: list[Cell], cfg: EngineConfig, exc: EngineUnavailable, out: JsonlAppender) -> None:
        status = "skipped" if exc.skipped else "failed"
        for c in cells:
            out.append(
                CellRecord(
                    run_id=self.run_id,
                    cell_id=c.cell_id,
                    engine_key=cfg.key,
                    status=status,
                    reason=exc.reason,
                    engine_log_tail=exc.log_tail,
                    finished_at=now(),
                )
            )
            self.progress("cell_" + status, c, exc.reason)

    def _start(self, cfg: EngineConfig) -> Engine:
        try:
            res = resolve_engine(cfg, self.platform, self.assets_factory)
        except Exception as exc:  # noqa: BLE001 - a bad checkpoint/asset fails this engine only
            raise EngineUnavailable(f"cannot prepare engine: {type(exc).__name__}: {exc}") from exc
        engine = make_engine(res, self.run_dir, self.suite)
        if isinstance(engine, VllmOfflineEngine):  # a spare worker imports vLLM for the next one
            engine.prepare_next = self._offline_engine_follows(cfg)
        if cfg.target.engine != "reference":
            from specbench.engines.draft_attention import checkpoint_block_attention

            # How vLLM will serve a DFlash draft block vs how it was trained (the cross-check reports it).
            attention = checkpoint_block_attention(res.speculator_path)
            if attention is not None:
                self.draft_attention[cfg.key] = attention
        self.progress("engine_start", None, cfg.key)
        try:
            engine.start()
        except EngineUnavailable as exc:
            info = get_method(cfg.method.method)
            if info.platforms and self.platform not in info.platforms:
                exc.skipped = True
                if info.platform_note and info.platform_note not in exc.reason:
                    exc.reason = f"{exc.reason} ({info.platform_note})"
            raise
        return engine

    def _offline_engine_follows(self, cfg: EngineConfig) -> bool:
        """Whether a vLLM offline engine starts after ``cfg``'s (a later one, or teacher forcing)."""
        later = self.plan.engines[self.plan.engines.index(cfg) + 1 :]
        return self.suite.equivalence.sampled is not None or any(e.target.engine == "vllm-offline" for e in later)

    def _run_engine(
        self,
        cfg: EngineConfig,
        cells: list[Cell],
        partial: dict[str, list[RequestRecord]],
        records: JsonlAppender,
        cells_out: JsonlAppender,
    ) -> None:
        try:
            engine = self._start(cfg)
        except EngineUnavailable as exc:
            self.engine_status[cfg.key] = {"status": "skipped" if exc.skipped else "failed", "reason": exc.reason}
            self._fail_all(cells, cfg, exc, cells_out)
            return
        self.engine_status[cfg.key] = {"status": "started", "describe": engine.describe()}
        if cfg.key in self.draft_attention:
            self.engine_status[cfg.key]["draft_attention"] = self.draft_attention[cfg.key]
        restarts = 0
        try:
            if self.suite.warmup:
                self._warmup(engine, cells)
            for i, cell in enumerate(cells):
                ok = self._run_cell(engine, cfg, cell, partial.get(cell.cell_id, []), records, cells_out)
                if ok is False and i + 1 < len(cells):
                    engine.close()
                    if restarts >= 1:
                        died = EngineUnavailable("engine died twice; not restarted again")
                        self._fail_all(cells[i + 1 :], cfg, died, cells_out)
                        return
                    restarts += 1
                    try:
                        engine = self._start(cfg)
                    except EngineUnavailable as exc:
                        self._fail_all(cells[i + 1 :], cfg, exc, cells_out)
                        return
        finally:
            engine.close()

    def _warmup(self, engine: Engine, cells: list[Cell]) -> None:
        """Unrecorded requests in the shape of each (load, sampling) the engine will
        see: CPU kernels and the logprobs path are prepared on first use, which
        would otherwise be timed in the first cell."""
        shapes: dict[tuple[int, bool, int | None], Cell] = {}
        for c in cells:
            # A request-rate cell warms up closed-loop at its cap (1 stream when uncapped).
            shapes.setdefault((max(1, c.batch_size), c.temperature > 0, sampling_for(self.suite, c).logprobs), c)
        for (bs, _, _), cell in shapes.items():
            prompts = self.prompts(cell.dataset, self._chat(cell))[:bs]
            sampling = sampling_for(self.suite, cell).model_copy(update={"max_tokens": 16, "samples_per_prompt": 1})
            req = CellRequest(
                run_id=self.run_id,
                cell=cell.model_copy(update={"cell_id": f"warmup-b{bs}", "batch_size": bs, "request_rate": None}),
                prompts=prompts,
                sampling=sampling,
            )
            try:
                engine.run_cell(req, lambda r: None)
            except CellFailed:
                return  # the first real cell reports the problem

    def _chat(self, cell: Cell) -> bool:
        target = next(t for t in self.suite.targets if t.name == cell.target)
        return target.chat_template

    def _run_cell(
        self,
        engine: Engine,
        cfg: EngineConfig,
        cell: Cell,
        earlier: list[RequestRecord],
        records: JsonlAppender,
        cells_out: JsonlAppender,
    ) -> bool | None:
        """Run one cell. Returns False when the engine died (restart needed)."""
        started = now()
        prompts = self.prompts(cell.dataset, self._chat(cell))
        subset = sampled_prompt_limit(self.suite, cell.temperature)
        if subset is not None:
            prompts = prompts[:subset]  # the sampled-equivalence cells take the first N prompts
        # Errored requests (server died, timeout) are tried again; their records stay as attempts.
        earlier = [r for r in earlier if r.error is None]
        skip = {(r.prompt_id, r.sample_index) for r in earlier}
        request = CellRequest(
            run_id=self.run_id, cell=cell, prompts=prompts, sampling=sampling_for(self.suite, cell), skip=skip
        )
        self.progress("cell_start", cell, f"{len(prompts)} prompts")
        received: list[RequestRecord] = []

        def emit(rec: RequestRecord) -> None:
            records.append(rec)
            received.append(rec)
            self.progress("request", cell, rec.prompt_id)

        try:
            outcome = engine.run_cell(request, emit)
        except CellFailed as exc:
            cells_out.append(
                CellRecord(
                    run_id=self.run_id, cell_id=cell.cell_id, engine_key=cfg.key, status="failed",
                    reason=exc.reason, engine_log_tail=exc.log_tail, num_requests=len(received),
                    started_at=started, finished_at=now(),
                )
            )
            self.progress("cell_failed", cell, exc.reason)
            return False if exc.engine_dead else None
        counters = outcome.counters
        reason = None
        if earlier:
            reason = f"resumed: {len(earlier)} requests from an earlier attempt"
            if counters is not None:
                prior = [r.spec for r in earlier]
                if all(p is not None for p in prior):
                    counters = sum((p for p in prior if p is not None), counters)
                else:
                    reason += "; their counters are unknown, pooled counters cover the new requests only"
        cells_out.append(
            CellRecord(
                run_id=self.run_id, cell_id=cell.cell_id, engine_key=cfg.key, status="ok", reason=reason,
                counters=counters if counters is None else SpecCounters.model_validate(counters),
                num_requests=len(earlier) + outcome.num_requests, wall_time_s=outcome.wall_time_s,
                started_at=started, finished_at=now(),
            )
        )
        self.progress("cell_ok", cell, "")
        return True
