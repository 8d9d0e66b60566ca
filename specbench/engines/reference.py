"""Reference simulator (engine: reference): exact greedy chain acceptance, no vLLM.

For each prompt the target (transformers, float32) decodes its greedy
continuation once; its states over prompt + continuation are captured
(:mod:`specbench.zoo.capture`). The simulator then walks that continuation
the way vLLM's greedy speculative decoding does:

* the prefill emits the first token, which is the first round's anchor;
* at each round's anchor the drafter proposes K tokens as its method does
  (:mod:`specbench.zoo.proposers`), seeing only what an engine would know;
* the accepted prefix is the drafts' longest prefix equal to the target's
  greedy tokens; the round emits it plus the target's bonus token, and the
  next anchor is that bonus token;
* rounds continue until the request would finish (max_tokens, EOS, stop
  string); like vLLM, the last round counts all of its drafts and
  acceptances even when the output is cut after it.

So ``output_token_ids`` are the target's greedy tokens (equal to a vLLM
baseline up to floating-point ties) and the counters are those vLLM would
report with a drafter that behaves exactly like the checkpoint's training
code. Temperature 0 only.

Drafter forward passes: neither ``RequestRecord`` nor ``CellOutcome`` has a
field for them, so the engine keeps per-request and per-cell tallies in
:attr:`ReferenceEngine.stats` (also in :meth:`describe`).
"""

from __future__ import annotations

import time
from typing import Any

from specbench.config.methods import VllmPassthrough
from specbench.config.plan import EngineConfig
from specbench.engines.protocol import (
    CellFailed,
    EmitRecord,
    EngineCapabilities,
    EngineUnavailable,
    cannot_score,
)
from specbench.results.records import RequestRecord, SpecCounters, StepTrace
from specbench.results.requests import CellOutcome, CellRequest, PreparedPrompt, ScoreItem, ScoreResult

SIMULATED = ("baseline", "eagle3", "p-eagle", "dflash", "dspark", "draft_model")


class TargetDecodes:
    """The target's greedy decodes and captured states, kept across the engines of one
    host process (:mod:`specbench.engines.child` serves a run's reference engines one
    after another): every engine of a target replays the same prompts, and the decode
    is most of a request's time.

    Exact reuse only: a longer continuation's prefix is a shorter one (the decode is
    incremental, token by token, so its first ``n`` steps are the same computation);
    states are reused only for the very same sequence.
    """

    def __init__(self) -> None:
        self._continuations: dict[tuple[str, tuple[int, ...]], list[int]] = {}
        self._aux: dict[tuple[str, tuple[int, ...]], Any] = {}

    def continuation(self, model_path: str, target: Any, prompt_ids: list[int], n: int) -> list[int]:
        import torch

        from specbench.zoo.capture import greedy_continue

        key = (model_path, tuple(prompt_ids))
        cached = self._continuations.get(key)
        if cached is None or len(cached) < n:
            cached = greedy_continue(target, torch.tensor([prompt_ids], dtype=torch.long), n)[0].tolist()
            self._continuations[key] = cached
        return cached[:n]

    def aux(self, model_path: str, target: Any, ids: list[int]) -> Any:
        import torch

        from specbench.zoo.capture import capture_states

        key = (model_path, tuple(ids))
        if key not in self._aux:
            self._aux[key] = capture_states(target, torch.tensor([ids], dtype=torch.long))["aux"]
        return self._aux[key]


DECODES = TargetDecodes()


class ReferenceEngine:
    """``ReferenceEngine(config, model_path, speculator_path)``.

    ``model_path``: the target (local dir or hub id, loaded with
    transformers); ``speculator_path``: the drafter checkpoint (a speculators
    checkpoint, or a causal LM for ``draft_model``; equal to ``model_path``
    for self-drafting). The runner resolves ``tiny`` / ``tiny:<kind>`` /
    ``target`` into these paths.
    """

    def __init__(self, config: EngineConfig, model_path: str, speculator_path: str | None = None):
        self.config = config
        self.model_path = str(model_path)
        self.speculator_path = None if speculator_path is None else str(speculator_path)
        self.method = config.method.method
        spec = config.speculative_config or {}
        self.k: int | None = spec.get("num_speculative_tokens")  # one K per engine (plan.at_k)
        self.spec_config = spec
        self.tok: Any = None
        self.target: Any = None
        self.proposer: Any = None
        self.stats: dict[str, Any] = {"rounds": 0, "drafter_forward_passes": 0, "requests": 0, "cells": {}}

    CAPABILITIES = EngineCapabilities(kind="reference")

    @property
    def capabilities(self) -> EngineCapabilities:
        return self.CAPABILITIES

    @property
    def alive(self) -> bool:
        """Started and not closed (it runs in this process)."""
        return self.target is not None

    def describe(self) -> VllmPassthrough:
        return {
            "engine": "reference",
            "model": self.model_path,
            "speculator": self.speculator_path,
            "method": self.method,
            "num_speculative_tokens": self.k,
            "speculative_config": self.spec_config,
            "dtype": "float32",
            "stats": {k: v for k, v in self.stats.items() if k != "cells"},
        }

    def start(self) -> None:
        if self.method not in SIMULATED:
            raise EngineUnavailable(
                f"the reference engine does not simulate {self.method!r} (it does: {', '.join(SIMULATED)})",
                skipped=True,
            )
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
            from transformers.utils import logging as hf_logging

            from specbench.zoo.proposers import load_proposer

            hf_logging.disable_progress_bar()  # no "Loading weights" bar per checkpoint in the run's output
            self.tok = AutoTokenizer.from_pretrained(self.model_path)
            self.target = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32).eval()
            if self.method != "baseline":
                if self.speculator_path is None:
                    raise ValueError(f"{self.method} needs a speculator checkpoint")
                if not self.k:
                    raise ValueError(f"{self.method} needs num_speculative_tokens")
                same = self.speculator_path == self.model_path
                self.proposer = load_proposer(
                    self.method, self.speculator_path, self.spec_config, target=self.target if same else None
                )
                max_k = getattr(self.proposer, "max_k", None)
                if max_k is not None and self.k > max_k:
                    raise ValueError(f"{self.method} checkpoint drafts at most {max_k} tokens, K={self.k}")
        except EngineUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as the engine's start failure
            raise EngineUnavailable(f"{type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        self.tok = self.target = self.proposer = None

    def kill(self) -> None:
        """In-process: nothing to kill beyond dropping the models (its host process is killed by :class:`ChildEngine`)."""
        self.close()

    def score(self, items: list[ScoreItem]) -> list[ScoreResult]:
        raise cannot_score(self)

    # ------------------------------------------------------------------

    def _prompt_ids(self, p: PreparedPrompt) -> list[int]:
        """Token ids as vLLM builds them (chat: template text, no extra special tokens)."""
        if p.messages is not None:
            kw = dict(self.config.target.chat_template_kwargs)
            text = self.tok.apply_chat_template(p.messages, tokenize=False, add_generation_prompt=True, **kw)
            return self.tok(text, add_special_tokens=False)["input_ids"]
        return self.tok(p.text or "")["input_ids"]

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for src in (getattr(self.target, "generation_config", None), self.target.config):
            e = getattr(src, "eos_token_id", None)
            ids.update(e if isinstance(e, list) else [] if e is None else [e])
        if self.tok.eos_token_id is not None:
            ids.add(self.tok.eos_token_id)
        return ids

    def _finish(self, new: list[int], max_tokens: int, stop: list[str] | None) -> tuple[int, str]:
        """How many generated tokens the request keeps, and its finish reason."""
        eos = self._eos_ids()
        for i, t in enumerate(new[:max_tokens]):
            if t in eos:
                return i + 1, "stop"
            if stop:
                text = self.tok.decode(new[: i + 1], skip_special_tokens=True)
                if any(s in text for s in stop):
                    return i + 1, "stop"
        return min(len(new), max_tokens), "length"

    def _output_text(self, ids: list[int], stop: list[str] | None) -> str:
        text = self.tok.decode(ids, skip_special_tokens=True)
        for s in stop or []:
            j = text.find(s)
            if j >= 0:
                text = text[:j]
        return text

    def simulate(
        self, prompt_ids: list[int], max_tokens: int, stop: list[str] | None = None
    ) -> dict[str, Any]:
        """One request: its output tokens, finish reason, counters and drafter passes."""
        import torch

        k = self.k or 0
        cont = DECODES.continuation(self.model_path, self.target, prompt_ids, max_tokens + k + 1)
        keep, reason = self._finish(cont, max_tokens, stop)
        spec = None
        rounds: list[dict[str, int]] = []
        if self.proposer is not None:
            full = torch.tensor([prompt_ids + cont], dtype=torch.long)
            aux = None if self.method == "draft_model" else DECODES.aux(self.model_path, self.target, prompt_ids + cont)
            spec = SpecCounters(accepted_per_pos=[0] * k)
            n = len(prompt_ids)  # anchor: the prefill's token
            emitted = 1
            while emitted < keep:
                ctx_aux = None if aux is None else aux[:, :n]
                prop = self.proposer.propose(full[:, : n + 1], ctx_aux, k)
                truth = full[0, n + 1 : n + 1 + len(prop.tokens)].tolist()
                a = 0
                while a < len(prop.tokens) and prop.tokens[a] == truth[a]:
                    a += 1
                spec.num_drafts += 1
                spec.num_draft_tokens += len(prop.tokens)
                spec.num_accepted_tokens += a
                for i in range(a):
                    spec.accepted_per_pos[i] += 1
                rounds.append(
                    {"anchor": n, "drafted": len(prop.tokens), "accepted": a, "forwards": prop.forward_passes}
                )
                n += a + 1
                emitted += a + 1
        out = cont[:keep]
        return {
            "output_token_ids": out,
            "output_text": self._output_text(out, stop),
            "finish_reason": reason,
            "spec": spec,
            "rounds": rounds,
            "drafter_forward_passes": sum(r["forwards"] for r in rounds),
        }

    def run_cell(self, request: CellRequest, emit: EmitRecord) -> CellOutcome:
        if self.target is None:
            raise CellFailed("engine is not started", engine_dead=True)
        s = request.sampling
        if s.temperature != 0:
            raise CellFailed(
                f"the reference engine simulates greedy decoding only (temperature {s.temperature})"
            )
        t0 = time.perf_counter()
        pooled = None if self.proposer is None else SpecCounters(accepted_per_pos=[0] * (self.k or 0))
        n = 0
        cell_stats: dict[str, Any] = {"rounds": 0, "drafter_forward_passes": 0, "requests": {}}
        try:
            for p in request.prompts:
                todo = [i for i in range(s.samples_per_prompt) if (p.prompt_id, i) not in request.skip]
                if not todo:
                    continue
                pids = self._prompt_ids(p)
                res = self.simulate(pids, p.max_tokens or s.max_tokens, s.stop)
                lps = self._logprobs(pids, res["output_token_ids"], s.logprobs) if s.logprobs else None
                for i in todo:
                    emit(
                        RequestRecord(
                            run_id=request.run_id,
                            cell_id=request.cell.cell_id,
                            engine_key=self.config.key,
                            prompt_id=p.prompt_id,
                            repeat=request.cell.repeat,
                            sample_index=i,
                            seed=s.seed,
                            prompt_tokens=len(pids),
                            output_token_ids=res["output_token_ids"],
                            output_text=res["output_text"],
                            finish_reason=res["finish_reason"],
                            spec=res["spec"],
                            steps=None if res["spec"] is None else StepTrace(
                                drafted=[r["drafted"] for r in res["rounds"]],
                                accepted=[r["accepted"] for r in res["rounds"]], complete=True, source="reference"),
                            logprobs=lps,
                        )
                    )
                    n += 1
                    if pooled is not None and res["spec"] is not None:
                        pooled = pooled + res["spec"]
                    cell_stats["rounds"] += len(res["rounds"])
                    cell_stats["drafter_forward_passes"] += res["drafter_forward_passes"]
                cell_stats["requests"][p.prompt_id] = {
                    "rounds": len(res["rounds"]),
                    "drafter_forward_passes": res["drafter_forward_passes"],
                }
        except CellFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - a cell failure, the engine stays usable
            raise CellFailed(f"{type(exc).__name__}: {exc}") from exc
        self.stats["cells"][request.cell.cell_id] = cell_stats
        self.stats["rounds"] += cell_stats["rounds"]
        self.stats["drafter_forward_passes"] += cell_stats["drafter_forward_passes"]
        self.stats["requests"] += n
        return CellOutcome(counters=pooled, wall_time_s=time.perf_counter() - t0, num_requests=n)

    def _logprobs(self, prompt_ids: list[int], out: list[int], top: int) -> list[dict[int, float]]:
        """The target's top-``top`` logprobs (plus the chosen token) at each generated position."""
        import torch

        full = torch.tensor([prompt_ids + out], dtype=torch.long)
        with torch.no_grad():
            logits = self.target(input_ids=full).logits[
                0, len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(out)
            ]
        lp = torch.log_softmax(logits.float(), dim=-1)
        res = []
        for i, t in enumerate(out):
            vals, idx = lp[i].topk(top)
            d = {int(j): float(v) for j, v in zip(idx, vals, strict=True)}
            d[int(t)] = float(lp[i, t])
            res.append(d)
        return res
