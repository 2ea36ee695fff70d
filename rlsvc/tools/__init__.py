"""Tool calling: a task declares tools (OpenAI function schemas), its prompts are rendered with
the chat template's `tools=`, replies are parsed into calls by vLLM's tool parser for the
model's family, each reply's calls are one environment step, and the results go back as `tool`
messages through the chat template, appended to the episode's token sequence (never re-rendered).

- `schema`: the tool declarations checked, a parsed reply (`ToolCall`, `ToolReply`);
- `parser`: vLLM's tool parsers (Hermes/Qwen `<tool_call>`, Llama 3 JSON) over sampled text;
- `template`: prompts with `tools=`, and the tokens a turn of tool results appends;
- `codec`: the `TaskCodec` of a tool-calling task (prompts, parsing, later turns);
- `task`: `ToolTask`, the base class of a tool-calling task, and its OpenEnv environment;
- `tiny`: the tool tokens and real chat templates for the tiny test checkpoints.

docs/agents.md says which library does what.
"""
