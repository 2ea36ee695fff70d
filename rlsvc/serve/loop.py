"""The GRPO loop of a job whose episodes agents play through the endpoint (`env.type=endpoint`):
the endpoint serves the job's rollout workers while it trains; each step takes
`grpo.groups_per_step` complete groups of `grpo.group_size` ended episodes (by the `group_id`
the agents opened them with), leaves out those older than `buffer.max_staleness` versions (an
episode's version is its oldest call's), and trains on their recorded tokens. A weight sync
holds the endpoint's generate calls back, so each call's recorded version is the one whose
weights sampled it."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field

from rlsvc.episode import Episode
from rlsvc.loop import GRPOLoop
from rlsvc.serve.endpoint import Endpoint


class AgentsTooSlow(RuntimeError):
    """No batch of complete groups came from the agents within `env.wait_s`."""


@dataclass
class EndpointLoop(GRPOLoop):
    stale_dropped: int = 0
    """Ended episodes left out for being more than `buffer.max_staleness` versions old."""
    url: str = ""
    """The endpoint's base URL (what an OpenAI client's `base_url` takes)."""
    _pending: list[Episode] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        env, cfg = self.cfg.env, self.cfg
        self.engine_version = self.version
        self.endpoint = Endpoint(
            self.codec.tokenizer,
            self.svc.generator,
            version=lambda: self.engine_version,
            max_prompt_tokens=cfg.model.seq_len - cfg.rollout.max_tokens,
            max_batch=env.endpoint.max_batch,  # type: ignore[union-attr]
            batch_wait_s=env.endpoint.batch_wait_s,  # type: ignore[union-attr]
            seed=cfg.run.seed,
        )
        from rlsvc.serve.http import serve  # FastAPI and uvicorn: only in an endpoint job's driver

        self._stack = ExitStack()
        self.url = self._stack.enter_context(serve(self.endpoint, env.endpoint))  # type: ignore[union-attr]
        print(f"rlsvc endpoint: agents' base_url {self.url}", flush=True)

    def sync_weights(self) -> dict[str, float]:
        """The trainer's weights to the engines while no endpoint call samples."""
        with self.endpoint.batcher.lock:
            out = super().sync_weights()
            self.engine_version = self.version
        return out

    def collect(self, batch: int, version: int) -> list[Episode]:
        """The next `groups_per_step` complete groups the agents ended, oldest first."""
        grpo, wait_s = self.cfg.grpo, self.cfg.env.wait_s  # type: ignore[union-attr]
        deadline = time.monotonic() + wait_s
        while True:
            self._pending += self.endpoint.take(1 << 30, timeout_s=0.5)
            fresh = [ep for ep in self._pending if version - ep.policy_version <= self.cfg.buffer.max_staleness]
            self.stale_dropped += len(self._pending) - len(fresh)
            groups: dict[int, list[Episode]] = defaultdict(list)
            for ep in fresh:
                if len(groups[ep.group_id]) < grpo.group_size:
                    groups[ep.group_id].append(ep)
            ready = [g for g in groups.values() if len(g) == grpo.group_size][: grpo.groups_per_step]
            if len(ready) == grpo.groups_per_step:
                taken = {id(ep) for g in ready for ep in g}
                self._pending = [ep for ep in fresh if id(ep) not in taken]
                return [ep for g in ready for ep in g]
            self._pending = fresh
            if time.monotonic() > deadline:
                raise AgentsTooSlow(
                    f"env.wait_s: the agents ended {len(ready)} of {grpo.groups_per_step} groups of {grpo.group_size} in {wait_s:g} s"
                )

    def step(self, step: int | None = None) -> tuple[dict[str, float], list[Episode]]:
        metrics, episodes = super().step(step)
        metrics["endpoint/stale_dropped_total"] = float(self.stale_dropped)
        metrics["endpoint/pending"] = float(len(self._pending))
        return metrics, episodes

    def close(self) -> None:
        """Stop the endpoint (the job's end; a recovery does not restart it)."""
        self._stack.close()
        self.endpoint.close()
