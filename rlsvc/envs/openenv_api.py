"""OpenEnv's types for a task's environment, imported without OpenEnv's Gradio web UI.

    from rlsvc.envs.openenv_api import Action, Environment, Observation, State

are the classes of `openenv.core.env_server` (the same objects), but importing them here skips
the web UI that `import openenv.core` loads whenever gradio is installed (openenv-core depends on
it), which rlsvc never serves: most of the package's import time (docs/tasks.md measures it), paid
by every process that builds a task's environment. gradio still imports as usual afterwards.
"""

from __future__ import annotations

from rlsvc.envs.lazy import openenv_without_web_ui

with openenv_without_web_ui():
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

__all__ = ["Action", "Environment", "Observation", "State"]
