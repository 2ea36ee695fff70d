"""The job summary's "episodes trained on" and episodes/s count the episodes the steps trained on
(the loop's per-step `episodes_trained` metric), not B x G per step: dynamic sampling's round cap
can leave a step short (rlsvc/job/finish.py, rlsvc/loop.py)."""

from __future__ import annotations

from test_dynamic_sampling import half_flat_loop
from test_grpo_loop import B, G, make_loop

from rlsvc.job.finish import episodes_trained


def test_a_full_step_counts_b_times_g_episodes():
    loop, _, _ = make_loop()
    metrics, _ = loop.step(0)
    assert metrics["episodes_trained"] == float(B * G)


def test_a_step_dynamic_sampling_left_short_counts_what_it_trained_on():
    loop, svc, _ = half_flat_loop(["grpo.max_sampling_rounds=1"])
    metrics, _ = loop.step(0)
    assert metrics["dynamic/short"] == 1.0
    assert metrics["episodes_trained"] == float(2 * G) == float(svc.trainer_group.steps[0].input_ids.shape[0])


def test_the_summary_sums_the_steps_after_the_start_once_each():
    # steps 1-4; step 3 ran short; step 4 was replayed after a rewind (logged twice, last counts)
    steps, counts = [1, 2, 3, 4, 4], [64.0, 64.0, 16.0, 48.0, 64.0]
    assert episodes_trained(steps, counts, 0, 4) == 64 + 64 + 16 + 64
    assert episodes_trained(steps, counts, 2, 4) == 16 + 64  # a resumed job's own steps
    assert episodes_trained([], [], 0, 0) == 0
