"""Concurrent requests into one generate call: agents' requests arrive one by one on the HTTP
server's threads; the engine samples a batch at the cost of about one prompt, so a thread takes
the waiting requests and makes one `generate` call of them (the rollout runner's batching).

Taking only what is waiting when the first request arrives splits a turn: the agents' requests
of one turn come milliseconds apart, so the first went alone and the rest into a second call
(`benchmarks/endpoint_overhead.py` measured generate calls of 1 then 15 for 16 agents, every
turn). With `live` (how many episodes could send a request now), the thread waits until every
live episode's request is in, or no request has come for `wait_s`, whichever comes first."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from rlsvc.rollout.runner import Generator


class Batcher:
    """`submit` a prompt, get a future of (the engine's result, the policy version that sampled
    it). `version` is read before each generate call; `between_calls` runs between two calls
    (where a job loads newer weights), with no call in flight. `live` returns how many requests a
    full batch has (the open episodes); None serves whatever is waiting at once."""

    def __init__(
        self,
        generator: Generator,
        version: Callable[[], int],
        max_batch: int = 64,
        between_calls: Callable[[], None] | None = None,
        live: Callable[[], int] | None = None,
        wait_s: float = 0.0,
    ) -> None:
        self.generator, self.version, self.max_batch = generator, version, max_batch
        self.between_calls, self.live, self.wait_s = between_calls, live, wait_s
        self.calls = 0
        """Generate calls made."""
        self.lock = threading.Lock()
        """Held through each generate call: whoever holds it (a weight sync) has the engines alone."""
        self._queue: queue.Queue[tuple[list[int], int, Future] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="rlsvc-endpoint-batcher", daemon=True)
        self._thread.start()

    def submit(self, prompt: list[int], seed: int) -> Future:
        future: Future = Future()
        self._queue.put((prompt, seed, future))
        return future

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = self._gather(first)
            self._serve(batch)
            if stop:
                return

    def _gather(self, first: tuple[list[int], int, Future]) -> tuple[list[tuple[list[int], int, Future]], bool]:
        """`first` and the requests that join it: those waiting, then (with `live`) those that
        arrive until the batch has every live episode's request or none came for `wait_s`. True
        with it when `close` came meanwhile (the batch is served, then the thread stops)."""
        batch, deadline = [first], time.monotonic() + self.wait_s
        while len(batch) < self.max_batch:
            left = deadline - time.monotonic()
            if self.live is None or left <= 0 or len(batch) >= self.live():
                timeout = None  # take only what is already waiting
            else:
                timeout = min(left, 0.005)  # short: an episode that ends meanwhile lowers `live`
            try:
                item = self._queue.get_nowait() if timeout is None else self._queue.get(timeout=timeout)
            except queue.Empty:
                if timeout is None:
                    break
                continue
            if item is None:
                return batch, True
            batch.append(item)
            # from the latest arrival: a turn's requests come in a burst that a loaded machine
            # stretches (16 took over 50 ms here at load 15), an idle episode costs one wait
            deadline = time.monotonic() + self.wait_s
        return batch, False

    def _serve(self, batch: list[tuple[list[int], int, Future]]) -> None:
        try:
            with self.lock:
                if self.between_calls is not None:
                    self.between_calls()
                version = self.version()
                outs = self.generator.generate([p for p, _, _ in batch], [s for _, s, _ in batch])
                self.calls += 1
        except BaseException as err:  # every waiting request fails with the engine's error
            for _, _, future in batch:
                future.set_exception(err)
            return
        for (_, _, future), out in zip(batch, outs):
            future.set_result((out, version))
