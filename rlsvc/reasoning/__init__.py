"""Reasoning with verifiable rewards (GSM8K-style): a deterministic problem generator
(`generate`), dataset loading through Hugging Face `datasets` (`data`), final-answer extraction
(`answers`), math-verify rewards (`rewards`) and prompt templates (`prompts`). docs/reasoning.md
says what exists.

Importing this package imports neither `datasets`, math-verify, torch nor Ray: each module loads
its heavy library inside the function that needs it, so `rlsvc.config` and `--help` stay fast.
"""
