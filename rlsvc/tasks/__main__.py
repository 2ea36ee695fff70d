"""`rlsvc tasks` (`python -m rlsvc.tasks`): the tasks `env.type` and `env.task` can select, with
their options.

    python -m rlsvc.tasks [list]        the built-in tasks and the installed plug-ins (entry
                                        points of group rlsvc.tasks), each with its options
    python -m rlsvc.tasks score ...     the code environment's scorer (moved; kept working)
    python -m rlsvc.tasks problems      the code environment's problem ids (was `list`)
"""

from __future__ import annotations

import importlib
import inspect
import sys

SCORER = "rlsvc.problems.__main__"
"""The module that scores a programming problem; `score` and `problems` are handed to it."""
SCORER_COMMANDS = {"score": "score", "problems": "list"}
"""Our command -> the scorer's own."""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in SCORER_COMMANDS:
        scorer = importlib.import_module(SCORER)
        return int(scorer.main([SCORER_COMMANDS[args[0]], *args[1:]]) or 0)
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if args not in ([], ["list"]):
        print(f"rlsvc.tasks: unknown command {' '.join(args)!r} (commands: list, score, problems)", file=sys.stderr)
        return 2
    print(listing())
    return 0


def listing() -> str:
    """One paragraph per installed task: how to select it, its factory, its options."""
    from rlsvc.task import TaskError
    from rlsvc.tasks.registry import installed, resolve

    blocks = []
    for t in installed():
        select = f"env.type={t.name}" if t.source == "built-in" else f"env.task={t.name}"
        try:
            options = builtin_options(t.name) if t.source == "built-in" else factory_options(resolve(t.name))
        except TaskError as e:  # an installed plug-in that does not load: say so, list the rest
            options = [f"(does not load: {e})"]
        blocks.append("\n".join([f"{t.name}  ({t.source}: {t.target}; select with {select})", *(f"    {o}" for o in options)]))
    return "\n\n".join(blocks)


def factory_options(factory: object) -> list[str]:
    """`env.options.NAME` for each keyword the factory takes, with its default."""
    try:
        params = inspect.signature(factory).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ["(options not readable from the factory's signature)"]
    shown = [
        f"env.options.{p.name}" + ("" if p.default is p.empty else f" (default {p.default!r})")
        for p in params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    return shown or ["(no options)"]


def builtin_options(env_type: str) -> list[str]:
    """A built-in task's own settings: its config section's fields beyond those every task has."""
    from pydantic import BaseModel

    from rlsvc.config import BlackjackEnvConfig, CodeEnvConfig, EndpointEnvConfig, EnvBase, ReasoningEnvConfig

    sections: dict[str, type[BaseModel]] = {
        "blackjack": BlackjackEnvConfig,
        "code": CodeEnvConfig,
        "reasoning": ReasoningEnvConfig,
        "endpoint": EndpointEnvConfig,
    }
    section = sections[env_type]
    defaults = section()
    own = [name for name in section.model_fields if name not in EnvBase.model_fields and name != "type"]
    return [
        f"env.{name}.* (python -m rlsvc.train --help)"
        if isinstance(getattr(defaults, name), BaseModel)
        else f"env.{name} (default {getattr(defaults, name)!r})"
        for name in own
    ]


if __name__ == "__main__":
    sys.exit(main())
