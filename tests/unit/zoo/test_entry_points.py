"""The zoo's entry points stay functions after their implementation modules are imported.

(A submodule named like a function in the package's __init__ replaces that
function on first import: the second training in one process then called a
module. That broke cpu-smoke after the quick-zoo test in a clean CI run.)
"""

import importlib
import pkgutil

import specbench.zoo as zoo


def test_training_entry_points_survive_importing_every_zoo_module():
    for mod in pkgutil.iter_modules(zoo.__path__):
        importlib.import_module(f"specbench.zoo.{mod.name}")
    assert callable(zoo.train_zoo_target) and callable(zoo.train_zoo_drafters)
    assert type(zoo.train_zoo_target).__name__ == "function" and type(zoo.train_zoo_drafters).__name__ == "function"
