"""Concurrent requests into one generate call: agents' requests arrive one by one on the HTTP
server's threads; the engine samples a batch at the cost of about one prompt, so a thread takes
every request waiting and makes one `generate` call of them (the rollout runner's batching)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future

from rlsvc.rollout.runner import Generator


class Batcher:
    """`submit` a prompt, get a future of (the engine's result, the policy version that sampled
    it). `version` is read before each generate call; `between_calls` runs between two calls
    (where a job loads newer weights), with no call in flight."""

    def __init__(
        self,
        generator: Generator,
        version: Callable[[], int],
        max_batch: int = 64,
        between_calls: Callable[[], None] | None = None,
    ) -> None:
        self.generator, self.version, self.max_batch = generator, version, max_batch
        self.between_calls = between_calls
        self.calls = 0
        self.lock = threading.Lock()
        """Held through each generate call: whoever holds it (a weight sync) has the engines alone."""
        """Generate calls made (each with every request that was waiting)."""
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
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # serve what was taken, then stop
                    break
                batch.append(item)
            self._serve(batch)

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
