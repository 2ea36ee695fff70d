"""The endpoint as a plain class: episodes opened, chat completions served through the batcher and
recorded, episodes ended with a reward and handed to whoever trains on them (`take`). The HTTP
layer (rlsvc/serve/http.py) only maps requests and errors onto it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from rlsvc.episode import Episode
from rlsvc.rollout.runner import Generator
from rlsvc.serve.batcher import Batcher
from rlsvc.serve.record import Call, EndpointError, EpisodeEnded, EpisodeRecord, UnknownEpisode
from rlsvc.serve.turns import Turns, check_messages

Score = Callable[[list[dict[str, Any]]], float]
"""Scores a finished episode's transcript (its last request's messages and the last reply), for
agents that end episodes without a reward."""


class Endpoint:
    """Chat completions over `generator` (the rollout workers, or one engine) for episodes that
    agents open and end. Sampling is the generator's own (the job's temperature and
    `rollout.max_tokens`): a request's `temperature`, `max_tokens` and the like are not applied,
    since the trainer needs the behaviour policy's logprobs."""

    def __init__(
        self,
        tokenizer: Any,
        generator: Generator,
        version: Callable[[], int] = lambda: 0,
        max_prompt_tokens: int | None = None,
        score: Score | None = None,
        max_batch: int = 64,
        between_calls: Callable[[], None] | None = None,
        seed: int = 0,
        batch_wait_s: float = 0.05,
    ) -> None:
        self.turns = Turns(tokenizer)
        # a full batch: a request of every open episode (rlsvc/serve/batcher.py)
        self.batcher = Batcher(generator, version, max_batch, between_calls, live=lambda: len(self._open), wait_s=batch_wait_s)
        self.max_prompt_tokens, self.score, self.seed = max_prompt_tokens, score, seed
        self._open: dict[str, EpisodeRecord] = {}
        self._ended: set[str] = set()
        self._finished: list[Episode] = []
        self._cv = threading.Condition()
        self._opened = 0

    def open(self, group_id: int | None = None) -> str:
        """A new episode's id; episodes of one `group_id` are one GRPO group (default: its own)."""
        with self._cv:
            self._opened += 1
            rid = uuid.uuid4().hex
            self._open[rid] = EpisodeRecord(rid, self._opened if group_id is None else int(group_id), self._opened)
            return rid

    def _record(self, episode_id: str) -> EpisodeRecord:
        with self._cv:
            if episode_id in self._ended:
                raise EpisodeEnded(f"episode {episode_id} has ended")
            record = self._open.get(episode_id)
        if record is None:
            raise UnknownEpisode(f"no episode {episode_id!r}: open one with POST /v1/episodes")
        return record

    def chat(self, episode_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """One chat completion in the episode (an OpenAI `chat.completion` object, with the
        recorded tokens under `rlsvc`)."""
        record = self._record(episode_id)
        messages, tools = check_messages(body.get("messages")), body.get("tools") or None
        if tools is not None:
            self.turns.parser(tools)  # a 400 for bad declarations, before anything is recorded
        with record.lock:
            if record.ended:
                raise EpisodeEnded(f"episode {episode_id} has ended")
            prompt = self.turns.prompt(record, messages, tools)
            if self.max_prompt_tokens is not None and len(prompt) > self.max_prompt_tokens:
                raise EndpointError(f"the prompt has {len(prompt)} tokens; the endpoint takes at most {self.max_prompt_tokens}")
            record.tools = record.tools if record.calls else tools
            seed = (self.seed * 1_000_003 + record.index * 1009 + len(record.calls) * 100_003) % 2**31
            out, version = self.batcher.submit(prompt, seed).result()
            reply, finish = self.turns.reply(out, tools, len(record.calls))
            call = Call(list(messages), prompt, list(out["token_ids"]), list(out["logprobs"]), out["text"], version, reply)
            record.calls.append(call)
        return self._response(body, call, finish)

    @staticmethod
    def _response(body: dict[str, Any], call: Call, finish: str) -> dict[str, Any]:
        n_prompt, n_out = len(call.prompt_ids), len(call.token_ids)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or "rlsvc"),
            "choices": [{"index": 0, "message": call.reply, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out},
            "rlsvc": {
                "prompt_token_ids": call.prompt_ids,
                "token_ids": call.token_ids,
                "logprobs": call.logprobs,
                "policy_version": call.policy_version,
            },
        }

    def end(self, episode_id: str, reward: float | None = None) -> Episode:
        """End the episode with `reward` (None: the endpoint's `score` of its transcript); it is
        then handed to `take`, and later calls in it are refused (409)."""
        record = self._record(episode_id)
        with record.lock:
            if record.ended:
                raise EpisodeEnded(f"episode {episode_id} has ended")
            if reward is None:
                if self.score is None:
                    raise EndpointError("reward: required (the endpoint has no task that scores transcripts)")
                last = record.calls[-1] if record.calls else None
                reward = float(self.score([*last.messages, last.reply] if last else []))
            record.ended, record.reward = True, float(reward)
            episode = record.to_episode()
        with self._cv:
            self._open.pop(episode_id, None)
            self._ended.add(episode_id)
            self._finished.append(episode)
            self._cv.notify_all()
        return episode

    def take(self, n: int, timeout_s: float | None = None) -> list[Episode]:
        """Up to `n` finished episodes, oldest first, waiting up to `timeout_s` for the first."""
        with self._cv:
            self._cv.wait_for(lambda: bool(self._finished), timeout=timeout_s)
            taken, self._finished = self._finished[:n], self._finished[n:]
            return taken

    def close(self) -> None:
        self.batcher.close()
