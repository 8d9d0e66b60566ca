"""Engine workarounds: the exact expand, the environment they travel in, suite validation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from specbench.engines.vllm_patches import (
    ENV_VAR,
    SITE_DIR,
    expand_batch_to_tokens_exact,
    patch_env,
)


def test_expand_repeats_each_request_value_over_its_tokens():
    x = torch.tensor([1.0, 0.7, 1.3])
    cu = torch.tensor([2, 5, 6], dtype=torch.int32)
    assert expand_batch_to_tokens_exact(x, cu, 6).tolist() == pytest.approx([1.0, 1.0, 0.7, 0.7, 0.7, 1.3])


def test_expand_replaces_the_greedy_marker_and_skips_empty_requests():
    x = torch.tensor([-1.0, 0.5, -1.0])
    cu = torch.tensor([1, 1, 3], dtype=torch.int32)  # the middle request has no draft tokens
    assert expand_batch_to_tokens_exact(x, cu, 3, replace_from=-1, replace_to=1).tolist() == [1.0, 1.0, 1.0]


def test_expand_keeps_integer_dtype():
    out = expand_batch_to_tokens_exact(torch.tensor([5, 9]), torch.tensor([3, 4]), 4)
    assert out.dtype == torch.int64 and out.tolist() == [5, 5, 5, 9]


def test_patch_env_prepends_the_site_dir_and_rejects_unknown_names():
    env = patch_env(["vllm-cpu-expand-float"], {"PYTHONPATH": "/a"})
    assert env[ENV_VAR] == "vllm-cpu-expand-float"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(SITE_DIR), "/a"]
    assert patch_env([], {}) == {}
    with pytest.raises(ValueError, match="unknown engine patch"):
        patch_env(["nope"], {})


def test_suite_names_an_unknown_patch_with_its_line(tmp_path: Path):
    from specbench.config.suite import SuiteError, load_suite

    (tmp_path / "s.yaml").write_text(
        "name: s\ntargets:\n  - name: t\n    model: m\n    engine_patches: [vllm-cpu-expand-flaot]\n"
        "    methods:\n      - method: baseline\ndatasets:\n  - name: d\n    kind: humaneval\n"
    )
    with pytest.raises(SuiteError) as e:
        load_suite(tmp_path / "s.yaml")
    msg = str(e.value)
    assert "s.yaml:5" in msg and "did you mean 'vllm-cpu-expand-float'" in msg, msg


def test_the_suite_knows_exactly_the_patches_the_engines_implement() -> None:
    from specbench.config.methods import ENGINE_PATCHES
    from specbench.engines.vllm_patches import PATCHES

    assert set(ENGINE_PATCHES) == set(PATCHES)
    assert all(PATCHES[n].summary == ENGINE_PATCHES[n] for n in PATCHES)
