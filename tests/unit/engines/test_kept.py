"""Engines kept between runs (specbench.engines.kept): identity, least-recently-used eviction, dead engines.

The engines here are hand-built objects with the protocol's life-cycle methods (no model); the
integration tests (test_history_runs: five runs on one vLLM engine) run the real thing.
"""

from __future__ import annotations

from specbench.config.plan import expand
from specbench.config.suite import load_suite
from specbench.engines.factory import ResolvedEngine
from specbench.engines.kept import KeptEngines, engine_identity
from specbench.engines.loadgen import LoadProfile


class _Life:
    def __init__(self) -> None:
        self.alive = True
        self.closed = 0
        self.killed = 0

    def close(self) -> None:
        self.closed += 1
        self.alive = False

    def kill(self) -> None:
        self.killed += 1
        self.alive = False


SUITE = """
name: k
targets:
  - name: tiny
    model: org/tiny-hub-model
    methods:
      - method: baseline
      - method: ngram
        num_speculative_tokens: 3
datasets:
  - name: he
    kind: humaneval
    limit: 2
sampling:
  seed: {seed}
"""


def _resolved(seed: int, tmp_path) -> list[ResolvedEngine]:
    (tmp_path / f"s{seed}.yaml").write_text(SUITE.format(seed=seed))
    plan = expand(load_suite(tmp_path / f"s{seed}.yaml"))
    return [ResolvedEngine(config=e, model_path="/models/tiny", speculator_path=None,
                           engine_kwargs={"model": "/models/tiny", "k": e.method.method}, env={}) for e in plan.engines]


def test_identity_ignores_the_run_but_not_the_engine_arguments_or_load(tmp_path):
    a0, b0 = _resolved(0, tmp_path)
    a1, _ = _resolved(1, tmp_path)
    assert engine_identity(a0, None) == engine_identity(a1, None)  # another seed: the same engine
    assert engine_identity(a0, None) != engine_identity(b0, None)
    assert engine_identity(a0, None) != engine_identity(a0, LoadProfile())
    env = a0.model_copy(update={"env": {"VLLM_CPU_KVCACHE_SPACE": "2"}})
    assert engine_identity(env, None) != engine_identity(a0, None)


def test_take_gives_back_a_live_engine_once_and_never_a_dead_one():
    kept = KeptEngines(max_engines=2, min_free_gib=0)
    e = _Life()
    assert kept.keep("a", e, "run1/a.log")
    assert kept.take("a") == (e, "run1/a.log") and kept.reused == 1
    assert kept.take("a") is None  # taken: not there twice
    dead = _Life()
    dead.alive = False
    assert not kept.keep("b", dead, "x.log") and len(kept) == 0
    e2 = _Life()
    kept.keep("c", e2, "c.log")
    e2.alive = False  # died while idle
    assert kept.take("c") is None and e2.killed == 1


def test_least_recently_used_is_closed_beyond_the_cap_and_close_ends_all():
    kept = KeptEngines(max_engines=2, min_free_gib=0)
    engines = {k: _Life() for k in "abc"}
    for k, e in engines.items():
        kept.keep(k, e, f"{k}.log")
    assert engines["a"].closed == 1 and len(kept) == 2
    kept.close()
    assert all(e.closed == 1 for e in engines.values()) and len(kept) == 0


def test_nothing_is_kept_when_memory_is_short():
    kept = KeptEngines(max_engines=2, min_free_gib=1e9)
    assert not kept.keep("a", _Life(), "a.log") and len(kept) == 0
