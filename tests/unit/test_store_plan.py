import json

import pytest

from specbench import store
from specbench.engines.vllm_offline import counters_from_request_metrics
from specbench.methods import METHODS
from specbench.plan import expand, vllm_serve_command
from specbench.records import RequestRecord, SpecCounters
from specbench.suite import load_suite

SUITE = """
name: t
targets:
  - name: a
    model: some/model
    methods:
      - method: baseline
      - method: p-eagle
        speculator: org/peagle
        num_speculative_tokens: 4
datasets:
  - name: h
    kind: humaneval
sampling:
  temperatures: [0.0, 1.0]
load:
  batch_sizes: [1, 8]
repeats: 2
"""


def test_expand_cells_and_engines(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SUITE)
    plan = expand(load_suite(p))
    assert len(plan.engines) == 2
    assert len(plan.cells) == 2 * 2 * 2 * 2  # methods × temps × loads × repeats
    assert len({c.cell_id for c in plan.cells}) == len(plan.cells)
    pe = plan.engines[1]
    assert pe.speculative_config == {
        "method": "eagle3", "model": "org/peagle", "num_speculative_tokens": 4, "parallel_drafting": True,
    }
    cmd = vllm_serve_command(pe, {"model": "some/model", "speculative_config": pe.speculative_config,
                                  "enforce_eager": True, "max_model_len": 512})
    assert cmd.startswith("vllm serve some/model") and "--enforce-eager" in cmd and "--max-model-len 512" in cmd
    assert '"parallel_drafting": true' in cmd


def test_every_speculative_method_passes_method_explicitly():
    for m in METHODS.values():
        cfg = m.speculative_config(3, "x" if m.needs_speculator else None)
        assert cfg is None if m.vllm_method is None else cfg["method"] == m.vllm_method


def test_appender_survives_torn_line(tmp_path):
    path = tmp_path / "records.jsonl"
    rec = RequestRecord(run_id="r", cell_id="c", engine_key="e", prompt_id="p", prompt_tokens=1,
                        output_token_ids=[1], output_text="x")
    w = store.JsonlAppender(path)
    w.append(rec)
    w.close()
    with open(path, "a") as fh:
        fh.write('{"run_id": "r", "cell_')  # interrupted mid-write
    assert len(list(store.iter_jsonl(path))) == 1  # the torn tail is ignored on read
    w = store.JsonlAppender(path)  # … and cut before appending again
    w.append(rec)
    w.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(ln)["prompt_id"] == "p" for ln in lines)


def test_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(store.StoreError, match="records.jsonl:2"):
        list(store.iter_jsonl(path))


class _SD:
    def __init__(self, histogram, num_draft_tokens):
        self.histogram = histogram
        self.num_draft_tokens = num_draft_tokens


def test_per_request_counters_from_vllm_histogram():
    # K=3: 2 steps accepted 0, 1 step accepted 2, 3 steps accepted 3.
    c = counters_from_request_metrics(_SD([2, 0, 1, 3], 18), 3)
    assert c == SpecCounters(num_drafts=6, num_draft_tokens=18, num_accepted_tokens=11, accepted_per_pos=[4, 4, 3])
    assert sum(c.accepted_per_pos) == c.num_accepted_tokens
