"""The trained policy as an MLflow pyfunc model ("models from code": MLflow copies this file into
the model, with rlsvc/saved_policy.py beside it, so loading it back needs torch and transformers,
not rlsvc).

    policy = mlflow.pyfunc.load_model(f"runs:/{run_id}/policy")
    policy.predict(["player 15 dealer 10 ace no action :"])   # -> ["HIT"]

Input: prompts as the policy saw them in training (the model's `input_example` shows one).
Output: the greedy completion of each, at most `max_tokens` tokens, restricted to the checkpoint's
allowed answer tokens when training was (BlackJack's HIT/STAND): `SavedPolicy.complete`, the
generic way to query a saved policy, with the prompt encoding training uses. The checkpoint folder
(the model's `checkpoint` artifact) is the HF folder `rlsvc.train` saves.
"""

from __future__ import annotations

from typing import Any, cast

import mlflow
from mlflow.pyfunc import PythonModel


class PolicyModel(PythonModel):
    def load_context(self, context) -> None:  # type: ignore[no-untyped-def]
        try:
            from rlsvc.saved_policy import SavedPolicy
        except ImportError:  # served without rlsvc: the model carries the module (its code_paths)
            from saved_policy import SavedPolicy  # type: ignore[no-redef]

        self.policy = SavedPolicy.load(context.artifacts["checkpoint"])

    # MLflow reads the signature (strings in, strings out) off these type hints
    def predict(self, context, model_input: list[str], params: dict | None = None) -> list[str]:  # type: ignore[no-untyped-def]
        prompts = list(cast(Any, model_input)["prompt"]) if hasattr(model_input, "columns") else list(model_input)  # a DataFrame too
        return self.policy.complete(prompts, (params or {}).get("max_tokens"))


mlflow.models.set_model(PolicyModel())
