"""Tool declarations (OpenAI function tools) and the calls a reply makes.

A task declares its tools as OpenAI's chat API takes them:
`{"type": "function", "function": {"name": ..., "description": ..., "parameters": <JSON schema>}}`.
`check_tools` refuses a declaration that is not one (a schema that is not valid JSON schema
included), in one line; `check_call` says what is wrong with a call (an undeclared tool,
arguments its schema refuses). Plain Python and `jsonschema`; no vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlsvc.task import TaskError


@dataclass(frozen=True)
class ToolCall:
    """One call a reply makes: the tool's name and its arguments (a JSON object)."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolReply:
    """A parsed reply: its text outside the calls, and the calls in order (none: a final answer)."""

    content: str
    calls: tuple[ToolCall, ...] = field(default_factory=tuple)

    def payload(self) -> dict[str, Any]:
        """The environment step's fields (`ToolAction`)."""
        return {"content": self.content, "calls": [{"name": c.name, "arguments": c.arguments} for c in self.calls]}


def function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool declaration."""
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def check_tools(tools: Sequence[dict[str, Any]], where: str = "tools") -> dict[str, dict[str, Any]]:
    """The declared tools by name; raises `TaskError` (one line naming `where`) for a declaration
    that is not an OpenAI function tool, a duplicate name, or parameters that are not a valid
    JSON schema of an object."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    by_name: dict[str, dict[str, Any]] = {}
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise TaskError(f'{where}[{i}]: not an OpenAI function tool ({{"type": "function", "function": {{"name": ...}}}})')
        name, params = fn["name"], fn.get("parameters", {"type": "object"})
        if name in by_name:
            raise TaskError(f"{where}[{i}]: tool {name!r} is declared twice")
        try:
            Draft202012Validator.check_schema(params)
        except SchemaError as e:
            raise TaskError(f"{where}[{i}] ({name}): parameters are not a valid JSON schema: {e.message}") from None
        if params.get("type") != "object":
            raise TaskError(f"{where}[{i}] ({name}): parameters must be a JSON schema of type object")
        by_name[name] = fn
    return by_name


def check_call(call: ToolCall, declared: dict[str, dict[str, Any]]) -> str | None:
    """Why `call` is not a valid call of the declared tools (None: it is)."""
    from jsonschema import Draft202012Validator

    fn = declared.get(call.name)
    if fn is None:
        return f"unknown tool {call.name!r}"
    errors = sorted(Draft202012Validator(fn.get("parameters", {"type": "object"})).iter_errors(call.arguments), key=str)
    return f"{call.name}: {errors[0].message}" if errors else None
