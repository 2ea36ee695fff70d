"""`as_if_missing`: packages read as not installed inside the block, and import again after it."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from rlsvc.imports import as_if_missing

pytestmark = pytest.mark.unit


def test_a_package_reads_as_missing_inside_the_block_and_imports_after_it(tmp_path, monkeypatch):
    name = "rlsvc_probe_installed"  # installed here, in a folder on sys.path, imported by nothing
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert name not in sys.modules and importlib.util.find_spec(name) is not None
    with as_if_missing(name, "rlsvc_probe_never_installed"):
        assert importlib.util.find_spec(name) is None
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(name)
    assert name not in sys.modules and "rlsvc_probe_never_installed" not in sys.modules
    assert importlib.import_module(name).VALUE == 7
    del sys.modules[name]


def test_an_imported_package_stays_as_it_is():
    import json

    with as_if_missing("json"):
        assert sys.modules["json"] is json and importlib.util.find_spec("json") is not None
    assert sys.modules["json"] is json
