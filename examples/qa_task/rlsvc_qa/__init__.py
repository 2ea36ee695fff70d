"""A single-turn verifiable-answer task for rlsvc, written only against rlsvc's public task
interface (rlsvc.task.Task): questions and answers from a JSONL file, exact-match reward."""
