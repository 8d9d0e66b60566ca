"""The one base of every error a user can fix: bad input, configuration or stored data.

Whatever the stages raise for such a case subclasses :class:`SpecbenchError`
(the suite, a stored run, a dataset, a calibration, the gate's rules, the
history, a run the executor refuses); the CLI prints its lines and exits 2 in
one place. Anything else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations


class SpecbenchError(Exception):
    """Bad input or configuration: ``messages`` are the lines to show (the CLI exits 2 with them).

    Raise it with one message, or with a list of lines (one per problem)."""

    exit_code = 2

    def __init__(self, *args: object) -> None:
        if len(args) == 1 and isinstance(args[0], list):
            lines = [str(x) for x in args[0]]
            super().__init__("\n".join(lines))
            self.messages = lines
        else:
            super().__init__(*args)
            self.messages = [str(self)] if args else []


class SpecbenchWarning(UserWarning):
    """Something a user should know that is not an error (a suite that loads with a doubtful value, …):
    the CLI shows its text as typed, labelled, instead of Python's warning format."""
