"""The speed estimators: every rate, time and ratio of speed specbench reports, written once.

Each function takes sums already taken (numbers or numpy arrays, as :func:`specbench.results.counters.tau`
does), so the caller keeps its own pooling and masking; a ratio of two arms takes the **method first,
then the baseline** (or the reference, or A/B's arm A: whatever it is compared with).

* :func:`token_rate` = tokens / seconds. *Output tok/s per stream*: Σ output tokens / Σ request latency
  (the rate one stream sees); *throughput*: Σ output tokens / the cell's wall time (all streams together).
* :func:`rate_ratio` = (a / b) / (c / d): one rate over another, the shape every ratio below takes.
* :func:`throughput_ratio` = (tokens_m / seconds_m) / (tokens_b / seconds_b): the ratio of two token
  rates. The *speedup* (per-stream rates, paired by prompt), the headline's *speedup ratio* (the reference
  in the baseline's place), the serving *throughput speedup* (per-stream rates of each arm's requests) and
  the serving table's aggregate tok/s ratio (wall-time rates).
* :func:`tpot` = decode seconds / tokens after the first: TPOT as ``vllm bench serve`` defines it; pooled,
  Σ (latency − TTFT) / Σ (output tokens − 1); of one request, its own decode time over its own tokens.
* :func:`tpot_ratio` = tpot(baseline) / tpot(method), each pooled (Σ decode / Σ (tokens − 1) over the
  arm's requests): the serving *TPOT speedup* (> 1: the method is faster).
* :func:`step_time` = decode seconds / decoding steps: time per decoding step (target forward passes after
  the prefill), pooled Σ decode time / Σ steps.
* :func:`round_log_ratio` = log(method / baseline) of one round's metric in each arm: the paired
  observation of an A/B (arm B as the method, A as the baseline) and of the headline in a run with
  speed rounds (the method's pooled TPOT over the reference's; the row shows its reciprocal).
* :func:`goodput` = requests meeting every SLO / seconds of wall time: vLLM's ``request_goodput`` (``vllm bench
  serve``: good requests over the benchmark's duration); a group's over its cells' wall time, a round's over
  that round's.
* :func:`goodput_ratio` = (good_m / seconds_m) / (good_b / seconds_b): requests that met every SLO per
  second of wall time, the method's over the baseline's at the same load.
* :func:`predicted_speedup` = tokens per step × t(plain step) / t(step at K): the K model's speedup over
  no speculation (one token per plain step), from the predicted tokens per step and the two step times.

Callers use them as ``speed_estimators.f(...)`` (the module's attribute) so that one patch of this module
reaches every number computed with it (``tests/unit/results/test_speed_estimators.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def token_rate(tokens: Any, seconds: Any) -> Any:
    """Tokens per second: Σ tokens / Σ seconds (per stream: latency; throughput: wall time)."""
    return tokens / seconds


def rate_ratio(amount_m: Any, per_m: Any, amount_b: Any, per_b: Any) -> Any:
    """The shape of every speed ratio, written once: (amount_m / per_m) / (amount_b / per_b), one rate over
    another (the estimators below say which amounts and which arm is on top)."""
    return (amount_m / per_m) / (amount_b / per_b)


def throughput_ratio(tokens_m: Any, seconds_m: Any, tokens_b: Any, seconds_b: Any) -> Any:
    """The method's token rate over the baseline's: (tokens_m / seconds_m) / (tokens_b / seconds_b)."""
    return rate_ratio(tokens_m, seconds_m, tokens_b, seconds_b)


def tpot(decode_s: Any, tokens_after_first: Any) -> Any:
    """Time per output token after the first: decode seconds (latency − TTFT) / (output tokens − 1)."""
    return decode_s / tokens_after_first


def tpot_ratio(decode_m: Any, tokens_m: Any, decode_b: Any, tokens_b: Any) -> Any:
    """TPOT speedup: the baseline's pooled TPOT over the method's, (decode_b / tokens_b) / (decode_m / tokens_m)
    (decode seconds and tokens after the first, each summed over the arm's requests; > 1: the method is faster)."""
    return rate_ratio(decode_b, tokens_b, decode_m, tokens_m)


def step_time(decode_s: Any, steps: Any) -> Any:
    """Time per decoding step: decode seconds / target forward passes after the prefill."""
    return decode_s / steps


def round_log_ratio(method: Any, baseline: Any) -> Any:
    """The paired log ratio of one round: log(method / baseline) of the metric measured in each arm."""
    return np.log(method / baseline)


def goodput(good: Any, seconds: Any) -> Any:
    """Requests meeting every SLO per second of wall time (vLLM's ``request_goodput``)."""
    return good / seconds


def goodput_ratio(good_m: Any, seconds_m: Any, good_b: Any, seconds_b: Any) -> Any:
    """Goodput of the method over the baseline's: (requests meeting every SLO / wall seconds), method over
    baseline at the same load."""
    return rate_ratio(good_m, seconds_m, good_b, seconds_b)


def predicted_speedup(tokens_per_step: Any, plain_step_s: Any, step_s: Any) -> Any:
    """The K model's speedup over no speculation: tokens per step × t(plain step) / t(step at K)."""
    return tokens_per_step * plain_step_s / step_s
