"""An endpoint episode: the calls an agent made in it, each as the engine served it, and the
`Episode` the trainer gets from them (one token sequence, no re-tokenisation)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from rlsvc.episode import Episode


class EndpointError(Exception):
    """A request the endpoint refuses; `status` is its HTTP status."""

    status = 400


class UnknownEpisode(EndpointError):
    status = 404


class EpisodeEnded(EndpointError):
    status = 409


@dataclass
class Call:
    """One chat completion: the request's messages, the whole prompt the engine received, what it
    sampled, and the policy version whose weights sampled it."""

    messages: list[dict[str, Any]]
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    text: str
    policy_version: int
    reply: dict[str, Any] = field(default_factory=dict)
    """The assistant message returned to the agent."""


@dataclass
class EpisodeRecord:
    id: str
    group_id: int
    index: int = 0
    """The order it was opened in (its calls' sampling seeds derive from it)."""
    tools: list[dict[str, Any]] | None = None
    """The tools of the episode's first call; later calls must declare the same."""
    calls: list[Call] = field(default_factory=list)
    ended: bool = False
    reward: float = 0.0
    broken: str | None = None
    """Why the episode is no longer one token sequence (a later request whose messages do not
    extend the recorded turns); it is then invalid and not trained on."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sequence(self) -> list[int]:
        """Every token so far, as the engine received and sampled them."""
        last = self.calls[-1]
        return [*last.prompt_ids, *last.token_ids]

    def to_episode(self) -> Episode:
        """The episode as the trainer takes it: the first prompt, each reply as sampled and the
        tokens each later turn added, one row (`continued`); its policy version the oldest of its
        calls (staleness counts from there); each call's version in `observations`."""
        ep = Episode(group_id=self.group_id, policy_version=min((c.policy_version for c in self.calls), default=0))
        before: list[int] = []
        for call in self.calls:
            ep.prompts.append(call.prompt_ids[len(before) :])
            ep.responses.append(list(call.token_ids))
            ep.logprobs.append(list(call.logprobs))
            ep.texts.append(call.text)
            ep.observations.append({"policy_version": call.policy_version, "messages": len(call.messages)})
            before = [*call.prompt_ids, *call.token_ids]
        ep.continued = len(self.calls) > 1
        ep.env_return = self.reward
        if self.broken is not None or not self.calls:
            # not one sequence (or nothing sampled): nothing to train on, its group left out
            ep.invalid, ep.failed, ep.outcome = True, True, self.broken or "no_calls"
        else:
            ep.outcome = "ended"
        return ep
