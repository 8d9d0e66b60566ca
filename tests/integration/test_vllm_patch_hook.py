"""The engine-patch import hook in real vLLM processes (each imports vLLM: seconds, so not a unit test)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from specbench.engines.vllm_patches import ENV_VAR, PATCHES, SITE_DIR, patch_env


def test_site_hook_patches_the_module_on_first_import_only_when_asked():
    code = (
        "import vllm.v1.sample.rejection_sampler as r;"
        "print(getattr(r, '_specbench_patched', False), r.expand_batch_to_tokens.__module__)"
    )
    base = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    envs = ({**base, **patch_env(list(PATCHES), base)}, {**base, "PYTHONPATH": str(SITE_DIR)})
    with ThreadPoolExecutor(2) as pool:  # both at once: each is a vLLM import, seconds of one core
        on, off = pool.map(lambda env: subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                                      text=True, timeout=300), envs)
    assert on.stdout.split()[-2:] == ["True", "specbench.engines.vllm_patches"], on.stderr[-2000:]
    assert off.stdout.split()[-2:] == ["False", "vllm.v1.sample.rejection_sampler"], off.stderr[-2000:]
