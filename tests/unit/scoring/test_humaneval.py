"""HumanEval helpers that run no code: loading, truncation, assembly, pass@k, opt-in."""

from __future__ import annotations

import math

import pytest

from specbench.scoring import humaneval
from specbench.scoring.humaneval import (
    CODEX_STOP_SEQUENCES,
    SKIPPED_DETAIL,
    CodeExecutionNotAllowed,
    build_program,
    load_problems,
    pass_at_k,
    require_code_exec,
    score_humaneval,
    truncate_completion,
)


@pytest.fixture(scope="module")
def problems():
    return load_problems()


def test_load_problems_offline(problems):
    assert len(problems) == 164
    p = problems["HumanEval/0"]
    assert {"task_id", "prompt", "canonical_solution", "test", "entry_point"} <= set(p)


def test_stop_sequences_are_codex_ones():
    assert CODEX_STOP_SEQUENCES == ("\nclass", "\ndef", "\n#", "\nif", "\nprint")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("    return x\n", "    return x\n"),
        ("    return x\n\ndef other():\n    pass", "    return x\n"),
        ("    return x\n\n\nif __name__ == '__main__':\n    main()", "    return x\n\n"),
        ("    return x\nprint(f(1))", "    return x"),
        ("    return x\n# tests\nassert f(1)", "    return x"),
        ("    return x\nclass A:\n    pass", "    return x"),
        ("    # an indented comment stays\n    if x:\n        def g(): pass\n    return x", None),
        ("", ""),
    ],
)
def test_truncate_completion(text, expected):
    assert truncate_completion(text) == (text if expected is None else expected)


def test_truncate_takes_earliest_stop_and_custom_stops():
    assert truncate_completion("a\nprint(1)\ndef f(): pass") == "a"
    assert truncate_completion("a\n```\nb", stop_sequences=["\n```"]) == "a"


def test_build_program(problems):
    p = problems["HumanEval/0"]
    prog = build_program(p, "    return True\n")
    assert f"\nPROMPT = {p['prompt']!r}\nCOMPLETION = {'    return True' + chr(10)!r}\nTEST = {p['test']!r}\n" in prog
    assert prog.endswith("\nENTRY_POINT = 'has_close_elements'\nspecbench_judge(PROMPT, COMPLETION, TEST, ENTRY_POINT)\n")
    compile(prog, "<prog>", "exec")
    for p in problems.values():
        compile(build_program(p, p["canonical_solution"]), p["task_id"], "exec")


def _pass_at_k_comb(n, c, k):
    if n - c < k:
        return 1.0
    return 1 - math.comb(n - c, k) / math.comb(n, k)


@pytest.mark.parametrize(
    ("n", "c", "k"),
    [
        (1, 0, 1),
        (1, 1, 1),
        (10, 3, 1),
        (10, 3, 5),
        (10, 0, 10),
        (20, 19, 2),
        (200, 13, 10),
        (200, 200, 100),
        (5, 1, 5),
    ],
)
def test_pass_at_k_matches_combinatorial_form(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(_pass_at_k_comb(n, c, k), abs=1e-12)


def test_pass_at_k_is_c_over_n_at_k1_and_stable_for_large_n():
    assert pass_at_k(7, 3, 1) == pytest.approx(3 / 7)
    v = pass_at_k(10_000, 1, 100)
    assert v == pytest.approx(0.01)
    assert 0.0 <= pass_at_k(10_000, 5_000, 5_000) <= 1.0


@pytest.mark.parametrize(("n", "c", "k"), [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_bad_input(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_disallowed_code_runs_nothing(monkeypatch, problems):
    import specbench.scoring.sandbox as sandbox

    def boom(*a, **k):
        raise AssertionError("code ran although execution was not allowed")

    monkeypatch.setattr(sandbox, "run_programs", boom)
    monkeypatch.setattr(sandbox, "run_program", boom)
    items = [("HumanEval/0", "    return True\n"), ("HumanEval/1", "    import os; os.system('true')\n")]
    res = score_humaneval(items, allow_code_exec=False)
    assert [r.task_id for r in res] == ["HumanEval/0", "HumanEval/1"]
    assert all(r.status == "skipped" and r.passed is None and r.detail == SKIPPED_DETAIL for r in res)
    with pytest.raises(CodeExecutionNotAllowed):
        score_humaneval(items, allow_code_exec=False, raise_if_not_allowed=True)


def test_require_code_exec():
    require_code_exec(True)
    with pytest.raises(CodeExecutionNotAllowed):
        require_code_exec(False)


def test_score_humaneval_builds_programs_that_must_finish(monkeypatch, problems):
    """The harness side, without executing: truncation, must_finish, no marker in the source, order."""
    from specbench.scoring.sandbox import ExecResult

    seen = {}

    def fake_run_programs(sources, workers, **kwargs):
        seen.update(sources=sources, workers=workers, kwargs=kwargs)
        return [
            ExecResult(i % 2 == 0, "passed" if i % 2 == 0 else "failed", 0, "", "", 0.1, "fake")
            for i in range(len(sources))
        ]

    import specbench.scoring.sandbox as sandbox

    monkeypatch.setattr(sandbox, "run_programs", fake_run_programs)
    items = [("HumanEval/0", "    return True\ndef junk(): pass"), ("HumanEval/3", "    return False\n")]
    res = score_humaneval(items, allow_code_exec=True, problems=problems, workers=3)
    assert [r.passed for r in res] == [True, False]
    assert seen["workers"] == 3
    assert seen["kwargs"]["must_finish"] is True
    assert "junk" not in seen["sources"][0]
    for src, (tid, _) in zip(seen["sources"], items, strict=True):
        assert f"ENTRY_POINT = {problems[tid]['entry_point']!r}\n" in src
        assert src.rstrip().endswith("specbench_judge(PROMPT, COMPLETION, TEST, ENTRY_POINT)")


def test_score_humaneval_runs_each_distinct_program_once(monkeypatch, problems):
    """A lossless method's greedy completions repeat the baseline's: each distinct program runs once,
    every completion gets its program's result, in input order."""
    from specbench.scoring.sandbox import ExecResult

    ran = []

    def fake_run_programs(sources, workers, **kwargs):
        ran.extend(sources)
        right = "\nCOMPLETION = '    return True\\n'\n"  # the completion, as the judged program holds it
        return [ExecResult(right in s, "passed" if right in s else "failed", 0, "", "", 0.1, "fake")
                for s in sources]

    import specbench.scoring.sandbox as sandbox

    monkeypatch.setattr(sandbox, "run_programs", fake_run_programs)
    a, b = ("HumanEval/0", "    return True\n"), ("HumanEval/0", "    return False\n")
    same_body_other_task = ("HumanEval/3", "    return True\n")
    res = score_humaneval([a, b, a, same_body_other_task, b, a], allow_code_exec=True, problems=problems)
    assert len(ran) == 3
    assert [(r.task_id, r.passed) for r in res] == [("HumanEval/0", True), ("HumanEval/0", False), ("HumanEval/0", True),
                                                    ("HumanEval/3", True), ("HumanEval/0", False), ("HumanEval/0", True)]


def test_score_humaneval_accepts_records(monkeypatch, problems):
    class Rec:
        prompt_id = "HumanEval/5"
        output_text = "    return []\n"

    res = score_humaneval([Rec()], allow_code_exec=False)
    assert res[0].task_id == "HumanEval/5"


def test_unknown_task_id_is_an_error(problems):
    with pytest.raises(KeyError):
        score_humaneval([("HumanEval/999", "")], allow_code_exec=True, problems=problems)


def test_module_exports_pass_at_k():
    assert humaneval.pass_at_k is pass_at_k


def test_sandbox_module_runs_with_the_standard_library_alone():
    """sandbox_launcher.py is the launcher script (``python -I -S -B sandbox_launcher.py --launch``): no
    specbench imports at module level, or every sandboxed program ends in 'error' before it starts."""
    import subprocess
    import sys

    import specbench.scoring.sandbox_launcher as sandbox

    out = subprocess.run([sys.executable, "-I", "-S", "-B", sandbox.__file__], capture_output=True, text=True,
                         timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
