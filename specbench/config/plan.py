"""Suite → Plan: the cells to run and the engines they need (pure).

A *cell* is one (target, method, dataset, temperature, load, repeat). Cells
that share a target and a method configuration share one *engine*. A method
that lists several K values (``num_speculative_tokens: [1, 3, 5]``) becomes
one method per K, labelled ``<name>-k<K>`` with its ``family`` the suite's
name: vLLM fixes K per engine, so each K has its own engine.

A load is either a batch size / concurrency (``batch_size``; closed loop) or a
Poisson request rate (``request_rate`` in requests/s; open loop, server
targets only), in which case ``batch_size`` holds the optional cap on
requests in flight (``load.max_concurrency``; 0 = no cap).
"""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from specbench.config.methods import VllmPassthrough, get_method
from specbench.config.stop_rule import StopRule
from specbench.config.suite import (
    DatasetSpec,
    ExecutorSpec,
    HeadlineSpeedSpec,
    MethodSpec,
    Suite,
    SuiteError,
    TargetSpec,
    reference_method,
)
from specbench.config.suite_checks import check_semantics


class EngineConfig(BaseModel):
    """Everything needed to start one engine (the speculator still unresolved)."""

    model_config = ConfigDict(extra="forbid")

    key: str
    target: TargetSpec
    method: MethodSpec
    vllm_method: str | None
    speculative_config: VllmPassthrough | None


#: A cell's ``lossy`` under vLLM's synthetic acceptance (``rejection_sample_method: synthetic``).
SYNTHETIC = "synthetic acceptance (drafts accepted at set rates, never checked against the target)"


class Cell(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cell_id: str
    engine_key: str
    target: str
    method: str  # label
    method_kind: str  # registry name
    k: int | None
    dataset: str
    temperature: float
    batch_size: int  # concurrency; for a request-rate cell its cap on requests in flight (0: none)
    repeat: int
    request_rate: float | None = None  # Poisson arrivals (requests/s); None: closed loop at batch_size
    family: str | None = None  # the suite's method label when ``method`` is one K of a sweep ('eagle3-k3')
    stop: StopRule | None = None  # the cell may stop early (prompts in a seeded order, see specbench.analysis.sequential)
    # The prompts' requested length (a dataset's input_tokens): the cell runs that length's prompts only, and
    # its group is the input_tokens slice of the plain group (specbench.results.slices).
    input_tokens: int | None = None
    # vLLM's dynamic speculative decoding: the method's [[lo, hi, K], ...] (K by the batch size of each step).
    schedule: list[tuple[int, int, int]] | None = None
    # Why the method's outputs may differ from the target's by construction (None: lossless), e.g.
    # synthetic acceptance: its speedup maps the hardware, it is no drafter's.
    lossy: str | None = None

    @property
    def method_family(self) -> str:
        """The method as the suite names it (the same for every K of a sweep)."""
        return self.family or self.method

    @property
    def slice_id(self) -> str:
        """The cell's slice of its group as :class:`specbench.results.slices.Slice` writes it ('' for none)."""
        return "" if self.input_tokens is None else f"input_tokens={self.input_tokens}"

    @property
    def group_id(self) -> str:
        """The cell without its repeat index: repeats are pooled per group."""
        gid = group_id(self.target, self.method, self.dataset, self.temperature, self.batch_size, self.request_rate)
        return f"{gid}/{self.slice_id}" if self.slice_id else gid

    @property
    def baseline_group_key(self) -> BaselineKey:
        """Cells compared with each other: same target, dataset, temperature, load and slice."""
        return baseline_key(self.target, self.dataset, self.temperature, self.batch_size, self.request_rate,
                            self.slice_id)

    @property
    def load_label(self) -> str:
        return load_label(self.batch_size, self.request_rate)


BaselineKey = tuple[str, str, float, int, float | None, str]


def baseline_key(target: str, dataset: str, temperature: float, batch_size: int, request_rate: float | None = None,
                 slice_id: str = "") -> BaselineKey:
    """What a method's cell or group is compared with (speedup, greedy identity, paired tests): the baseline
    of the same target, dataset, temperature, load and slice (``slice_id``, see specbench.results.slices)."""
    return (target, dataset, temperature, batch_size, request_rate, slice_id)


def load_tag(batch_size: int, request_rate: float | None = None) -> str:
    """A load in an id: ``b4`` (batch size / concurrency) or ``rate2`` (a request rate)."""
    return f"b{batch_size}" if request_rate is None else f"rate{request_rate:g}"


def group_id(
    target: str, method: str, dataset: str, temperature: float, batch_size: int, request_rate: float | None = None
) -> str:
    """``…/b4`` for a concurrency (batch size) load, ``…/rate2`` for a request rate."""
    return f"{target}/{method}/{dataset}/T{temperature:g}/{load_tag(batch_size, request_rate)}"


def load_label(batch_size: int, request_rate: float | None = None) -> str:
    """A load for people: ``4`` (batch size / concurrency) or ``2 req/s`` (``≤8 in flight`` when capped)."""
    if request_rate is None:
        return str(batch_size)
    return f"{request_rate:g} req/s" + (f" (≤{batch_size} in flight)" if batch_size > 0 else "")


def plan_loads(suite: Suite) -> list[tuple[int, float | None]]:
    """The suite's loads as ``(batch_size, request_rate)``: concurrency (or batch
    size) loads first, then one per request rate (capped at ``max_concurrency``).

    A suite that lists ``request_rates`` but neither ``concurrency`` nor
    ``batch_sizes`` gets rate loads only (the default batch size 1 is not added).
    """
    load = suite.load
    closed: list[int] = list(load.concurrency or load.batch_sizes)
    rates = list(load.request_rates or [])
    if rates and not load.concurrency and "batch_sizes" not in load.model_fields_set:
        closed = []
    return [(bs, None) for bs in closed] + [(load.max_concurrency or 0, float(r)) for r in rates]


class CellSampling(BaseModel):
    """How the cells at one temperature sample: how many samples per prompt, whether they
    record top-k logprobs (greedy equivalence) and how many prompts they take (the first
    N of each dataset for the cells added for the sampled test; None: all)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float
    samples_per_prompt: int = 1
    logprobs: int | None = None
    prompt_limit: int | None = None


class LoadBounds(BaseModel):
    """What every server cell's load shares: its bounds and unrecorded warmup requests."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0


class RunDecisions(BaseModel):
    """Every decision the driver, its jobs and the engines act on beyond the cells,
    made once from the suite by :func:`expand` (not stored: the manifest keeps the
    suite, which decides them again on ``--resume``)."""

    model_config = ConfigDict(extra="forbid")

    datasets: list[DatasetSpec]
    dataset_base: str | None = None  # relative dataset paths resolve against it (the suite's directory; None: cwd)
    max_tokens: int
    top_p: float = 1.0
    seed: int = 0  # sampling seeds and the seeded prompt order of early-stopping cells
    samplings: list[CellSampling] = Field(default_factory=list)
    load: LoadBounds = Field(default_factory=LoadBounds)
    warmup: bool = True
    teacher_forcing: bool = False  # sampled equivalence: score T>0 outputs under the plain target
    rounds: int = 1  # speed rounds (round_spans, round_order; specbench.execution.rounds); 1: cells in one go
    instances: int = 1  # engine instances over the rounds (blocks of rounds, restarts between; execution.rounds)
    headline: HeadlineSpeedSpec | None = None  # speed rounds until the headline decides (execution.headline_blocks)
    reference_of: dict[str, str] = Field(default_factory=dict)  # target → its reference method's label (headline)
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec)  # where the engines run (the CLI may override it)

    def sampling_at(self, temperature: float) -> CellSampling:
        return next((s for s in self.samplings if s.temperature == temperature), CellSampling(temperature=temperature))

    def dataset(self, name: str) -> DatasetSpec:
        return next(d for d in self.datasets if d.name == name)


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    suite_name: str
    engines: list[EngineConfig]
    cells: list[Cell]
    # What the run does beyond its cells; not part of the stored plan (manifest.json).
    run: RunDecisions | None = Field(None, exclude=True)

    def cells_for(self, engine_key: str) -> list[Cell]:
        return [c for c in self.cells if c.engine_key == engine_key]

    def target(self, name: str) -> TargetSpec:
        return next(e.target for e in self.engines if e.target.name == name)

    def decisions(self) -> RunDecisions:
        """The run's decisions (a plan read back from a manifest has none: :func:`with_decisions`)."""
        if self.run is None:
            raise ValueError("this plan carries no run decisions (read back from a manifest: re-plan from its suite)")
        return self.run


def run_decisions(suite: Suite) -> RunDecisions:
    """What the driver needs of ``suite`` besides the cells (see :class:`RunDecisions`)."""
    s, eq = suite.sampling, suite.equivalence
    sampled_t = sampled_equivalence_temperature(suite)
    temps = list(dict.fromkeys([*s.temperatures, *([sampled_t] if sampled_t is not None else [])]))
    samplings = []
    for temp in temps:
        samples = s.samples_per_prompt if temp > 0 else 1
        if eq.sampled is not None and eq.sampled.samples_per_prompt and temp == sampled_t:
            samples = eq.sampled.samples_per_prompt
        samplings.append(CellSampling(
            temperature=temp, samples_per_prompt=samples,
            logprobs=eq.logprobs if eq.greedy and temp == 0 else None,
            prompt_limit=sampled_prompt_limit(suite, temp),
        ))
    return RunDecisions(
        datasets=list(suite.datasets),
        dataset_base=str(Path(suite.source_path).parent) if suite.source_path else None,
        max_tokens=s.max_tokens, top_p=s.top_p, seed=s.seed, samplings=samplings,
        load=LoadBounds(num_requests=suite.load.num_requests, duration_s=suite.load.duration_s,
                        warmup_requests=suite.load.warmup_requests),
        warmup=suite.warmup,
        teacher_forcing=eq.sampled is not None,
        rounds=suite.rounds,
        instances=suite.instances,
        headline=suite.headline,
        reference_of={t.name: ref for t in suite.targets if (ref := reference_method(suite, t)) is not None},
        executor=suite.executor,
    )


def with_decisions(stored: Plan, suite: Suite) -> Plan:
    """A plan read back from a manifest (``--resume``), with ``suite``'s run decisions."""
    return stored.model_copy(update={"run": run_decisions(suite)})


ENGINE_KEY_SEP = "--"  # an engine's key: <target>--<method label>


def engine_key(target: TargetSpec, method: MethodSpec) -> str:
    return f"{target.name}{ENGINE_KEY_SEP}{method.label}"


def key_target(key: str) -> str:
    """The target name of an engine key (:func:`engine_key`)."""
    return key.split(ENGINE_KEY_SEP, 1)[0]


def at_k(method: MethodSpec, k: int | None) -> MethodSpec:
    """One K of a method: a plain method with that K (and label '<name>-k<K>' in a sweep)."""
    if not method.sweeps_k:
        return method if not isinstance(method.num_speculative_tokens, list) else method.model_copy(
            update={"num_speculative_tokens": k})
    return method.model_copy(update={"name": method.label_at(k), "num_speculative_tokens": k})


def with_ks(suite: Suite, ks: list[int] | None) -> Suite:
    """The suite with every speculating method's K replaced by ``ks`` (``--num-speculative-tokens 1,3,5``;
    none: the suite as it is); raises :class:`SuiteError` when a K is beyond a method's limit."""
    if not ks:
        return suite
    out = _replace_ks(suite, ks)
    out.source_path = suite.source_path
    base = Path(suite.source_path).parent if suite.source_path else Path.cwd()
    problems = [msg for loc, msg in check_semantics(out, base) if "num_speculative_tokens" in loc]
    if problems:
        raise SuiteError([f"--num-speculative-tokens: {m}" for m in dict.fromkeys(problems)])
    return out


def _replace_ks(suite: Suite, ks: list[int]) -> Suite:
    targets = [
        t.model_copy(update={"methods": [
            m if m.num_speculative_tokens is None else m.model_copy(
                update={"num_speculative_tokens": list(ks) if len(ks) > 1 else ks[0]})
            for m in t.methods
        ]})
        for t in suite.targets
    ]
    return suite.model_copy(update={"targets": targets})


def expand(suite: Suite) -> Plan:
    """Every cell of the suite, grouped by engine, in a stable order.

    Within an engine, repeats are the outer loop so that a repeat sees every
    dataset/temperature/load once before the next repeat starts.
    """
    engines: list[EngineConfig] = []
    cells: list[Cell] = []
    loads = plan_loads(suite)
    temperatures = list(suite.sampling.temperatures)
    sampled_t = sampled_equivalence_temperature(suite)
    if sampled_t is not None and sampled_t not in temperatures:
        temperatures.append(sampled_t)
    # Cells added for the sampled test run at its one load when it names one.
    sampled_loads: list[tuple[int, float | None]] = []
    sampled = suite.equivalence.sampled
    if sampled is not None and sampled.batch_size is not None and sampled.temperature not in suite.sampling.temperatures:
        sampled_loads = [(sampled.batch_size, None)]
    for t in suite.targets:
        for family, k, m in ((spec.label, k, at_k(spec, k)) for spec in t.methods for k in spec.ks):
            info = get_method(m.method)
            key = engine_key(t, m)
            extra = m.speculative_config if not isinstance(m.schedule, list) else {
                **m.speculative_config, "num_speculative_tokens_per_batch_size": m.schedule}  # vLLM's dynamic SD
            spec_cfg = info.speculative_config(k, m.speculator, extra)
            sched = (spec_cfg or {}).get("num_speculative_tokens_per_batch_size")
            sched = [tuple(int(x) for x in e) for e in sched] if sched else None
            lossy = SYNTHETIC if (spec_cfg or {}).get("rejection_sample_method") == "synthetic" else None
            engines.append(
                EngineConfig(key=key, target=t, method=m, vllm_method=info.vllm_method, speculative_config=spec_cfg)
            )
            for r in range(suite.repeats):
                for d, length in ((ds, n) for ds in suite.datasets for n in input_lengths(ds)):
                    for temp in temperatures:
                        if t.engine == "reference" and temp == sampled_t and temp != 0:
                            continue  # the reference simulator is greedy-only: no sampled-equivalence cells
                        for bs, rate in sampled_loads if temp == sampled_t and sampled_loads else loads:
                            cell = Cell(
                                cell_id="",
                                engine_key=key,
                                target=t.name,
                                method=m.label,
                                method_kind=m.method,
                                k=k,
                                dataset=d.name,
                                temperature=temp,
                                batch_size=bs,
                                repeat=r,
                                request_rate=rate,
                                family=family if family != m.label else None,
                                stop=None if temp == sampled_t and sampled_loads else (m.stop or suite.stop),
                                input_tokens=length,
                                schedule=sched,
                                lossy=lossy,
                            )
                            cells.append(cell.model_copy(update={"cell_id": f"{cell.group_id}/r{r}"}))
    return Plan(suite_name=suite.name, engines=engines, cells=cells, run=run_decisions(suite))


def input_lengths(d: DatasetSpec) -> list[int | None]:
    """A dataset's input lengths, one cell each (``[None]``: its prompts as they are)."""
    return list(d.input_tokens) if d.input_tokens else [None]


def prompts_per_batch(batch_size: int, samples_per_prompt: int = 1) -> int:
    """The fewest prompts whose samples fill whole batches: an engine batches a cell's (prompt, sample)
    pairs in order, ``batch_size`` at a time (4 samples at batch 4: one prompt; 1 sample at batch 4: four)."""
    bs, s = max(1, batch_size), max(1, samples_per_prompt)
    return math.lcm(bs, s) // s


def round_spans(n_prompts: int, rounds: int, batch_size: int, samples_per_prompt: int = 1) -> list[tuple[int, int]]:
    """``[start, end)`` of each round's prompts in a cell's prompt list (contiguous, in order).

    A cell's prompts are split, not repeated: together the rounds run exactly the prompts of
    one go. Each round takes a whole number of batches where it can (the batches a round sends
    are then the batches one go would have sent; a batch holds ``batch_size`` (prompt, sample)
    pairs, so a sampled cell's prompts split as finely as :func:`prompts_per_batch`); rounds that
    would be empty are dropped, so a cell with fewer batches than rounds has fewer rounds.
    """
    if n_prompts <= 0:
        return []
    unit = prompts_per_batch(batch_size, samples_per_prompt)
    batches = -(-n_prompts // unit)
    per = -(-batches // max(1, rounds))
    spans = [(r * per * unit, min(n_prompts, (r + 1) * per * unit)) for r in range(rounds)]
    return [(a, b) for a, b in spans if a < b]


def round_order(keys: list[str], round_index: int, seed: int) -> list[str]:
    """The order the engines ``keys`` run in round ``round_index``: a seeded permutation per pair of
    rounds, run forwards in the even round and backwards in the odd one (ABBA), so that over each pair
    of rounds every two engines have each gone first once and every engine's mean place is the same
    (drift that grows over a round hits no engine more); the same seed gives the same schedule."""
    import random

    order = list(keys)
    random.Random(f"{seed}:{round_index // 2}").shuffle(order)
    return order if round_index % 2 == 0 else order[::-1]


def sampled_equivalence_temperature(suite: Suite) -> float | None:
    """The temperature of the suite's sampled equivalence test, if it asks for one."""
    sampled = suite.equivalence.sampled
    return None if sampled is None else float(sampled.temperature)


def sampled_prompt_limit(suite: Suite, temperature: float) -> int | None:
    """How many prompts (the first N of each dataset) the cells at ``temperature`` take:
    ``equivalence.sampled.prompts`` for the cells added for the sampled test, else all."""
    sampled = suite.equivalence.sampled
    if sampled is None or temperature != sampled.temperature or temperature in suite.sampling.temperatures:
        return None
    return sampled.prompts


def cell_summary(cells: list[Cell], suite: Suite) -> list[str]:
    """One line per temperature of an engine's cells: loads, prompts, samples (for --dry-run)."""
    out = []
    sampled_t = sampled_equivalence_temperature(suite)
    for temp in sorted({c.temperature for c in cells}):
        cs = [c for c in cells if c.temperature == temp]
        loads = sorted({c.load_label for c in cs}, key=lambda x: (len(x), x))
        subset = sampled_prompt_limit(suite, temp)
        samples = suite.sampling.samples_per_prompt if temp > 0 else 1
        sampled = suite.equivalence.sampled
        if sampled is not None and temp == sampled_t and sampled.samples_per_prompt:
            samples = sampled.samples_per_prompt
        what = "greedy" if temp == 0 else "sampled"
        role = " (sampled-equivalence cells)" if temp == sampled_t else ""
        prompts = f"first {subset} prompts" if subset else "all prompts"
        out.append(f"T={temp:g} {what}{role}: {len(cs)} cells, load {', '.join(loads)}; "
                   f"{prompts} of {', '.join(sorted({c.dataset for c in cs}))} × {samples} sample(s)")
    return out
