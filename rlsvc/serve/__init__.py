"""An OpenAI-compatible `/v1/chat/completions` endpoint over the rollout engines, for black-box
agents (issue 60; docs/agents.md). An agent opens an episode, makes its calls through any OpenAI
client, and ends it with a reward; every call's prompt tokens, sampled tokens, logprobs and
policy version are recorded as the engine produced them, and the episode trains on exactly those.

- `record.py`: an episode's calls and the `Episode` the trainer gets from them;
- `turns.py`: a request's messages -> the prompt's token ids (the first turn through the chat
  template with `tools=`, later turns appended to the recorded tokens) and a reply -> the
  assistant message (calls parsed by vLLM's tool parser);
- `batcher.py`: concurrent requests into one generate call;
- `endpoint.py`: the plain class that ties them (open, chat, end, finished episodes);
- `http.py`: the FastAPI app and its uvicorn server (127.0.0.1 by default, an API key elsewhere);
- `task.py` and `loop.py`: a job trained on the agents' episodes (`env.type=endpoint`).
"""
