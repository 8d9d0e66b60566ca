"""Every metric specbench reports, declared once.

One :class:`MetricSpec` per metric: where its value is held (a
:class:`~specbench.results.summary.GroupSummary` field, a server cell's
latency distribution, or a headline row), its name for people, unit,
direction, digits, which commands use it, and a one-line definition with the
unit of its n. compare, gate, history, trend, ``specbench.load()`` frames,
the report's number formatting and early stopping read their metric sets from
here (see the ``*_metrics`` functions); none keeps its own list.

Adding a metric is one entry here: with ``compute`` (how a group's value is
computed from its pooled counters and its requests) the analysis stores it in
the group's ``metrics`` (no summary field of its own), and its flags put it in
the report's results table (``table``, formatted as ``fmt`` says), the gate's
rules (``gate``, with ``max_drop_pct`` as its default rule), the history
database (``history``) and ``specbench.load()``'s groups frame (``history``).
The metrics computed before this existed keep their own summary fields and
analysis steps (:func:`held` finds either).

Names: a metric is addressed as its ``name``; an ``indexed`` one as
``<name>.<i>`` (per position, 1-based) or ``<name>.<key>`` (accuracy's scorer
keys); :func:`spec` resolves any of them. A group's slices (category, turn,
input length, round) are dimensions, not metrics: :data:`DIMENSIONS`.

Digits: the report's won where copies disagreed: τ, speedup and per-position
acceptance have 2 decimals everywhere (compare had 2, 2 and 3, trend 3, 3 and
3); ``digits=None`` means three significant digits (:func:`digits`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from specbench.results import degeneracy
from specbench.results.slices import SLICE_KEYS

if TYPE_CHECKING:
    from specbench.results.records import RequestRecord, SpecCounters
    from specbench.stats import Estimate

Direction = Literal["higher", "lower", "none"]
Source = Literal["group", "serving", "headline"]
#: How a value is written in a table: ``number`` (the metric's digits), ``percent`` (one decimal, ×100),
#: ``rate`` (tok/s: three significant digits), ``ratio`` (``1.23×``), ``positions`` (per position, ``/``-joined).
Format = Literal["number", "percent", "rate", "ratio", "positions"]
#: How a group's value is computed from its pooled counters (None for a baseline) and its requests.
Compute = Callable[["SpecCounters | None", "Sequence[RequestRecord]"], "Estimate | None"]


@dataclass(frozen=True)
class MetricSpec:
    name: str  # as commands, rule files and the history database address it
    label: str
    unit: str  # "" for a count or ratio without unit
    direction: Direction  # which way is better; "none": neither (a count, a verdict)
    digits: int | None  # decimals when printed; None: three significant digits
    definition: str  # formula, and the unit of its n
    source: Source = "group"
    field: str | None = None  # where the value is held (default: ``name``); dotted for a nested model's field
    indexed: Literal["position", "key"] | None = None  # per_position.<i> / accuracy.<key>
    gate: bool = False  # compared by `compare` and gated by `gate` (rules and baselines name it)
    history: bool = False  # stored per run in the history database (and trend)
    speed: bool = False  # measured in time: within-run intervals miss drift between runs
    stop: str | None = None  # the suite's `stop: {metric: …}` name when it can be early-stopped
    verdict: bool = False  # a verdict text, not a number
    # How the analysis computes it (held in the group's ``metrics``); None: an analysis step of its own
    # fills the summary field named by ``field``/``name``.
    compute: Compute | None = None
    table: str | None = None  # its column's header in the report's results table (None: not a column)
    fmt: Format = "number"
    on_baseline: str | None = None  # what the results table shows for a baseline group (None: its value)
    own_n: bool = False  # its n counts something else than the group's requests (repeats): always shown
    max_drop_pct: float | None = None  # the gate's default rule: largest allowed drop (None: no default rule)

    @property
    def summary_field(self) -> str:
        return self.field or self.name

    @property
    def higher_is_better(self) -> bool:
        return self.direction != "lower"

    @property
    def column(self) -> str:
        """A table column's name: the label, with the unit when it is a time (``TPOT (s)``)."""
        return f"{self.label} ({self.unit})" if self.unit == "s" else self.label


_M = MetricSpec

CATALOG: tuple[MetricSpec, ...] = (
    _M("tau", "τ", "tokens/step", "higher", 2,
       "vLLM's mean acceptance length: 1 + accepted draft tokens / drafts, pooled over the group's requests "
       "(per drafting step, bonus token counted, drafts accepted past EOS or max_tokens included); n: requests",
       gate=True, history=True, stop="tau", table="τ [95% CI]", max_drop_pct=3),
    _M("tau_per_request", "τ (request mean)", "tokens/step", "higher", 2,
       "mean over requests of each request's τ; n: requests", gate=True, history=True, table="τ per request"),
    _M("tokens_per_step", "tokens per step", "tokens/step", "higher", 2,
       "Σ committed tokens / Σ target forward passes: (output tokens − 1) over verification steps with or "
       "without a draft (the prefill pass and its token not counted), pooled; n: requests"),
    _M("tokens_per_step_per_request", "tokens per step (request mean)", "tokens/step", "higher", 2,
       "mean over requests of (output tokens − 1) / verification steps; n: requests"),
    _M("terminal_overcount", "terminal overcount", "", "lower", 3,
       "share of the tokens τ counts (accepted + 1 per drafting step) that lie past EOS or max_tokens and are "
       "never emitted, pooled; n: requests (Wilson over those tokens when every request has none)"),
    _M("draft_rate", "draft rate", "", "none", 3,
       "drafting steps / verification steps, pooled; exact (1) for a method that always drafts; n: requests "
       "(Wilson over steps when every request's share is 0 or 1)"),
    _M("degenerate_share", "degenerate outputs", "", "lower", 3,
       f"share of the group's successful requests whose output is degenerate: its final repeating cycle (period ≤ "
       f"{degeneracy.MAX_PERIOD} tokens, two periods or more) covers more than half of it; outputs under "
       f"{degeneracy.MIN_TOKENS} tokens are short, not degenerate; Wilson; n: requests",
       gate=True, history=True, compute=degeneracy.degenerate_share, table="Degenerate", fmt="percent"),
    _M("short_share", "short outputs", "", "none", 3,
       f"share of the group's successful requests with fewer than {degeneracy.MIN_TOKENS} output tokens (judged by "
       "neither repetition measure); Wilson; n: requests", history=True, compute=degeneracy.short_share),
    _M("non_degenerate.tau", "τ (non-degenerate)", "tokens/step", "higher", 2,
       "τ pooled from the per-request counters of the group's requests whose output is not degenerate; "
       "n: those requests", history=True),
    _M("non_degenerate.tokens_per_step", "tokens per step (non-degenerate)", "tokens/step", "higher", 2,
       "tokens per step pooled over the group's requests whose output is not degenerate; n: those requests",
       history=True),
    _M("non_degenerate.speedup", "speedup (non-degenerate)", "×", "higher", 2,
       "speedup over the baseline on the prompts where neither arm's output is degenerate, paired by prompt "
       "(speed_estimators.throughput_ratio); n: those prompts", history=True, speed=True),
    _M("per_position", "acceptance at position i", "", "higher", 2,
       "accepted tokens at draft position i / drafts (pooled); n: requests", indexed="position", gate=True,
       history=True, table="Per-position acceptance", fmt="positions"),
    _M("draft_acceptance_rate", "draft acceptance rate", "", "higher", 2,
       "accepted draft tokens / draft tokens (pooled); n: requests", history=True, table="Draft acceptance"),
    _M("output_tps", "output tok/s per stream", "tok/s", "higher", None,
       "Σ output tokens / Σ request latency (speed_estimators.token_rate); n: requests", gate=True, history=True, speed=True,
       table="Output tok/s per request", fmt="rate"),
    _M("throughput_tps", "throughput", "tok/s", "higher", None,
       "Σ output tokens / cell wall time (speed_estimators.token_rate), t-interval over repeats; n: repeats", history=True, speed=True,
       table="Aggregate tok/s", fmt="rate", own_n=True),
    _M("latency_s", "latency", "s", "lower", None, "mean request latency; n: requests", history=True, speed=True),
    _M("ttft_s", "TTFT", "s", "lower", None, "mean time to first token; n: requests", history=True, speed=True),
    _M("speedup", "speedup", "×", "higher", 2,
       "(Σ tokens / Σ latency) over the baseline group's, paired by prompt (speed_estimators.throughput_ratio); "
       "n: prompts",
       gate=True, history=True, speed=True, stop="speedup", table="Speedup", fmt="ratio",
       on_baseline="1× (baseline)", max_drop_pct=5),
    _M("greedy_match", "greedy identity", "", "higher", 3,
       "share of prompts whose output equals the baseline's (T=0); n: prompts", gate=True, history=True,
       table="Greedy match", fmt="percent", on_baseline="–"),
    _M("accuracy", "accuracy", "", "higher", 3,
       "mean over prompts of each prompt's share of samples scored correct by <key>'s scorer (pass@1 with several "
       "samples); n: prompts, not samples (a prompt's samples are resampled together; Wilson over prompts when "
       "every prompt scored 0, or every one 1)",
       indexed="key", gate=True, history=True, stop="accuracy", max_drop_pct=0),
    _M("accuracy_delta", "accuracy change", "", "higher", 3,
       "accuracy minus the baseline group's, paired by prompt; n: prompts", indexed="key", history=True),
    _M("latency_p50_s", "latency p50", "s", "lower", None, "median request latency; n: requests", history=True),
    _M("latency_p90_s", "latency p90", "s", "lower", None, "90th percentile of request latency; n: requests",
       history=True),
    _M("latency_p99_s", "latency p99", "s", "lower", None, "99th percentile of request latency; n: requests",
       history=True),
    _M("tpot_s", "TPOT", "s", "lower", None,
       "Σ (latency − TTFT) / Σ (output tokens − 1) (speed_estimators.tpot); n: requests", stop="tpot", speed=True),
    _M("step_time_s", "time per decoding step", "s", "lower", None,
       "Σ (latency − TTFT) / Σ target forward passes after the prefill (verification steps with or without a "
       "draft; speed_estimators.step_time); n: requests", speed=True),
    _M("goodput", "goodput", "req/s", "higher", None,
       "requests that succeeded and met every SLO of the suite's `slo:` (TTFT, TPOT, end-to-end latency, each at "
       "most its objective: vLLM's request_goodput) per second of the group's cell wall time, summed over "
       "repeats (speed_estimators.goodput); interval: the Wilson interval of the share meeting them times "
       "requests / wall time (the wall held fixed); n: requests sent", gate=True, history=True, speed=True),
    _M("goodput_share", "share meeting the SLOs", "", "higher", 3,
       "share of the group's requests sent that succeeded and met every SLO of the suite's `slo:`; Wilson; "
       "n: requests sent", history=True, speed=True),
    _M("n_requests", "requests", "", "none", 0, "requests measured (latest record per prompt, sample, repeat)"),
    _M("n_errors", "errors", "", "lower", 0, "requests that returned an error"),
    _M("output_tokens", "output tokens", "tokens", "none", 0, "Σ output tokens of the group's requests"),
    _M("counters.num_drafts", "drafts", "", "none", 0, "drafting steps (vLLM spec_decode_num_drafts)"),
    _M("counters.num_draft_tokens", "draft tokens", "", "none", 0, "draft tokens proposed"),
    _M("counters.num_accepted_tokens", "accepted tokens", "", "none", 0, "draft tokens accepted"),
    _M("counters.accepted_per_pos", "accepted per position", "", "none", 0, "draft tokens accepted at each position"),
    _M("verification.drafted_per_step", "drafted per step", "tokens/step", "none", 2,
       "draft tokens sent to the target per verification step; n: requests"),
    _M("verification.accepted_per_verified", "accepted per verified", "", "higher", 2,
       "accepted / draft tokens verified; n: requests"),
    _M("verification.wasted_per_emitted", "wasted per emitted", "", "lower", 2,
       "(draft tokens − accepted) per output token; n: requests"),
    _M("equivalence", "equivalence", "", "none", None,
       "sampled output distribution against the baseline's (worst verdict; overall and per test)", history=True,
       verdict=True),
    *(_M(f"serving.{q}_{p}_s", f"{label} {p} (server)", "s", "lower", None,
         f"{p[1:]}th percentile of the server cell's {label}; n: requests", source="serving", field=f"{q}.{p}",
         history=True)
      for q, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("latency", "latency"))
      for p in ("p50", "p90", "p99")),
    _M("tau_ratio", "τ ratio to the reference method", "×", "higher", 2,
       "pooled τ of the method over the reference's on the prompts both measured; n: prompts",
       source="headline", gate=True),
    _M("speedup_ratio", "speedup ratio to the reference method", "×", "higher", 2,
       "(Σ tokens / Σ latency) of the method over the reference's, paired by prompt "
       "(speed_estimators.throughput_ratio; with speed rounds the geometric mean of round_log_ratio's per-round "
       "ratios); n: prompts",
       source="headline", gate=True, speed=True),
)

_index: tuple[tuple[MetricSpec, ...], dict[str, MetricSpec]] = ((), {})


def by_name() -> dict[str, MetricSpec]:
    """``{name: declaration}`` of :data:`CATALOG` as it is now (a test or plugin may extend it)."""
    global _index
    if _index[0] is not CATALOG:
        _index = (CATALOG, {m.name: m for m in CATALOG})
    return _index[1]


@dataclass(frozen=True)
class TauDefinition:
    """One way of counting tokens per step, as published numbers use it (a reference's ``definition``)."""

    name: str
    metric: str  # the measured metric a published value of this definition is compared with
    formula: str
    used_by: str


#: The report's glossary, and what a suite's ``references: definition:`` may name.
TAU_DEFINITIONS: tuple[TauDefinition, ...] = (
    TauDefinition("vllm_tau", "tau", "1 + accepted draft tokens / drafts, pooled over every drafting step; "
                  "drafts accepted past EOS or max_tokens count, steps without a draft do not",
                  "vLLM (/metrics, per-request mean_acceptance_length), vllm bench serve (acceptance length), "
                  "speculators' evaluations (vLLM's number); AIPerf's token-weighted mean of vLLM's per-request τ"),
    TauDefinition("vllm_tau_per_request", "tau_per_request", "mean over requests of each request's vllm_tau",
                  "AIPerf (request mean of vLLM's per-request τ; vLLM issue 42508 shows how far it is from pooled)"),
    TauDefinition("tokens_per_step", "tokens_per_step", "committed output tokens / target verification steps "
                  "(with or without a draft; the prefill and its token not counted), pooled",
                  "DeepSpec's eval (the DSpark paper's Table 1: Σ accepted+1 per verification step, cut at EOS, "
                  "over all steps); what a speedup follows"),
    TauDefinition("tokens_per_step_per_request", "tokens_per_step_per_request",
                  "mean over requests of each request's tokens_per_step", "—"),
    TauDefinition("unknown", "tau", "the source states no formula and has no code to read it from: shown beside "
                  "vllm_tau, not compared as equal", "—"),
)
TAU_DEFINITION_BY_NAME: dict[str, TauDefinition] = {d.name: d for d in TAU_DEFINITIONS}
DEFAULT_TAU_DEFINITION = "vllm_tau"  # a suite's τ reference without a definition (with a warning)


def reference_metric(metric: str, definition: str | None) -> str:
    """The measured metric a published value is compared with: a τ reference's by its definition."""
    if metric != "tau":
        return metric
    return TAU_DEFINITION_BY_NAME[definition or DEFAULT_TAU_DEFINITION].metric

#: Dimensions of a group (not metrics): its key, and the optional slice keys (:mod:`specbench.results.slices`).
GROUP_KEYS: tuple[str, ...] = ("k", "temperature", "batch_size", "request_rate")
DIMENSIONS: tuple[str, ...] = GROUP_KEYS + SLICE_KEYS


def family(metric: str) -> str:
    """``per_position.2`` → ``per_position``; ``accuracy.strict`` → ``accuracy``; ``serving.ttft_p50_s`` kept."""
    if metric in by_name():
        return metric
    return metric.split(".", 1)[0]


def spec(metric: str) -> MetricSpec | None:
    """The declaration of a metric name (``per_position.3``, ``accuracy.strict`` included); None if unknown."""
    return by_name().get(family(metric))


def label(metric: str) -> str:
    """A metric's name for people (the name itself when unknown)."""
    m = spec(metric)
    return metric if m is None else m.label


def higher_is_better(metric: str) -> bool:
    """Unknown metrics count as higher-is-better, as compare always did."""
    m = spec(metric)
    return True if m is None else m.higher_is_better


def digits(metric: str, value: float | None) -> int:
    """Decimals for a value of ``metric``: its declared digits, else three significant digits."""
    m = spec(metric)
    if m is not None and m.digits is not None:
        return m.digits
    if value is not None and 0 < abs(value) < 1:
        return min(6, 2 - math.floor(math.log10(abs(value))))
    a = abs(value) if value is not None else 0.0
    return 0 if a >= 100 else 1 if a >= 10 else 2


# -- the metric sets of each consumer -------------------------------------------------------------


def gate_metrics(source: Source = "group") -> tuple[MetricSpec, ...]:
    """What ``compare`` compares and ``gate`` gates (per group, or the headline's ratios)."""
    return tuple(m for m in CATALOG if m.gate and m.source == source)


def history_metrics(source: Source = "group") -> tuple[MetricSpec, ...]:
    """What the history database stores per run (and ``trend`` draws)."""
    return tuple(m for m in CATALOG if m.history and m.source == source)


def speed_metrics() -> frozenset[str]:
    return frozenset(m.name for m in CATALOG if m.speed)


def speed_specs(source: Source = "group") -> tuple[MetricSpec, ...]:
    """The metrics measured in time, per group (or the headline's ratios): what an A/A calibration covers."""
    return tuple(m for m in CATALOG if m.speed and m.source == source)


def stop_metrics() -> dict[str, MetricSpec]:
    """``{stop rule name: metric}`` of the metrics a suite can early-stop on."""
    return {m.stop: m for m in CATALOG if m.stop is not None}


def metric_pattern(source: Source = "group") -> str:
    """A regex of the gated metric names (``per_position.<i>``, ``accuracy.<key>``)."""
    alts = []
    for m in gate_metrics(source):
        alts.append(m.name + (r"\.[1-9][0-9]*" if m.indexed == "position" else r"\..+" if m.indexed == "key" else ""))
    return "^(" + "|".join(alts) + ")$"


def gate_names_help(source: Source = "group") -> str:
    """``tau, tau_per_request, per_position.<i>, …`` for error messages."""
    return ", ".join(m.name + (".<i>" if m.indexed == "position" else ".<key>" if m.indexed == "key" else "")
                     for m in gate_metrics(source))


def table_metrics() -> tuple[MetricSpec, ...]:
    """The columns of the report's results table, in catalogue order."""
    return tuple(m for m in CATALOG if m.table is not None and m.source == "group")


def computed_metrics() -> tuple[MetricSpec, ...]:
    """The metrics the analysis computes from their declaration (held in a group's ``metrics``)."""
    return tuple(m for m in CATALOG if m.compute is not None)


def held(group: Any, m: MetricSpec) -> Any:
    """Where a summary (a group, a serving cell, a headline row) holds ``m``'s value: its ``metrics`` for a
    computed metric, else its field (dotted for a nested model's); None where absent."""
    if m.compute is not None:
        return (getattr(group, "metrics", None) or {}).get(m.name)
    v = group
    for part in m.summary_field.split("."):
        v = getattr(v, part, None)
    return v
