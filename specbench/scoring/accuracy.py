"""Task accuracy with uncertainty, from per-request scores (pure: numpy, no I/O).

Inputs are ``{prompt_id: [bool, ...]}`` -- one entry per prompt, one bool per
sample of that prompt (``group_scores`` builds it from ``(prompt_id, bool)``
pairs). Every prompt weighs the same, however many samples it has.

Intervals (95 % unless ``confidence`` says otherwise):

* ``accuracy``: Wilson score interval when each prompt has exactly one sample
  (independent Bernoulli trials); otherwise a percentile bootstrap over
  prompts (samples of one prompt are correlated, so they are resampled together).
* ``pass_at_k``: the unbiased estimator per prompt, averaged; percentile
  bootstrap over prompts.
* Either, when every prompt scored 0 (or every one 1): the Wilson interval over
  prompts, never the zero-width interval a bootstrap of equal values gives.
* ``paired_delta``: method minus baseline on the prompt ids both scored;
  percentile bootstrap resampling prompt ids (the pairs stay together), seeded.

Results are :class:`specbench.stats.Estimate` subclasses; ``method`` names the
interval that was used. Bootstraps default to 10 000 resamples and the
project-wide seed (``specbench.stats.DEFAULT_SEED``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from specbench.stats import CONFIDENCE, DEFAULT_SEED, Estimate, bootstrap, wilson_interval

Scores = Mapping[str, Sequence[bool]]


class AccuracyEstimate(Estimate):
    """A :class:`specbench.stats.Estimate` (``value``, ``ci_low``, ``ci_high``,
    ``n`` = prompts, ``method`` = interval) plus the samples it rests on."""

    confidence: float = CONFIDENCE
    n_samples: int = 0


class PairedDelta(AccuracyEstimate):
    """``value`` = mean over shared prompts of (method score - baseline score)."""

    method_value: float = 0.0
    baseline_value: float = 0.0
    only_in_method: int = 0
    only_in_baseline: int = 0


def group_scores(pairs: Iterable[tuple[str, bool]]) -> dict[str, list[bool]]:
    """``[(prompt_id, ok), ...]`` -> ``{prompt_id: [ok, ...]}`` (insertion order kept)."""
    out: dict[str, list[bool]] = {}
    for pid, ok in pairs:
        out.setdefault(str(pid), []).append(bool(ok))
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: ``1 - C(n-c, k) / C(n, k)`` (Chen et al., 2021).

    Computed as ``1 - prod_{i=n-c+1}^{n} (1 - k/i)``, which stays stable for
    large ``n``. ``n`` samples, ``c`` of them correct.
    """
    if not (0 <= c <= n):
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if not (1 <= k <= n):
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray,
    *,
    confidence: float = CONFIDENCE,
    n_boot: int = 10_000,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (resampling entries), by
    :func:`specbench.stats.bootstrap`; a single value is its own interval."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("no values")
    est = bootstrap(x, _means, resamples=n_boot, seed=seed, confidence=confidence, vectorized=True)
    if est.ci_low is None or est.ci_high is None:
        return float(x[0]), float(x[0])
    return est.ci_low, est.ci_high


def _means(block: np.ndarray) -> np.ndarray:
    return block.mean(axis=1)


def _check(scores: Scores) -> None:
    if not scores:
        raise ValueError("no scores")
    empty = [pid for pid, s in scores.items() if len(s) == 0]
    if empty:
        raise ValueError(f"prompts without samples: {empty[:5]}")


def accuracy(
    scores: Scores,
    *,
    confidence: float = CONFIDENCE,
    n_boot: int = 10_000,
    seed: int = DEFAULT_SEED,
) -> AccuracyEstimate:
    """Mean over prompts of each prompt's fraction of correct samples."""
    _check(scores)
    per_prompt = np.array([np.mean(s) for s in scores.values()], dtype=float)
    n_samples = sum(len(s) for s in scores.values())
    value = float(per_prompt.mean())
    if n_samples == len(scores):
        lo, hi = wilson_interval(int(round(per_prompt.sum())), len(scores), confidence)
        method = "wilson"
    else:
        lo, hi, method = _prompt_interval(per_prompt, confidence, n_boot, seed)
    return AccuracyEstimate(
        value=value,
        ci_low=lo,
        ci_high=hi,
        n=len(scores),
        method=method,
        confidence=confidence,
        n_samples=n_samples,
    )


def pass_at_k_estimate(
    scores: Scores,
    k: int,
    *,
    confidence: float = CONFIDENCE,
    n_boot: int = 10_000,
    seed: int = DEFAULT_SEED,
) -> AccuracyEstimate:
    """pass@k per prompt (needs >= k samples each), averaged over prompts."""
    _check(scores)
    short = [pid for pid, s in scores.items() if len(s) < k]
    if short:
        raise ValueError(f"pass@{k} needs at least {k} samples per prompt; {len(short)} have fewer")
    per_task = np.array([pass_at_k(len(s), int(sum(map(bool, s))), k) for s in scores.values()])
    lo, hi, method = _prompt_interval(per_task, confidence, n_boot, seed)
    n_samples = sum(len(s) for s in scores.values())
    return AccuracyEstimate(
        value=float(per_task.mean()),
        ci_low=lo,
        ci_high=hi,
        n=len(scores),
        method=method,
        confidence=confidence,
        n_samples=n_samples,
    )


def _prompt_interval(per_prompt: np.ndarray, confidence: float, n_boot: int, seed: int) -> tuple[float, float, str]:
    """The interval of a mean over prompts: a bootstrap over prompts, except when every prompt scored 0
    (or every one 1). A bootstrap of equal values has zero width, a certainty a few prompts cannot give;
    the Wilson interval over prompts (each prompt one outcome) takes its place."""
    if per_prompt.size and (np.all(per_prompt == 0) or np.all(per_prompt == 1)):
        lo, hi = wilson_interval(int(per_prompt.sum()), int(per_prompt.size), confidence)
        return lo, hi, "wilson-prompts"
    lo, hi = bootstrap_mean_ci(per_prompt, confidence=confidence, n_boot=n_boot, seed=seed)
    return lo, hi, "bootstrap-prompts"


def paired_delta(
    method: Scores,
    baseline: Scores,
    *,
    confidence: float = CONFIDENCE,
    n_boot: int = 10_000,
    seed: int = DEFAULT_SEED,
) -> PairedDelta:
    """Accuracy of ``method`` minus ``baseline`` over the prompt ids both scored.

    Each prompt's score is its fraction of correct samples; the interval is a
    seeded percentile bootstrap over the shared prompt ids.
    """
    _check(method)
    _check(baseline)
    shared = [pid for pid in method if pid in baseline]
    if not shared:
        raise ValueError("method and baseline share no prompt ids")
    m = np.array([np.mean(method[pid]) for pid in shared], dtype=float)
    b = np.array([np.mean(baseline[pid]) for pid in shared], dtype=float)
    d = m - b
    lo, hi = bootstrap_mean_ci(d, confidence=confidence, n_boot=n_boot, seed=seed)
    n_samples = sum(len(method[p]) + len(baseline[p]) for p in shared)
    return PairedDelta(
        value=float(d.mean()),
        ci_low=lo,
        ci_high=hi,
        n=len(shared),
        method="paired-bootstrap-prompts",
        confidence=confidence,
        n_samples=n_samples,
        method_value=float(m.mean()),
        baseline_value=float(b.mean()),
        only_in_method=len(method) - len(shared),
        only_in_baseline=len(baseline) - len(shared),
    )
