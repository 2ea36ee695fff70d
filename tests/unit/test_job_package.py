"""The job's shape (issue 55): `run` names its phases in under 60 lines, no function of the job
package is over 80, its Ray-free parts import without Ray, the public names stay reachable, and
the step counter is the loop's policy version alone."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from test_grpo_loop import make_loop

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "rlsvc" / "job"


def function_lengths(path: Path) -> dict[str, int]:
    tree = ast.parse(path.read_text())
    return {f"{path.name}:{n.name}": n.end_lineno - n.lineno + 1 for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}  # type: ignore[operator]


def test_run_reads_in_one_screen_and_no_job_function_is_over_80_lines():
    lengths = {k: v for p in sorted(JOB.glob("*.py")) for k, v in function_lengths(p).items()}
    assert lengths["main.py:run"] < 60
    assert {k: v for k, v in lengths.items() if v > 80} == {}


def test_the_ray_free_parts_of_the_job_import_without_ray():
    code = (
        "import sys\n"
        "import rlsvc.job, rlsvc.job.faults, rlsvc.job.preemption, rlsvc.job.training_checkpoint\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, env={"PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "[]", out.stdout


def test_the_public_names_of_the_job_are_still_reached_from_rlsvc_job():
    code = "import rlsvc.job as j; print(all(callable(getattr(j, n)) for n in ('run', 'prepare_model', 'setup_trainers', 'policy_meta')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, env={"PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "True"


def test_the_step_is_the_loops_policy_version():
    loop, _, _ = make_loop()
    loop.step()
    loop.step(1)  # a caller's own count agrees
    assert loop.version == 2
    with pytest.raises(ValueError, match="step 5 asked of a loop at policy version 2"):
        loop.step(5)
