"""Supervised fine-tuning's core as plain classes (issue 57's supervised stage, not yet a job):
examples encoded with the policy's own prompt path and a loss on the answer tokens only
(`examples`), length-grouped batches (`batching`), and steps over the trainer (`core`).
docs/reasoning.md says what exists."""
