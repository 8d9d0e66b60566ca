"""The report's "The drafter's share of a step" section: per timed group, a decoding step's time split into
verification and drafting, each timed inside vLLM's model runner, with the drafter's memory (renders; the
numbers are :mod:`specbench.analysis.step_phases`')."""

from __future__ import annotations

from specbench.report.document import Block, Para, Section, Table
from specbench.results.fmt import fmt_est, fmt_pct
from specbench.results.step_share import StepShare
from specbench.results.summary import RunSummary
from specbench.stats import Estimate

DEFINITION = (
    "Timed inside vLLM's model runner by the `step-phase-timing` engine patch (instrumentation: "
    "`time.perf_counter` around the runner's calls; the CPU runs them synchronously). Per decoding step (a step "
    "that scheduled a prompt's prefill is left out), the mean in ms with a 95 % bootstrap interval over the "
    "steps; n: steps. **Verification**: the target's forward over the step's scheduled tokens (K+1 per request) "
    "with its input preparation, the rejection sampler and the runner's bookkeeping, each timed. **Drafting**: "
    "the drafter's proposal for the next step, timed. **Step**: execute_model + sample_tokens under one timer; "
    "**untimed**: the step less the timed phases (glue between the timers), per step. **Share**: Σ drafting / "
    "Σ step. **Engine step**: the step as the requests saw it (Σ (latency − TTFT) / Σ decoding steps), which adds "
    "the engine core's scheduling and output handling. Controls: no speculation (no drafter) and n-gram (K+1 "
    "tokens verified, a drafter that runs no model). **Drafter MiB**: its checkpoint's weight files; **KV "
    "tokens**: what the engine's KV cache holds, and the share of no speculation's it lost to the drafter's "
    "layers (the same allocation).")


def _row(r: StepShare) -> list[str]:
    def _ms(e: Estimate | None) -> str:
        return fmt_est(e, 3, n_default=r.steps)

    kv = "–" if r.kv_cache_tokens is None else f"{r.kv_cache_tokens:,}" + (
        f" (−{r.kv_tokens_lost:.1%})" if r.kv_tokens_lost else "")
    return [r.dataset, f"{r.temperature:g}", r.method, "–" if r.k is None else str(r.k), str(r.batch_size),
            str(r.steps), _ms(r.verification_ms),
            _ms(r.draft_ms), fmt_pct(r.draft_share, n_default=r.steps), _ms(r.step_ms), _ms(r.untimed_ms), _ms(r.engine_step_ms),
            "–" if r.draft_weights_mib is None else f"{r.draft_weights_mib:.2f}", kv]


def step_share_section(summary: RunSummary) -> Section | None:
    """The section, or None for a run whose engines were not timed by phase."""
    rows = summary.extra.step_shares
    if not rows:
        return None
    blocks: list[Block] = [Para(DEFINITION)]
    for target in sorted({r.target for r in rows}):
        mine = sorted((r for r in rows if r.target == target),
                      key=lambda r: (r.dataset, r.temperature, r.batch_size, r.method, r.k or 0))
        blocks.append(Section(target, [Table(
            ["Dataset", "T", "Method", "K", "Batch", "n steps", "Verification ms", "Drafting ms", "Drafting share", "Step ms",
             "Untimed ms", "Engine step ms", "Drafter MiB", "KV tokens"], [_row(r) for r in mine])], level=3))
    return Section("The drafter's share of a step", blocks, anchor="step-share")
