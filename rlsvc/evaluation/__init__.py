"""Evaluation during training beyond the task's own hooks: the test-split evaluation through the
rollout engines (`rlsvc/evaluation/test_split.py`) and its statistics (`rlsvc/evaluation/stats.py`).

Neither module imports Ray or torch: the job (rlsvc/job/test_eval.py) hands them the rollout
engines as a plain `generate` callable."""
