"""vLLM offline engine, isolated in a child process.

The parent (:class:`VllmOfflineEngine`) talks to a spawned worker over a
pipe. The worker owns one ``vllm.LLM``; its stdout/stderr go to a log file so
that when it crashes (or is killed, or runs out of memory) the parent fails
only the affected cells and keeps the log tail as the reason. The worker
leads its own process group (vLLM's EngineCore, where it starts one, in it),
which is SIGKILLed whole if the parent dies; a terminal's Ctrl-C reaches the
parent only, which decides what stops (:mod:`specbench.engines.procs`).

Counters come from ``LLM.get_metrics()`` (cumulative over the engine's life,
so each cell takes the delta around its own requests). Per-request counters
come from vLLM's per-request spec-decode metrics (``detailed``), and so do the
request's verification steps (:mod:`specbench.engines.step_trace`; an ngram
engine replays its proposer to put back the steps without a draft).
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import multiprocessing.util  # noqa: F401 - its exit hook joins live children: registered before ours, it runs after
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specbench.config.arms import SLEEP_LEVEL
from specbench.config.methods import VllmPassthrough
from specbench.config.plan import EngineConfig
from specbench.engines.interpreter import start_in
from specbench.engines.piped_engine import PipedEngine, tail
from specbench.engines.procs import (
    LIVE,
    descendants,
    kill_tree,
    wait_gone,
)
from specbench.engines.protocol import CellFailed, EmitRecord, EngineCapabilities, EngineUnavailable
from specbench.engines.step_trace import Propose, replay_ngram, trace_from_vllm, vllm_ngram_proposer
from specbench.engines.vllm_args import draft_weights_mib, num_speculative_tokens
from specbench.engines.vllm_forks import ZYGOTES, _as_worker, _import_engine, _log_to
from specbench.engines.vllm_patches import take_step_phases
from specbench.results import counters
from specbench.results.records import RequestRecord, SpecCounters, StepPhases, StepTrace
from specbench.results.requests import CellOutcome, CellRequest, ScoreItem, ScoreResult, request_seed
from specbench.settings import settings

# Phrases in a start-up log that say a configuration cannot run on this
# platform. Only a hint for log scanning: whether a cell is *skipped* rather
# than *failed* is decided by the runner from the method registry.
UNSUPPORTED_MARKERS = ("not supported", "only supported", "unsupported", "model runner v2")


# ---------------------------------------------------------------------------
# worker side (runs in the child process)


def counters_from_request_metrics(sd: Any, k: int | None) -> SpecCounters | None:
    """Per-request counters from vLLM's ``RequestSpecDecodeMetrics`` (:func:`counters.from_request`)."""
    return None if sd is None else counters.from_request(sd.histogram, sd.num_draft_tokens, k)


def _ngram_propose(llm: Any) -> Propose | None:
    """vLLM's ngram proposal function with this engine's settings (None: the engine is not ngram)."""
    sc = llm.llm_engine.vllm_config.speculative_config
    if sc is None or sc.method != "ngram":
        return None
    return vllm_ngram_proposer(int(sc.prompt_lookup_min), int(sc.prompt_lookup_max), int(sc.num_speculative_tokens),
                               int(llm.llm_engine.model_config.max_model_len))


def finished_request_trace(out: Any, method: str | None, ngram: Propose | None) -> StepTrace | None:
    """A finished request's verification steps: vLLM's drafted steps, completed by the ngram replay."""
    comp = out.outputs[0]
    trace = trace_from_vllm(getattr(comp, "spec_decode_metrics", None), method)
    if trace is None or trace.complete or ngram is None:
        return trace
    return replay_ngram(list(out.prompt_token_ids or []), list(comp.token_ids), trace, ngram) or trace


def _request_record(req: CellRequest, engine_key: str, prompt_id: str, sample: int, out: Any, k: int | None,
                    steps: StepTrace | None = None) -> dict:
    comp = out.outputs[0]
    m = out.metrics
    latency = ttft = None
    itl = None
    if m is not None and getattr(m, "first_token_ts", None) and getattr(m, "scheduled_ts", None):
        # Engine-core monotonic timestamps: queue → first token → last token.
        ttft = max(0.0, m.first_token_ts - m.queued_ts)
        latency = max(0.0, m.last_token_ts - m.queued_ts)
    lps = None
    if comp.logprobs is not None:
        lps = [{int(t): float(lp.logprob) for t, lp in pos.items()} for pos in comp.logprobs]
    rec = RequestRecord(
        run_id=req.run_id,
        cell_id=req.cell.cell_id,
        engine_key=engine_key,
        prompt_id=prompt_id,
        repeat=req.cell.repeat,
        sample_index=sample,
        seed=request_seed(req.sampling, prompt_id, sample, req.cell.repeat),
        prompt_tokens=len(out.prompt_token_ids or []),
        output_token_ids=list(comp.token_ids),
        output_text=comp.text,
        finish_reason=comp.finish_reason,
        latency_s=latency,
        ttft_s=ttft,
        itl_s=itl,
        spec=counters_from_request_metrics(getattr(comp, "spec_decode_metrics", None), k),
        steps=steps,
        logprobs=lps,
    )
    return rec.model_dump(mode="json")


def _render_chat(tokenizer: Any, messages: list[dict[str, str]], opts: dict[str, Any]) -> str:
    """The target's chat template applied to one conversation (as text)."""
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **(opts.get("chat_template_kwargs") or {})
    )


class DensePromptLogprobs(list):
    """A request's prompt logprobs as vLLM's engine core hands them over: chunks of
    ``(token_ids, logprobs)`` arrays, one row per prompt position after the first
    (row ``r`` scores prompt token ``r + 1``), never turned into Python objects."""


@contextmanager
def dense_prompt_logprobs() -> Iterator[bool]:
    """While open, prompt logprobs arrive as :class:`DensePromptLogprobs` (yields True),
    or as vLLM's own containers where its internals differ (yields False).

    vLLM turns full-vocabulary prompt logprobs into one Python object per position
    and token (vocabulary × prompt length per request: ~0.8 M for a 200-token
    teacher-forced sequence on a 4k vocabulary), which was most of teacher
    forcing's time. The values are the same float32 numbers either way. Only this
    worker's own scoring call is inside the block (one thread), so cells never see it.
    """
    try:
        from vllm.v1.engine.logprobs import LogprobsProcessor
    except ImportError:
        yield False
        return
    original = getattr(LogprobsProcessor, "_update_prompt_logprobs", None)
    if original is None:
        yield False
        return

    def keep_arrays(self: Any, tensors: Any) -> None:
        token_ids, logprobs, *_ = tensors
        if not isinstance(self.prompt_logprobs, DensePromptLogprobs):
            self.prompt_logprobs = DensePromptLogprobs()
        self.prompt_logprobs.append((token_ids.numpy().copy(), logprobs.numpy().copy()))

    LogprobsProcessor._update_prompt_logprobs = keep_arrays  # type: ignore[method-assign,assignment]
    try:
        yield True
    finally:
        LogprobsProcessor._update_prompt_logprobs = original  # type: ignore[method-assign]


def _flat_rows(plp: Any, start: int, n: int, vocab: int) -> Any:
    """Dense ``(n, vocab)`` raw logprobs of prompt positions ``start..start+n-1``."""
    import numpy as np

    out = np.full((n, vocab), -np.inf, dtype=np.float64)
    if isinstance(plp, DensePromptLogprobs):
        ids = np.concatenate([c[0] for c in plp])[start - 1 : start - 1 + n].astype(np.int64)
        lps = np.concatenate([c[1] for c in plp])[start - 1 : start - 1 + n].astype(np.float64)
        if ids.shape[0] != n:
            raise ValueError(f"{ids.shape[0]} prompt logprob rows for {n} generated tokens")
        np.put_along_axis(out, ids, lps, axis=1)
        return out
    flat = all(hasattr(plp, a) for a in ("start_indices", "end_indices", "token_ids", "logprobs"))
    if flat:
        ids = np.asarray(plp.token_ids, dtype=np.int64)
        lps = np.asarray(plp.logprobs, dtype=np.float64)
    for j in range(n):
        pos = start + j
        if flat:
            a, b = plp.start_indices[pos], plp.end_indices[pos]
            out[j, ids[a:b]] = lps[a:b]
        else:
            d = plp[pos]
            out[j, list(d.keys())] = [lp.logprob for lp in d.values()]
    return out


def _score_items(llm: Any, tokenizer: Any, payload: list[dict[str, Any]], opts: dict[str, Any]) -> list[dict[str, Any]]:
    """Teacher forcing: score each item's generated tokens under this engine's target.

    One prefill of prompt + generated ids with full-vocabulary prompt
    logprobs (raw); the item's temperature/top-p are applied here and each
    generated token is reduced to ``F(x-)`` and ``p(x)`` (see
    :mod:`specbench.execution.teacher_forcing`).
    """
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from specbench.analysis.pit import pit_parts, process_logprobs

    items = [ScoreItem.model_validate(d) for d in payload]
    vocab = int(llm.llm_engine.model_config.get_vocab_size())
    results: list[dict[str, Any] | None] = [None] * len(items)
    prompts, params, where = [], [], []
    for i, it in enumerate(items):
        if it.messages is not None:
            text = _render_chat(tokenizer, it.messages, opts)
        elif it.text is not None:
            text = it.text
        else:
            results[i] = {"error": "prompt not found (prompts.jsonl)"}
            continue
        pids = list(tokenizer(text).input_ids)
        want = it.prompt_tokens
        if want is not None and want != len(pids):
            results[i] = {"error": f"prompt re-tokenizes to {len(pids)} tokens, the run had {want}"}
            continue
        prompts.append(TokensPrompt(prompt_token_ids=pids + list(it.output_token_ids)))
        sp: dict[str, Any] = dict(max_tokens=1, temperature=0.0, prompt_logprobs=-1, detokenize=False)
        try:
            params.append(SamplingParams(**sp, flat_logprobs=True))
        except TypeError:
            params.append(SamplingParams(**sp))
        where.append((i, len(pids)))
    if prompts:
        with dense_prompt_logprobs():
            outs = llm.generate(prompts, params, use_tqdm=False)
        for (i, n_prompt), o in zip(where, outs, strict=False):
            it = items[i]
            try:
                toks = list(it.output_token_ids)
                raw = _flat_rows(o.prompt_logprobs, n_prompt, len(toks), vocab)
                probs = process_logprobs(raw, it.temperature, it.top_p)
                f, p = pit_parts(probs, toks)
                results[i] = {"f_minus": f.tolist(), "p": p.tolist()}
            except Exception as exc:  # noqa: BLE001 - one request's failure
                results[i] = {"error": f"{type(exc).__name__}: {exc}"}
    return [r if r is not None else {"error": "not scored"} for r in results]


def _worker_main(conn: Any, engine_kwargs: dict[str, Any], log_path: str, env: dict[str, str]) -> None:
    """A spawned worker: its process group, its log, then the engine's life."""
    _as_worker()
    _log_to(log_path)
    _serve(conn, engine_kwargs, env, imported=False)


def _serve(conn: Any, engine_kwargs: dict[str, Any], env: dict[str, str], imported: bool = True) -> None:
    """Build the engine (vLLM imported first unless a zygote did), then answer the parent until it closes."""
    try:
        if not imported:
            _import_engine(env)
        from vllm import LLM, SamplingParams

        # vLLM's engine core freezes its startup heap (gc.freeze) once built; frozen from here, the
        # full collections it runs while building (seven) skip the imported modules: ~1.5 s a start.
        gc.freeze()
        llm = LLM(**engine_kwargs)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        traceback.print_exc()
        conn.send(("start_error", f"{type(exc).__name__}: {exc}"))
        return
    tokenizer = llm.get_tokenizer()
    # The dtype vLLM resolved ("auto" → the checkpoint's; it sets the greedy near-tie tolerance) and the
    # vLLM release this worker imported (an A/B arm's interpreter may have another one than the harness).
    cache = llm.llm_engine.vllm_config.cache_config
    conn.send(("ready", {"dtype": str(llm.llm_engine.model_config.dtype).removeprefix("torch."),
                         "vllm_version": getattr(sys.modules.get("vllm"), "__version__", None),
                         # the tokens the engine's KV cache holds (its blocks × block size; a drafter's layers share it)
                         "kv_cache_tokens": (cache.num_gpu_blocks or 0) * cache.block_size or None}))
    k = num_speculative_tokens(engine_kwargs)
    method = (engine_kwargs.get("speculative_config") or {}).get("method")
    ngram = _ngram_propose(llm)
    while True:
        msg = conn.recv()
        if msg[0] == "close":
            # Everything this worker produced has been sent; the parent ends the process
            # (no interpreter or engine teardown: seconds per engine), so flush the log first.
            sys.stdout.flush()
            sys.stderr.flush()
            conn.send(("closed", None))
            return
        if msg[0] in ("sleep", "wake_up"):  # vLLM's sleep mode: an A/B pair taking turns on one GPU
            try:
                if msg[0] == "sleep":
                    llm.sleep(level=msg[1])
                else:
                    llm.wake_up()
                conn.send((msg[0], None))
            except BaseException as exc:  # noqa: BLE001
                traceback.print_exc()
                conn.send(("cell_error", f"{msg[0]}: {type(exc).__name__}: {exc}"))
            continue
        if msg[0] == "score":
            try:
                conn.send(("scored", _score_items(llm, tokenizer, msg[1], msg[2])))
            except BaseException as exc:  # noqa: BLE001
                traceback.print_exc()
                conn.send(("score_error", f"{type(exc).__name__}: {exc}"))
            continue
        req = CellRequest.model_validate(msg[1])
        try:
            before = counters.from_offline(llm.get_metrics())
            take_step_phases()  # the steps before this cell's (another cell's, a warm-up) are not its own
            t0 = time.perf_counter()
            todo = [
                (p, s)
                for p in req.prompts
                for s in range(req.sampling.samples_per_prompt)
                if (p.prompt_id, s) not in req.skip
            ]
            bs = max(1, req.cell.batch_size)
            for i in range(0, len(todo), bs):
                batch = todo[i : i + bs]
                params = [
                    SamplingParams(
                        temperature=req.sampling.temperature,
                        top_p=req.sampling.top_p,
                        max_tokens=p.max_tokens or req.sampling.max_tokens,
                        seed=request_seed(req.sampling, p.prompt_id, s, req.cell.repeat),
                        logprobs=req.sampling.logprobs,
                        stop=req.sampling.stop,
                    )
                    for p, s in batch
                ]
                texts: list[Any] = [
                    p.text if p.messages is None else _render_chat(tokenizer, p.messages, msg[2])
                    for p, _ in batch
                ]
                outs = llm.generate(texts, params, use_tqdm=False)
                recs = [
                    _request_record(req, msg[2]["engine_key"], p.prompt_id, s, o, k, finished_request_trace(o, method, ngram))
                    for (p, s), o in zip(batch, outs, strict=False)
                ]
                conn.send(("records", recs))
            wall = time.perf_counter() - t0
            delta = counters.from_offline(llm.get_metrics()) - before
            phases = take_step_phases()
            conn.send(("done", {"counters": delta.model_dump(), "wall": wall, "n": len(todo),
                                "step_phases": None if phases is None else StepPhases.from_rows(phases).model_dump()}))
        except BaseException as exc:  # noqa: BLE001
            traceback.print_exc()
            conn.send(("cell_error", f"{type(exc).__name__}: {exc}"))


# ---------------------------------------------------------------------------
# parent side


class VllmOfflineEngine(PipedEngine):
    """One ``vllm.LLM`` in a child process."""

    def __init__(self, config: EngineConfig, engine_kwargs: VllmPassthrough, log_path: Path, env: dict[str, str],
                 *, prepare_next: bool = False):
        self.config = config
        self.python = config.target.python  # another environment's interpreter (engines.interpreter), or this one
        self.engine_kwargs = engine_kwargs
        self.log_path = log_path
        self.env = env
        self._proc: Any = None
        self._conn: Any = None
        self._live: int | None = None  # this worker's entry in procs.LIVE
        self._busy = False  # a cell or scoring request is in the worker's hands
        self.dtype: str | None = None  # as vLLM resolved it, once started
        self.vllm_version: str | None = None  # the release the worker imported, once started
        self.kv_cache_tokens: int | None = None  # the tokens its KV cache holds, once started
        # (CPU) Another offline engine with this environment follows: a zygote imports vLLM for it meanwhile.
        self.prepare_next = prepare_next

    @property
    def capabilities(self) -> EngineCapabilities:
        return EngineCapabilities(kind="vllm-offline", scores=True,
                                  sleeps=bool(self.engine_kwargs.get("enable_sleep_mode")))

    def describe(self) -> VllmPassthrough:
        out: dict[str, Any] = {"engine": "vllm-offline", "llm_kwargs": self.engine_kwargs}
        if self.dtype is not None:
            out["dtype"] = self.dtype
        if self.vllm_version is not None:
            out["vllm_version"] = self.vllm_version
        if self.kv_cache_tokens is not None:
            out["kv_cache_tokens"] = self.kv_cache_tokens
        if (mib := draft_weights_mib(self.engine_kwargs)) is not None:
            out["draft_weights_mib"] = mib
        return out

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        name = f"specbench-engine-{self.config.key}"
        # Forked from a zygote that imported vLLM with this environment and interpreter, else spawned: here, or
        # in another environment's interpreter (engines.interpreter). When more engines follow, the zygote is
        # made first and this engine forked from it too: vLLM is imported once, not twice on two cores at once,
        # and every engine of the run starts the same way (while the first was spawned, the headline's first
        # instance sat on one side of the later ones in every run; docs/measurements.md).
        if self.prepare_next and settings().spare_engine:
            ZYGOTES.prepare(self.env, _serve, self.python)
        self._proc = ZYGOTES.fork(self.env, child, self.engine_kwargs, str(self.log_path), name,
                                  settings().engine_start_timeout, self.python) if settings().spare_engine else None
        if self._proc is not None:
            child.close()
            self._conn = parent
        elif self.python is not None:
            child.close()
            parent.close()
            self._proc, self._conn = start_in(self.python, f"{__name__}:_worker_main",
                                              (self.engine_kwargs, str(self.log_path), self.env), self.env)
        else:
            self._proc = ctx.Process(target=_worker_main, args=(child, self.engine_kwargs, str(self.log_path), self.env),
                                     daemon=False, name=name)
            self._proc.start()
            child.close()
            self._conn = parent
        self._live = LIVE.add(f"vLLM offline worker {self.config.key} (pid {self._proc.pid})", self.kill)
        kind, payload = self._recv(settings().engine_start_timeout, starting=True)
        if kind == "start_error":
            self._reap()
            # Whether this is a "skip" (method unsupported on this platform) is decided by
            # the runner from the method registry; the reason is always vLLM's own text.
            raise EngineUnavailable(payload, log_tail=tail(self.log_path))
        if kind == "ready" and isinstance(payload, dict):
            self.dtype = payload.get("dtype")
            self.vllm_version = payload.get("vllm_version")
            self.kv_cache_tokens = payload.get("kv_cache_tokens")

    def run_cell(self, request: CellRequest, emit: EmitRecord) -> CellOutcome:
        self._require_running()
        opts = {
            "engine_key": self.config.key,
            "chat_template_kwargs": self.config.target.chat_template_kwargs,
        }
        self._busy = True
        self._conn.send(("cell", request.model_dump(mode="json"), opts))
        while True:
            kind, payload = self._recv(settings().cell_timeout)
            if kind == "records":
                for r in payload:
                    emit(RequestRecord.model_validate(r))
                continue
            self._busy = False
            if kind == "done":
                delta = SpecCounters.model_validate(payload["counters"])
                phases = payload.get("step_phases")
                return CellOutcome(
                    counters=None if self.config.speculative_config is None else delta,
                    wall_time_s=payload["wall"],
                    num_requests=payload["n"],
                    step_phases=None if phases is None else StepPhases.model_validate(phases),
                )
            elif kind == "cell_error":
                raise CellFailed(payload, log_tail=tail(self.log_path))

    def _toggle(self, op: str, *args: Any) -> None:
        self._require_running()
        self._conn.send((op, *args))
        kind, payload = self._recv(settings().cell_timeout)
        if kind == "cell_error":
            raise CellFailed(payload, log_tail=tail(self.log_path))

    def sleep(self) -> None:
        """vLLM's ``LLM.sleep`` at :data:`~specbench.config.arms.SLEEP_LEVEL` (an engine started with
        ``enable_sleep_mode``)."""
        self._toggle("sleep", SLEEP_LEVEL)

    def wake_up(self) -> None:
        self._toggle("wake_up")

    def score(self, items: list[ScoreItem]) -> list[ScoreResult]:
        """Teacher-force items through this engine: per item ``F(x-)`` and ``p(x)`` of each
        generated token under the processed full-vocabulary distribution, or its error.
        The engine must be a plain target started with ``max_logprobs=-1``. Raises
        :class:`CellFailed` when the engine fails.
        """
        self._require_running()
        opts = {"chat_template_kwargs": self.config.target.chat_template_kwargs}
        self._busy = True
        self._conn.send(("score", [it.model_dump(mode="json") for it in items], opts))
        kind, payload = self._recv(settings().cell_timeout)
        self._busy = False
        if kind == "score_error":
            raise CellFailed(payload, log_tail=tail(self.log_path))
        return [ScoreResult.model_validate(r) for r in payload]

    def kill(self) -> None:
        """SIGKILL the worker and its descendants (vLLM's EngineCore where it runs one)."""
        if self._proc is not None and self._proc.is_alive():
            kill_tree(self._proc.pid)
        self._reap()

    def _gone(self) -> None:
        self._reap()

    def _reap(self) -> None:
        if self._proc is not None:
            self._proc.join(timeout=10)
        self._proc = None
        self._busy = False
        LIVE.discard(self._live)
        self._live = None

    def close(self) -> None:
        """Ask the worker to end, then make sure. A worker busy with a cell cannot hear
        the request until the cell ends (a run stopped mid-cell): it is killed at once."""
        if self._proc is None:
            return
        if self._busy:
            self.kill()
            return
        closed = False
        try:
            if self._proc.is_alive():
                self._conn.send(("close",))
                if self._conn.poll(30):
                    closed = self._conn.recv()[0] == "closed"
        except (OSError, EOFError, BrokenPipeError):
            pass
        if closed:
            # Its results are all in this process: skip the worker's interpreter and engine
            # teardown (~3 s per engine on 2 CPU cores) and end it, and what it started, now.
            self._end_tree()
            return
        if self._proc is not None:
            self._proc.join(timeout=30)
            if self._proc.is_alive():
                self._proc.kill()
        self._reap()

    def _end_tree(self) -> None:
        """SIGKILL the worker and its descendants and wait until they are gone (their memory,
        device memory included, is free before the next engine starts)."""
        procs = descendants(self._proc.pid)
        kill_tree(self._proc.pid, also=procs)
        self._reap()
        wait_gone(procs, timeout_s=10)


def close_zygotes() -> None:
    """End the zygotes no live worker needs (a run has ended; kept engines keep theirs)."""
    ZYGOTES.close()


def settle_zygotes() -> float:
    """Wait until no zygote is importing vLLM (not beside measured cells); the seconds waited."""
    return ZYGOTES.settle(settings().engine_start_timeout)
