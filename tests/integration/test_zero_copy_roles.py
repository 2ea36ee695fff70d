"""Ray's zero-copy tensor serializer only where tensors travel (cluster/placement.py `TENSOR_ROLES`):
on the local cluster a job starts itself, an env-role actor never imports torch, and a
tensor-role actor that sets its environment in its constructor (`with_env`) sends tensors
through the zero-copy serializer all the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlsvc.cluster.placement import GOMP_SPINCOUNT
from tests.conftest import REPO

pytestmark = pytest.mark.integration

SCRIPT = """
import json, os, sys
import ray
from rlsvc.cluster.actors import with_env
from rlsvc.cluster.placement import plan
from rlsvc.cluster.ray_setup import connect, cluster_view
from rlsvc.config import load_config


class Probe:
    def __init__(self):
        self.spin = os.environ.get("GOMP_SPINCOUNT")

    def torch_imported(self):
        return "torch" in sys.modules

    def zero_copy(self):
        from ray._private import worker
        return worker.global_worker.get_serialization_context()._zero_copy_tensors_enabled

    def tensor(self):
        import torch
        return torch.arange(6, dtype=torch.float32)


cfg = load_config(None, [])
conn = connect(cfg.cluster, log_to_driver=False)
try:
    places = plan(cfg, *cluster_view())
    out = {}
    for role in ("env", "rollout"):
        place = places[role]
        assert place.env_in_process, role
        actor = ray.remote(with_env(Probe, place.worker_env())).options(**place.options(0)).remote()
        out[role] = {
            "zero_copy": ray.get(actor.zero_copy.remote()),
            "torch": ray.get(actor.torch_imported.remote()),
            "spin": ray.get(actor.__ray_call__.remote(lambda self: self.spin)),
        }
        if role != "env":
            out[role]["tensor"] = ray.get(actor.tensor.remote()).tolist()
    print("RESULT " + json.dumps(out))
finally:
    conn.shutdown()
"""


def test_only_tensor_roles_import_torch_for_ray_and_they_still_send_tensors_zero_copy():
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "RAY_ADDRESS")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line.removeprefix("RESULT "))
    assert out["env"] == {"zero_copy": False, "torch": False, "spin": None}
    tensor = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    # the synchronous loop's rollout worker spins too, set in its constructor like the rest
    assert out["rollout"] == {"zero_copy": True, "torch": True, "spin": GOMP_SPINCOUNT, "tensor": tensor}
