"""`rlsvc.envs.openenv_api`: a plug-in imports OpenEnv's types from it without loading gradio
(OpenEnv's web UI, most of `import openenv.core`'s seconds), and gets OpenEnv's own classes."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

PROBE = """
import sys
from rlsvc.envs.openenv_api import Action, Environment, Observation, State
print("gradio" in sys.modules)
import openenv.core.env_server.interfaces as interfaces, openenv.core.env_server.types as types
print(Environment is interfaces.Environment and (Action, Observation, State) == (types.Action, types.Observation, types.State))
"""


def test_a_plugin_imports_openenv_types_without_gradio():
    import importlib.util

    assert importlib.util.find_spec("gradio") is not None  # installed: OpenEnv would load it
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]
