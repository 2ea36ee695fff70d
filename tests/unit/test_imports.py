"""`as_if_missing`: packages read as not installed inside the block, and import again after it."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from rlsvc.imports import as_if_missing

pytestmark = pytest.mark.unit


def test_a_package_reads_as_missing_inside_the_block_and_imports_after_it():
    name = "rlsvc_test_never_installed"
    assert name not in sys.modules
    with as_if_missing("colorsys", name):  # colorsys: stdlib, imported by nothing here
        assert importlib.util.find_spec("colorsys") is None
        with pytest.raises(ModuleNotFoundError):
            import colorsys  # noqa: F401
    assert "colorsys" not in sys.modules and name not in sys.modules
    import colorsys

    assert colorsys.rgb_to_hsv(1, 0, 0)[0] == 0


def test_an_imported_package_stays_as_it_is():
    import json

    with as_if_missing("json"):
        assert sys.modules["json"] is json and importlib.util.find_spec("json") is not None
    assert sys.modules["json"] is json
