"""The examples in every module's docstrings run, so none can drift from the code."""

import doctest
import importlib
import pkgutil

import pytest

import builder

# doctor_probe prints its facts when run; its one job is covered by the doctor tests.
MODULES = sorted(m.name for m in pkgutil.walk_packages(builder.__path__, "builder.")
                 if not m.name.endswith("doctor_probe"))


@pytest.mark.parametrize("name", MODULES)
def test_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_the_examples_are_many():
    attempted = sum(doctest.testmod(importlib.import_module(n), optionflags=doctest.ELLIPSIS, report=False).attempted
                    for n in MODULES)
    assert len(MODULES) >= 35 and attempted >= 190
