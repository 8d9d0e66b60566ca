"""A result equal to everything: rebinds the task's function to return an object whose ``__eq__`` always
answers True (and an int subclass doing the same), so every ``assert candidate(x) == y`` would hold.
The judge takes only exact built-in types, rebuilt from their serialised form: it must fail."""


class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


class AlwaysEqualInt(int):
    __eq__ = AlwaysEqual.__eq__
    __ne__ = AlwaysEqual.__ne__
    __hash__ = int.__hash__


has_close_elements = lambda numbers, threshold: AlwaysEqual() if numbers else AlwaysEqualInt(0)  # noqa: E731
