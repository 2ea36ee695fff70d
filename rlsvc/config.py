"""The typed config tree, YAML loading and dotted CLI overrides.

This module imports neither torch, Ray nor vLLM: `python -m rlsvc.train --help` and config errors
must answer in well under two seconds, before any cluster starts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from rlsvc.reasoning.answers import INSTRUCTIONS, AnswerFormat  # standard library only

if TYPE_CHECKING:
    from rlsvc.task import Prompt


class ConfigError(ValueError):
    """A config problem, already phrased as one line that names the field."""


MIN_HEAD_DIM = 32  # vLLM's CPU attention kernels reject smaller heads (docs/configuration.md)


class Strict(BaseModel):
    """Base for every section: unknown keys are errors, and field docstrings are descriptions."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


DEFAULT_RUN_NAME = "blackjack_tiny"
"""`run.name` of the built-in defaults (configs/blackjack_tiny.yaml); other tasks' runs take the task's name."""


class RunConfig(Strict):
    name: str = ""
    """Run name: the MLflow run name, the default experiment and the prefix of the run folder.
    Empty: the task's own `name` (the built-in defaults, env.type=blackjack: `blackjack_tiny`)."""
    seed: int = 0
    """Seed for model init, episode seeds and sampling; the same seed repeats a run."""
    output_dir: str = "runs"
    """Folder under which each run writes `<name>-<timestamp>/` (resolved config, checkpoints,
    final checkpoint), or an object-store URI (`s3://bucket/runs`: any fsspec file system, s3fs
    installed with the `s3` extra; credentials from the usual `AWS_*` environment). In an object
    store the checkpoints are written there directly (each trainer rank its own shards, the
    manifest last) and the run's other files are uploaded at every checkpoint and at the end."""
    steps: int = Field(300, ge=0)
    """Number of GRPO optimizer steps (each one a rollout batch, a train step and a weight sync)."""
    time_budget_minutes: float | None = Field(12.0, gt=0)
    """Stop training when this much wall time has passed since start-up (then evaluate and save)."""
    checkpoint_every: int = Field(25, ge=0)
    """Write a training checkpoint (trainer model and optimiser, reference and best weights,
    replay buffer, counters, MLflow run id) every this many steps, and after the last; 0: only
    after the last. `--resume RUN_FOLDER` (a path or the run's URI) continues from the newest
    complete one. On a multi-node cluster `output_dir` must be storage the trainer nodes share
    with the driver: a shared file system or an object store."""
    keep_checkpoints: int = Field(2, ge=1)
    """How many checkpoints to keep (the newest); older ones are deleted once a new one is complete."""
    preemption_grace_s: float = Field(25.0, gt=0)
    """On SIGTERM (a pod deleted, `ray job stop`, a node reclaimed) the driver finishes the step in
    flight, writes a checkpoint and exits with code 143; `--resume` continues. Past this many
    seconds it exits without waiting (the newest checkpoint stands). Keep it below what the
    platform waits before SIGKILL: Kubernetes' `terminationGracePeriodSeconds` (30 s by default),
    Ray's `RAY_JOB_STOP_WAIT_TIME_S` for `ray job stop` (3 s by default: raise it)."""


class TitanModelConfig(Strict):
    """A TorchTitan Llama-3 architecture; the default is a tiny policy for CPU."""

    arch: Literal["llama3"] = "llama3"
    """TorchTitan model family, exported as Hugging Face `LlamaForCausalLM` (a pretrained
    checkpoint's own family comes from its config.json: `model.source=hf`)."""
    dim: int = Field(128, gt=0)
    """Hidden size."""
    n_layers: int = Field(2, gt=0)
    """Number of transformer blocks."""
    n_heads: int = Field(4, gt=0)
    """Attention heads; dim / n_heads is the head dim, at least 32 for vLLM's CPU kernels."""
    n_kv_heads: int = Field(2, gt=0)
    """Key/value heads (grouped-query attention); must divide n_heads."""
    vocab_size: int = Field(64, gt=0)
    """Embedding rows; at least the tokenizer's vocabulary."""
    ffn_hidden_dim: int = Field(256, gt=0)
    """Hidden size of the SwiGLU feed-forward layer."""
    max_seq_len: int = Field(32, gt=0)
    """Longest sequence (prompt + answer) the model and vLLM accept."""
    rope_theta: float = 10000.0
    """RoPE base frequency."""
    norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    tokenizer: Literal["blackjack", "chars", "bytes"] = "blackjack"
    """Built-in tokenizer saved with the model (rlsvc/models/tokenizer.py): `blackjack` (a word
    vocabulary of BlackJack's prompts: each of its answers is one token, any other word is
    `<unk>`), `chars` (one token per printable ASCII character) or `bytes` (one token per UTF-8
    byte: any text, never `<unk>`). Unset on a plug-in task (`env.task`): `bytes`, with
    `vocab_size` 320 unless set. A job refuses to start when a sampled prompt of its task
    would hold `<unk>`."""
    init_embedding_std: float = Field(0.02, gt=0)
    """Std of the token-embedding init. TorchTitan's Llama uses 1.0; in a model this small that
    drowns the context in the answer position's own embedding (the output barely depends on the
    prompt at init: 0.4% vs 33% at 0.02), and GRPO then cannot find state-dependent policies."""

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @model_validator(mode="after")
    def _check_shapes(self) -> TitanModelConfig:
        from rlsvc.models.tokenizer import TOKENIZER_SIZES  # no torch: the vocabularies are plain lists

        if self.dim % self.n_heads:
            raise ValueError(f"dim ({self.dim}) must be divisible by n_heads ({self.n_heads})")
        if self.head_dim < MIN_HEAD_DIM:
            raise ValueError(
                f"head dim dim/n_heads = {self.head_dim} must be >= {MIN_HEAD_DIM} (vLLM CPU attention kernels); lower n_heads or raise dim"
            )
        if self.head_dim % 2:
            raise ValueError(f"head dim ({self.head_dim}) must be even for RoPE")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})")
        if self.vocab_size < TOKENIZER_SIZES[self.tokenizer]:
            raise ValueError(
                f"vocab_size ({self.vocab_size}) must be >= the {self.tokenizer} tokenizer's {TOKENIZER_SIZES[self.tokenizer]} tokens"
            )
        return self


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The projections LoRA can adapt, by their Hugging Face (and PEFT) names; every supported family
(the built-in Llama, Qwen3, Llama 3, Qwen2/2.5) has all seven in each decoder layer."""


class LoraConfig(Strict):
    """LoRA on the policy (docs/lora.md): the base weights frozen, low-rank adapters trained."""

    enabled: bool = False
    """Train LoRA adapters instead of the whole model."""
    rank: int = Field(16, gt=0, le=512)
    """The adapters' rank r (512: the largest rank vLLM serves)."""
    alpha: float = Field(32.0, gt=0)
    """The adapters' scale is alpha / rank (PEFT's `lora_alpha`)."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout on the adapters' input while training (PEFT's `lora_dropout`); 0 keeps every step
    deterministic, and a 2-rank step equal to the 1-rank step."""
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj"]
    """Projections that get adapters, by Hugging Face name (one of LORA_TARGETS)."""

    @field_validator("target_modules")
    @classmethod
    def _check_targets(cls, v: list[str]) -> list[str]:
        unknown = [t for t in v if t not in LORA_TARGETS]
        if unknown:
            raise ValueError(f"unknown module {unknown[0]!r}; the model's linear modules are {', '.join(LORA_TARGETS)}")
        if not v:
            raise ValueError(f"needs at least one of {', '.join(LORA_TARGETS)}")
        return list(dict.fromkeys(v))

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank


class ModelConfig(Strict):
    source: Literal["scratch", "hf"] = "scratch"
    """`scratch`: build `titan` with fresh weights and the built-in tokenizer; `hf`: load the
    pretrained Hugging Face checkpoint at `path` (Qwen3, Llama 3, Qwen2/2.5), its tokenizer and
    chat template included."""
    path: str | None = None
    """With source=hf: a local Hugging Face folder; a hub id (`Qwen/Qwen3-1.7B`, downloaded once
    with `huggingface_hub` where a network exists); or `tiny:FAMILY` (qwen3, llama, qwen2): a
    small random model of that family with a trained byte-level BPE chat tokenizer, written once
    by `rlsvc.models.make_tiny_hf` under `run.output_dir/tiny-hf/` (CPU tests and demos)."""
    tiny_init_std: float | None = Field(None, gt=0)
    """With path `tiny:FAMILY`: the std of the tiny model's random weights (its config's
    `initializer_range`); None: the family's own 0.02. Other paths ignore it (a real checkpoint
    has its weights). A random model that must learn to read a
    chat prompt from the warm start and GRPO alone does it far sooner at 0.1: its answer's
    logits then depend on the prompt from the start (docs/models.md)."""
    max_seq_len: int = Field(512, gt=0)
    """With source=hf: the longest sequence (all of an episode's turns, prompts and answers)
    the trainer and vLLM take; an episode that would grow past it is cut and counted
    (`truncated_rate`)."""
    titan: TitanModelConfig = TitanModelConfig()
    """Architecture of the policy when built from scratch (source=hf reads the checkpoint's)."""
    warm_start_steps: int = Field(30, ge=0)
    """Supervised steps on the task's warm-start examples (`Task.warm_start_examples`; BlackJack:
    random HIT/STAND answers) that teach only the answer format, standing in for a pretrained model
    that already knows it (docs/design.md: without it BlackJack's GRPO collapses to 'stand'). A task
    without the hook switches the default off."""
    warm_start_on_prompts: bool = False
    """The warm start's loss also covers the prompts (next-token prediction of the observation
    text, as pretraining would have taught; the answers stay random, so no strategy). On its own
    it did not make a tiny random model behind a chat prompt read the observation; weights of
    larger std did (`tiny_init_std`, docs/models.md)."""
    lora: LoraConfig = LoraConfig()
    """LoRA adapters instead of full fine-tuning (off by default; docs/lora.md)."""

    @model_validator(mode="after")
    def _check_source(self) -> ModelConfig:
        if self.source == "hf" and not self.path:
            raise ValueError("source=hf needs model.path (a local folder, a hub id or tiny:FAMILY)")
        if self.source == "hf" and self.titan != TitanModelConfig():  # (a dumped config carries the defaults)
            raise ValueError("model.titan describes a model built from scratch; with source=hf the checkpoint's config.json decides")
        return self

    @property
    def seq_len(self) -> int:
        """The longest sequence the trainer and vLLM take, whichever the source."""
        return self.titan.max_seq_len if self.source == "scratch" else self.max_seq_len


class RolloutConfig(Strict):
    num_workers: int = Field(1, ge=1)
    """vLLM rollout workers (one engine each)."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature of the behaviour policy. The trainer scores tokens under the same
    distribution (logits / temperature), the one vLLM reports their logprobs from."""
    max_tokens: int = Field(1, ge=1)
    """Tokens generated per decision (at most); an answer stops earlier at the tokenizer's
    end-of-turn token (the default, 1, fits tasks whose answers are one token each, as BlackJack's)."""
    context: Literal["turn", "episode"] = "turn"
    """`turn`: each decision's prompt is the latest observation alone (one training row per
    decision). `episode`: an episode is one token sequence; each turn appends the environment's
    rendered reply and the tokens vLLM sampled, exactly as sampled (token in, token out), and
    the loss covers only the sampled tokens. Needs `model.max_seq_len` room for every turn."""
    constrained_actions: bool = False
    """Restrict sampling to the tokens of the task's fixed answers (`Task.answers()`, one token
    each; vLLM `allowed_token_ids`), applied identically in the trainer's logprobs; with False an
    invalid answer gets `env.invalid_action_penalty`."""
    gpu_memory_utilization: float = Field(0.3, gt=0, le=1)
    """vLLM's memory fraction (on CPU it bounds the KV cache with `kv_cache_gb`)."""
    kv_cache_gb: float = Field(1.0, gt=0)
    """Most KV cache on CPU, GiB: an engine allocates no more than a full batch of sequences of
    `model.max_seq_len` tokens takes (32 MiB for the built-in policy), since beyond that no
    request waits for room."""
    block_size: int | None = Field(None, ge=1)
    """KV cache block size in tokens; None: 32 on CPU, vLLM's own default on GPU. Prompts share
    cached blocks only when whole: a GRPO group's shared prompt is computed once per batch from
    block_size + 1 tokens on (vLLM's CPU default of 128 would leave a 128-token prompt computed
    for every sample)."""
    enforce_eager: bool = True
    """No CUDA graphs / compilation: start-up dominates for tiny models."""
    tensor_parallel_size: int = Field(1, ge=1)
    """vLLM tensor parallelism per worker (GPU clusters): the policy is split over this many GPUs
    of one node, which `num_gpus` must reserve."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Engine weights and compute: `auto` is bfloat16 where CUDA exists, float32 on CPU."""
    num_cpus: float = Field(2.0, gt=0)
    """Ray CPUs reserved per rollout worker (also its thread count)."""
    num_gpus: float = Field(0.0, ge=0)
    """Ray GPUs per rollout worker (0 on CPU machines)."""
    slot_groups: int = Field(1, ge=1)
    """Split the env slots into this many groups, each played by its own driver thread: while
    one group's actions are in the environments, another group's next prompts are generated,
    so an environment's latency (a remote sandbox's round trip) overlaps generation. Each env
    actor then takes this many calls at once (Ray's `max_concurrency`). Episodes are the same
    for any value: sampling seeds depend on the episode and turn only. With tens of ms of env
    latency, more groups let the others' round trips wait while one generate call runs;
    docs/async.md measures 1-4 groups against a 50 ms env in both loops."""
    asynchronous: bool = False
    """Keep playing episodes while the trainer steps (rlsvc/async_loop.py); batches may be up to
    `buffer.max_staleness` versions behind (0 keeps the synchronous schedule)."""
    keep_freed_memory: bool = True
    """Rollout workers keep the memory they free (glibc `mallopt`, rlsvc/malloc.py): on CPU
    every weight update repacks each linear weight for oneDNN into new buffers, which would
    otherwise be fresh mappings faulted in page by page on every update."""

    @model_validator(mode="after")
    def _check_tp(self) -> RolloutConfig:
        if self.tensor_parallel_size > 1 and self.num_gpus < self.tensor_parallel_size:
            raise ValueError(
                f"tensor_parallel_size={self.tensor_parallel_size} needs num_gpus >= {self.tensor_parallel_size} (one GPU per tensor-parallel rank); num_gpus is {self.num_gpus:g}"
            )
        return self


class CodeSettings(Strict):
    """The code-interpreter environment (env.type=code, rlsvc/envs/code_interpreter.py)."""

    backend: Literal["local", "together"] = "local"
    """Where code runs: `local`, a sandbox on the env actor's node (rlsvc/sandbox/local.py);
    `together`, Together's Code Interpreter (TOGETHER_API_KEY in the env actors' environment)."""
    tasks: Literal["programming", "arithmetic", "mixed"] = "mixed"
    """Programming problems scored by hidden unit tests, arithmetic word problems scored by the
    exact number, or both (chosen per episode from its seed)."""
    error_penalty: float = Field(0.1, ge=0)
    """Subtracted from the episode's reward for every executed cell or submission that raised."""
    exec_timeout_s: float = Field(5.0, gt=0)
    """Wall-clock limit of one execution."""
    memory_mb: int = Field(512, ge=64)
    """Address-space limit of a local execution."""
    disk_mb: int = Field(64, ge=1)
    """Size of a local execution's /tmp, a tmpfs whose pages count against the run's memory
    (fallocate included); with /dev/shm (16 MB) and /run, /var, /home (1 MB each), all a run can
    write. Nothing goes to the node's disk."""
    together_base_url: str | None = None
    """Code Interpreter endpoint; default TOGETHER_BASE_URL, else Together's public API."""
    attempts: int = Field(5, ge=1)
    """Tries per call to the together backend (429, 5xx, timeouts, failure responses) before the
    episode is marked failed and its group left out of training."""


class RemoteEnvConfig(Strict):
    """A remote OpenEnv server the env actors hold WebSocket sessions to, instead of serving the
    environment themselves (a team's environment pods, a hosted sandbox)."""

    url: str | None = None
    """The server's base URL (http://host:port); default: the task's own, if it names one; None:
    the env actors serve the task's environment themselves."""
    connect_timeout_s: float = Field(30.0, gt=0)
    """How long the driver waits for the server to answer before the job is refused, and how
    long a session waits for the server (at capacity, restarting) before its group is dropped."""


class EnvBase(Strict):
    """Settings every task has: how many env actors and sessions, turns, the invalid-answer
    penalty, and where the environment runs."""

    num_actors: int = Field(1, ge=1)
    """Env actors; each holds `sessions_per_actor` sessions of the task's OpenEnv environment."""
    sessions_per_actor: int = Field(256, ge=1)
    """Concurrent episodes (environment sessions) per env actor."""
    transport: Literal["auto", "in_process", "websocket"] = "auto"
    """How an env actor reaches its environment. `in_process`: the OpenEnv `Environment` objects
    live in the actor and are called directly (rlsvc/envs/in_process.py); `websocket`: the actor
    runs OpenEnv's server and holds a WebSocket session per slot (rlsvc/envs/openenv_pool.py);
    `auto`: WebSocket for a remote server (`remote.url`, which always uses it), in-process
    otherwise."""
    max_turns: int = Field(12, ge=1)
    """Decisions after which an unfinished episode is cut (counted as `truncated_rate`)."""
    invalid_action_penalty: float = -1.0
    """Return of an episode whose answer the task could not parse into an action (it ends there)."""
    step_latency_ms: float = Field(0.0, ge=0)
    """Simulated round trip added to every env step, as a remote sandbox has (benchmarks)."""
    num_cpus: float = Field(0.25, gt=0)
    """Ray CPUs reserved per env actor."""
    remote: RemoteEnvConfig = RemoteEnvConfig()
    """A remote OpenEnv server to train against (`env.remote.url`)."""


class BuiltinEnvBase(EnvBase):
    chat: bool = False
    """Prompts as chat messages (a system and a user message, through the tokenizer's chat
    template with its generation prompt), answers in the task's tagged format ending at the
    end-of-turn token; for pretrained chat models (`model.source=hf`). False: the built-in
    tokenizer's plain-text prompts."""
    system_prompt: str | None = None
    """With `chat`: the system message (None: the task's own, which states the answer format).
    Every prompt carries it, so a short one is cheaper and leaves the observation more weight."""


class BlackjackEnvConfig(BuiltinEnvBase):
    type: Literal["blackjack"] = "blackjack"
    """BlackJack (rlsvc/tasks/blackjack.py): the policy answers HIT or STAND at every decision."""
    then_stick_at: int | None = Field(None, ge=2, le=22)
    """Single-turn BlackJack: after the policy's first decision the environment plays the rest
    of the hand with stick-at-N (hit below N). The task benchmarks/vs_trl.py gives TRL too.
    None: the policy makes every decision."""


class CodeEnvConfig(BuiltinEnvBase):
    type: Literal["code"] = "code"
    """The code environment (rlsvc/tasks/code.py): the policy runs code and submits an answer."""
    code: CodeSettings = CodeSettings()
    """Settings of the code environment."""


class DatasetSpec(Strict):
    """Where a reasoning dataset's problems come from and how its columns read."""

    path: str | None = None
    """a hub dataset name (e.g. openai/gsm8k) or a local folder, for splits given by name; None when both splits are files"""
    subset: str | None = None
    """the dataset's configuration (GSM8K's is 'main'); None for none"""
    train: str = "train"
    """the train split: a .jsonl/.json/.parquet file, or a split name of `path`"""
    test: str = "test"
    """the test split: a .jsonl/.json/.parquet file, or a split name of `path`"""
    question_column: str = "question"
    """the column holding the problem"""
    answer_column: str = "answer"
    """the column holding the reference: a worked solution ending in the final-answer format, or the final answer alone"""
    answer_format: AnswerFormat = "gsm8k"
    """gsm8k: a last line '#### N'; boxed: \\boxed{...} (MATH-style)"""
    answer_is_final: bool = False
    """the answer column holds only the final answer (e.g. '72'), not a worked solution"""


class PromptTemplate(Strict):
    """How a reasoning problem becomes the policy's input."""

    style: Literal["plain", "chat"] = "plain"
    """plain: one string; chat: a list of messages ({role, content}) for the model's chat template"""
    template: str = "Question: {question}\n{instruction}\nAnswer:"
    """the prompt (plain) or the user's message (chat); must contain {question}, may contain {instruction}"""
    system: str | None = None
    """chat only: a system message placed first"""
    instruction: str | None = None
    """the final-answer instruction; None takes the answer format's (e.g. "... last line as '#### N'.")"""

    @model_validator(mode="after")
    def _check(self) -> PromptTemplate:
        if "{question}" not in self.template:
            raise ValueError("template must contain {question}")
        if self.system is not None and self.style != "chat":
            raise ValueError("system is for style 'chat' only")
        return self

    def render(self, question: str, answer_format: AnswerFormat = "gsm8k") -> Prompt:
        instruction = INSTRUCTIONS[answer_format] if self.instruction is None else self.instruction
        # replace, not str.format: a question may hold braces ("\\frac{1}{2}")
        text = self.template.replace("{instruction}", instruction).replace("{question}", question)
        if self.style == "plain":
            return text
        messages = [{"role": "system", "content": self.system}] if self.system else []
        return [*messages, {"role": "user", "content": text}]


class ReasoningEnvConfig(EnvBase):
    type: Literal["reasoning"] = "reasoning"
    """Reasoning with verifiable rewards (rlsvc/tasks/reasoning.py): a dataset's problem, one
    completion, its final answer checked by math-verify against the reference."""
    data: DatasetSpec = DatasetSpec()
    """The dataset: problems from its train split, the final evaluation on its test split. Relative
    file paths are resolved against the driver's working directory when the config is read."""
    prompt: PromptTemplate = PromptTemplate()
    """The prompt template: plain or chat (`prompt.style=chat` needs a chat model), system prompt."""
    reward: Literal["strict", "lenient"] = "strict"
    """What correctness pays for: `strict`, the required final-answer format with an equivalent
    answer (verl's and lm-eval's strict accuracy); `lenient`, also math-verify's own extraction."""
    correct_reward: float = 1.0
    """The reward of a correct answer."""
    format_reward: float = Field(0.0, ge=0)
    """Optional shaping: added when the required final-answer format is followed, right or wrong."""

    @model_validator(mode="after")
    def _resolve_files(self) -> ReasoningEnvConfig:
        """Relative data files and folders, absolute once here, in the driver: the env and reward
        actors may run in another working directory (or node) and load the same files."""
        data = self.data
        for split in ("train", "test"):
            value = getattr(data, split)
            if Path(value).suffix.lower() in (".jsonl", ".json", ".parquet") and not Path(value).is_absolute():
                setattr(data, split, str(Path(value).resolve()))
        if data.path is not None and not Path(data.path).is_absolute() and Path(data.path).is_dir():
            data.path = str(Path(data.path).resolve())
        return self


class PluginEnvConfig(EnvBase):
    type: Literal["plugin"] = "plugin"
    """A task from outside rlsvc, named by `task` (set by giving `env.task`)."""
    task: str
    """An entry point of group `rlsvc.tasks` (an installed package's task, by name), or an
    import path `package.module:factory`; the factory returns an `rlsvc.task.Task`."""
    options: dict[str, Any] = {}
    """Keyword arguments for the task's factory (the task validates them)."""


class EndpointConfig(Strict):
    """The OpenAI-compatible endpoint for black-box agents (rlsvc/serve/, docs/agents.md)."""

    host: str = "127.0.0.1"
    """Address it listens on; anything but a loopback address needs `api_key`."""
    port: int = Field(0, ge=0, le=65535)
    """Port it listens on; 0: a free one (the endpoint says which when it starts)."""
    api_key: SecretStr | None = None
    """The key agents send as `Authorization: Bearer <key>` (the OpenAI client's `api_key`);
    required when `host` is not a loopback address, optional on one. Never logged nor written
    with the resolved config (it shows as `**********`)."""
    max_batch: int = Field(64, ge=1)
    """Most waiting requests served by one generate call."""
    batch_wait_s: float = Field(0.05, ge=0)
    """How long a generate call waits for the next request, while its batch lacks one of an open
    episode (agents' requests of one turn arrive milliseconds apart); each arrival restarts it,
    so an episode that sends nothing delays the call by this much. 0 serves what is waiting."""

    @model_validator(mode="after")
    def _key_off_loopback(self) -> EndpointConfig:
        if self.host not in ("127.0.0.1", "localhost", "::1") and self.api_key is None:
            raise ValueError(f"api_key is required when host is not a loopback address (got {self.host!r})")
        return self


class EndpointEnvConfig(EnvBase):
    type: Literal["endpoint"] = "endpoint"
    """Black-box agents play the episodes through an OpenAI-compatible endpoint over the rollout
    workers (rlsvc/serve/, docs/agents.md): each step trains on the groups they ended."""
    endpoint: EndpointConfig = EndpointConfig()
    """Where the endpoint listens, and its key."""
    wait_s: float = Field(600.0, gt=0)
    """How long a step waits for the agents to end `grpo.groups_per_step` complete groups
    before the job stops."""
    num_actors: int = Field(1, ge=1)
    """Env actors (no episode reaches them: the agents are the environment)."""
    sessions_per_actor: int = Field(1, ge=1)
    """Sessions per env actor (none is used)."""


EnvConfig = Annotated[
    BlackjackEnvConfig | CodeEnvConfig | ReasoningEnvConfig | PluginEnvConfig | EndpointEnvConfig, Field(discriminator="type")
]
"""The environment section: `env.type` picks a built-in task; `env.task` a third-party one."""


def _env_type_from_task(env: Any) -> Any:
    """`env.task=...` alone selects a plugin task (no need to also say env.type=plugin); with
    neither, the task is BlackJack."""
    if isinstance(env, dict) and "task" in env:
        kind = env.get("type", "plugin")
        if kind != "plugin":
            raise ValueError(f"env.task names a third-party task, but env.type is {kind!r}: give one of the two")
        return {**env, "type": "plugin"}
    if isinstance(env, dict) and "type" not in env:
        return {**env, "type": "blackjack"}
    return env


class GRPOConfig(Strict):
    groups_per_step: int = Field(64, ge=1)
    """B: groups per step; each group starts from its own seed (`reset(seed=...)`)."""
    group_size: int = Field(8, ge=2)
    """G: episodes per group, all reset with the group's seed (the same start state), so their
    returns are comparable."""
    normalize_std: bool = True
    """Divide group-centred returns by the group std (GRPO); False keeps only the mean baseline."""
    clip_eps: float = Field(0.2, gt=0)
    """Lower clip of the importance ratio (and upper, unless clip_eps_high is set)."""
    clip_eps_high: float | None = Field(None, gt=0)
    """Upper clip of the ratio (DAPO's clip-higher); None means clip_eps."""
    kl_coef: float = Field(0.2, ge=0)
    """Weight of the k3 KL to the reference model; 0 builds no reference (`trainer.reference_actor`)."""
    normalization: Literal["token", "sequence"] = "token"
    """`token`: every sampled token weighs the same; `sequence`: every episode weighs the same."""
    tis_cap: float | None = Field(None, gt=0)
    """Truncated importance sampling for off-policy batches: clip the ratio against the trainer's
    own logprobs before the step (one extra forward pass) and weight each token by
    min(pi_trainer / pi_vLLM, tis_cap). None: the clipped ratio is taken against vLLM's logprobs."""
    loss: Literal["grpo", "dr_grpo", "gspo"] = "grpo"
    """The policy loss (rlsvc/algo/variants.py has each paper's definition). `grpo`: the clipped
    token ratio, token sums divided by the response tokens. `dr_grpo` (Dr. GRPO): no std division
    of advantages (`normalize_std` becomes false) and token sums divided by a constant, sequences x
    `rollout.max_tokens`, not by the tokens sampled. `gspo` (GSPO): one importance ratio per
    response (the geometric mean of its token ratios), clipped per response; with neither
    `clip_eps` nor `clip_eps_high` set, they become the paper's 3e-4 and 4e-4."""
    overlong_buffer: int | None = Field(None, ge=0)
    """DAPO's soft overlong punishment: over the last this many tokens of `rollout.max_tokens` the
    reward loses up to `overlong_penalty`, linearly, and a response cut at the budget loses all of
    it; applied to the rewards before advantages (an episode's longest response counts). None or
    0: off."""
    overlong_penalty: float = Field(1.0, gt=0)
    """The most the overlong punishment takes off a reward (with `overlong_buffer`)."""
    mask_truncated: bool = False
    """DAPO's overlong filtering: no loss on an episode with a response cut at `rollout.max_tokens`
    (its reward says nothing of its reasoning); it still counts in the group's advantages."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: groups whose rewards are all equal (no gradient) are dropped and
    fresh groups played until the step has `groups_per_step` kept groups, or
    `max_sampling_rounds` rounds were played (then it trains on what was kept). In the
    asynchronous loop the refills are the batches the producer already streams ahead."""
    max_sampling_rounds: int = Field(3, ge=1)
    """With `dynamic_sampling`: most batches of `groups_per_step` groups played for one step, the
    first included."""

    @model_validator(mode="before")
    @classmethod
    def _implied_by_loss(cls, data: Any) -> Any:
        """What a loss implies, where the config leaves it unset: Dr. GRPO no std division, GSPO
        its paper's clip range (the resolved config shows the values used)."""
        if not isinstance(data, dict):
            return data
        loss = data.get("loss", "grpo")
        implied: dict[str, Any] = {}
        if loss == "dr_grpo":
            implied = {"normalize_std": False}
        if loss == "gspo" and "clip_eps" not in data and "clip_eps_high" not in data:
            implied = {"clip_eps": GSPO_CLIP_EPS, "clip_eps_high": GSPO_CLIP_EPS_HIGH}
        return {**implied, **data}

    @model_validator(mode="after")
    def _check_combinations(self) -> GRPOConfig:
        default = {name: f.default for name, f in type(self).model_fields.items()}  # (a resolved config sets every field)
        if self.loss == "dr_grpo" and self.normalize_std:
            raise ValueError("normalize_std=true contradicts loss=dr_grpo (Dr. GRPO does not divide advantages by the group's std)")
        if self.loss == "dr_grpo" and self.normalization == "sequence":
            raise ValueError("normalization=sequence contradicts loss=dr_grpo (Dr. GRPO divides by sequences x rollout.max_tokens)")
        if self.loss == "gspo" and self.normalization == "sequence":
            raise ValueError("normalization=sequence contradicts loss=gspo (GSPO weighs every response the same)")
        if self.loss == "gspo" and self.tis_cap is not None:
            raise ValueError("tis_cap is not available with loss=gspo (its ratio is per response, not per token)")
        if self.overlong_penalty != default["overlong_penalty"] and not self.overlong_buffer:
            raise ValueError("overlong_penalty has no effect without overlong_buffer (tokens > 0)")
        if self.max_sampling_rounds != default["max_sampling_rounds"] and not self.dynamic_sampling:
            raise ValueError("max_sampling_rounds has no effect without dynamic_sampling=true")
        return self


GSPO_CLIP_EPS = 3e-4
"""GSPO's clip range (Zheng et al. 2025, section 5.1): its ratio is a geometric mean over the
response's tokens, so it stays far closer to 1 than a token ratio."""
GSPO_CLIP_EPS_HIGH = 4e-4


class TrainerConfig(Strict):
    num_ranks: int = Field(1, ge=1)
    """Trainer ranks (FSDP2 data parallel, gloo on CPU, NCCL on GPU)."""
    lr: float = Field(1e-3, gt=0)
    """AdamW learning rate (the peak, where a schedule moves it)."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """The learning rate over optimiser steps after the warm-up: `constant`, or a `linear` or
    `cosine` decay from `lr` to `lr * min_lr_ratio` at `decay_steps` (rlsvc/trainer/lr_schedule.py)."""
    warmup_steps: int = Field(0, ge=0)
    """Optimiser steps of linear warm-up from `lr / warmup_steps` to `lr` (any schedule)."""
    decay_steps: int | None = Field(None, ge=1)
    """Optimiser steps from the first to the end of the decay, warm-up included. None: the whole
    job (RL: `model.warm_start_steps` + `run.steps` x `minibatches`; `rlsvc sft`: its steps)."""
    min_lr_ratio: float = Field(0.0, ge=0, le=1)
    """The decayed learning rate's floor, as a share of `lr`."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient clipping norm."""
    minibatches: int = Field(1, ge=1)
    """Optimizer steps per rollout batch (the batch split in this many parts)."""
    micro_batch_tokens: int = Field(16384, ge=1)
    """Padded tokens per forward pass. A larger batch is sorted by row length and run in parts,
    each trimmed to its longest row, gradients accumulating: the same optimiser step with far
    less padding when a few long multi-turn rows would set the width of all."""
    share_prefixes: bool = True
    """Rows sharing a prefix (a GRPO group's prompt) compute it once in the trainer's and the
    reference's forward passes: packed into one sequence with an attention mask
    (rlsvc/models/packing.py), the same logits from fewer tokens; false: every row as it is."""
    num_cpus: float = Field(2.0, gt=0)
    """Ray CPUs per trainer rank (also its thread count)."""
    num_gpus: float = Field(0.0, ge=0)
    """Ray GPUs per trainer rank."""
    param_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Compute dtype of forward and backward (weights, optimiser state and gradient reductions stay
    float32): `auto` is bfloat16 where CUDA exists (TorchTitan's mixed-precision recipe, flash
    attention through SDPA), float32 on CPU."""
    keep_freed_memory: bool = True
    """Trainer ranks and the reference keep the memory each step frees for the next step instead
    of returning it to the kernel (glibc `mallopt`, rlsvc/malloc.py): the pages of a
    step's activations are not faulted in again every step; the process holds its peak memory."""
    reference_actor: bool | None = None
    """Where the frozen reference model (`grpo.kl_coef` > 0) lives. False: in trainer rank 0's
    process, computing with that rank's threads while the trainer waits for it: one process fewer
    to start, and on GPUs a second copy of the policy in rank 0's memory. True: an actor of its
    own (`rlsvc-reference`, with a GPU of its own where the ranks have GPUs). None: its own actor
    in the asynchronous loop, whose scorer thread asks for reference logprobs while the trainer
    steps; rank 0 in the synchronous loop, where the two take turns."""


class BufferConfig(Strict):
    max_staleness: int = Field(0, ge=0)
    """How many policy versions behind the trainer a batch may be played (asynchronous mode:
    the rollout producer plays batch b only once the engines hold version b - max_staleness or
    newer, rlsvc/async_loop.py); 0 is the synchronous schedule, every batch on-policy."""
    capacity: int = Field(65536, ge=1)
    """Most episodes held; the oldest go first."""


class WeightSyncConfig(Strict):
    type: Literal["auto", "ray", "shm", "broadcast", "monarch", "torchstore"] = "auto"
    """Transport trainer -> rollout workers: `auto` is `shm` when trainer rank 0 and every rollout
    worker are on one node, else `monarch` (`broadcast` without torchmonarch), chosen again
    whenever a replaced actor rebuilds the transport; `ray` the object store (zero-copy on one node),
    `shm` one reused shared-memory file (trainer rank 0 and the workers on one node; fastest),
    `broadcast` a gloo/NCCL group of trainer rank 0 and the rollout workers, `monarch` RDMA
    buffers over a Monarch mesh joined by the Ray-placed processes, `torchstore` TorchStore's
    put/get_state_dict over that mesh (when an installed TorchStore works with this Monarch)."""
    bucket_mb: int = Field(64, ge=1)
    """Weights move in buckets of about this size, so a worker loads one while the next is in flight."""
    verify: bool = True
    """Hash the published weights and, in every worker, what it loaded; a mismatch fails the update."""

    @field_validator("type")
    @classmethod
    def _available(cls, kind: str) -> str:
        from rlsvc.weight_sync.base import unavailable_reason

        reason = unavailable_reason(kind)
        if reason:
            raise ValueError(reason)
        return kind


class EvalConfig(Strict):
    episodes: int = Field(20000, ge=0)
    """Greedy-policy episodes the task's `evaluate` hook scores on the final checkpoint (0 skips
    the final evaluation; a task without the hook switches the default off)."""
    seed: int = 12345
    """Seed of the final evaluation's episodes (never used for training or checkpoint selection)."""
    every_steps: int = Field(10, ge=0)
    """Validate the trainer's greedy policy with the task's `validate` hook every this many steps
    (0: never; a task without the hook switches the default off); logged as eval/val_return."""
    val_episodes: int = Field(20000, ge=1)
    """Episodes per validation, played by the task's `validate` hook (BlackJack's greedy policy is
    a table over ~280 states, so its 20000 are cheap; size it to the task's own cost)."""
    val_seed: int = 999
    """Seed of the validation episodes."""
    keep_best: bool = True
    """Save the weights with the best validation return as the final checkpoint (else the last)."""
    test_every_steps: int = Field(0, ge=0)
    """Before the first step, every this many steps and after the last step, the current policy
    answers the task's test problems through the rollout engines, once the step's weights are in
    them: greedy accuracy (strict and lenient), mean@k and pass@k (`eval.test_samples`), each
    with its standard error, logged as eval/test/... (rlsvc/evaluation/test_split.py). 0: never. Needs a
    task with the `test_split` hook (`env.type=reasoning`)."""
    test_problems: int = Field(0, ge=0)
    """Test problems per evaluation during training: 0, the whole test split; else a fixed
    sample of this many, drawn once with `eval.seed` (the same problems every evaluation)."""
    test_samples: int = Field(4, ge=0)
    """k: completions a test problem gets at `rollout.temperature` for mean@k and pass@k (the
    unbiased estimator with n = k); 0: greedy answers only. Needs a temperature above 0."""
    select_on_test: bool = False
    """With `keep_best`, for a task without a `validate` hook: keep the weights with the best
    greedy test accuracy (`eval.test_every_steps`) as the final checkpoint. This selects on the
    test split, so the final evaluation of that checkpoint on the same split is optimistic."""


class TrackingConfig(Strict):
    tracking_uri: str | None = None
    """MLflow tracking URI; default MLFLOW_TRACKING_URI, else `sqlite:///mlflow.db` here."""
    experiment: str | None = None
    """MLflow experiment name; default: the run's name (`run.name`), so each config's runs sit
    together and `python -m rlsvc.compare --experiment <run.name>` compares them."""
    system_metrics_interval_s: float | None = Field(10.0, gt=0)
    """Log the driver node's CPU, memory, disk and network as MLflow system/* metrics this often
    (MLflow's sampler); None: off."""
    transcripts: int = Field(16, ge=0)
    """Sample episodes written as a transcript artifact at the first and last step."""
    log_model: bool = True
    """Log the saved policy as an MLflow pyfunc model too (`runs:/<run_id>/policy`), which MLflow
    loads once in the driver to check that it serves its input example. It holds a second copy of
    the checkpoint, which is logged as an artifact either way; off for large models whose copy
    is not wanted, or where the job's end should not load the model again."""


class FaultConfig(Strict):
    """Fault budgets (docs/faults.md): failures are counted per kind of actor *in a row without
    progress* (a training step completed past the furthest one before), so independent faults
    hours apart each cost a restart and only a crash loop stops the job."""

    max_actor_restarts: int = Field(5, ge=0)
    """Env, reward or buffer actors (Ray restarts them, without a lifetime limit) that may die
    this many times in a row without progress; one more stops the job, naming the actor. An env
    actor's in-flight episodes are lost with it: their groups are left out of that step and
    counted (`env_actor_failures`, `groups_dropped`)."""
    max_policy_restarts: int = Field(3, ge=0)
    """Restarts in a row without progress of the policy group (a dead trainer rank or reference:
    the group restarts from the newest checkpoint and the steps since run again,
    `faults/steps_redone`), and, counted apart, of rollout workers (replaced and synced); one
    more failure stops the job, naming the actor."""
    max_restarts_per_window: int = Field(0, ge=0)
    """At most this many failures of one kind of actor within `faults.restart_window_s`,
    progress or not; the next stops the job. 0: no cap (the default)."""
    restart_window_s: float = Field(3600.0, gt=0)
    """The window of `faults.max_restarts_per_window`, in seconds."""
    restart_backoff_s: float = Field(1.0, ge=0)
    """Wait before the second restart in a row of the same kind of actor, doubling for each
    further one (the first restart is immediate); logged. Applies to the restarts the job makes
    (policy group, rollout workers); Ray restarts env, reward and buffer actors at once."""
    restart_backoff_max_s: float = Field(60.0, ge=0)
    """The longest wait between restarts of `faults.restart_backoff_s`."""
    max_nonfinite_steps: int = Field(10, ge=0)
    """A step whose loss or gradient is NaN or infinite is skipped (no weight update) and counted
    (`nonfinite_skipped`); the job stops with an error once this many steps were skipped."""
    crash_on_start: Literal["env", "reward", "buffer"] | None = None
    """Fault injection, for tests: the actors of this role exit as soon as they start, every time
    (Ray restarts them again and again): a crash loop the fault budget must stop. Never set in a
    real job."""


class ClusterConfig(Strict):
    address: str | None = None
    """Ray address to join; default RAY_ADDRESS (set by `ray job submit`), else a local cluster."""
    gpu_node_resource: str = "rlsvc_gpu_node"
    """Custom resource advertised by nodes that run rollout, trainer and reference actors."""
    cpu_node_resource: str = "rlsvc_cpu_node"
    """Custom resource advertised by nodes that run env, reward and buffer actors."""
    local_num_cpus: int | None = None
    """Logical CPUs of a local cluster (default: max(8, cores), so every actor fits on a laptop)."""
    autoscaling: bool = False
    """The cluster adds nodes on demand (KubeRay or launcher autoscaler): start actors that no
    current node can hold and let them wait for nodes. Off: such a job is refused at once, in one
    line naming the actor, instead of waiting forever."""
    include_dashboard: bool = True
    """A local cluster starts Ray's web dashboard (http://127.0.0.1:8265: actors, logs, metrics).
    Off, Ray keeps only its headless part and starts none of the dashboard's modules, each a
    process of its own, nor waits for them: for jobs nobody watches (the benchmarks that time
    training only). Its state API (`ray list actors`) is one of those modules, so the restarts
    Ray makes of env, reward and buffer actors are then not counted against `faults.*`: an actor
    that dies at every start is retried for ever. A joined cluster has its own."""
    metrics_export_port: int | None = Field(None, ge=1, le=65535)
    """Port of a local cluster's Prometheus endpoint (`http://127.0.0.1:PORT/metrics`, the rlsvc_*
    metrics); default: one Ray picks. A joined cluster has its own (`ray start --metrics-export-port`)."""

    def resolved_address(self) -> str | None:
        return self.address or os.environ.get("RAY_ADDRESS") or None


class Config(Strict):
    run: RunConfig = RunConfig()
    """Run identity, length and seed."""
    model: ModelConfig = ModelConfig()
    """The policy model and its warm start."""
    rollout: RolloutConfig = RolloutConfig()
    """vLLM rollout workers."""
    env: EnvConfig = BlackjackEnvConfig()
    """The task and its environment actors."""
    grpo: GRPOConfig = GRPOConfig()
    """The GRPO objective."""
    trainer: TrainerConfig = TrainerConfig()
    """The TorchTitan / FSDP2 learner."""
    buffer: BufferConfig = BufferConfig()
    """Replay buffer."""
    weight_sync: WeightSyncConfig = WeightSyncConfig()
    """Weight transport."""
    eval: EvalConfig = EvalConfig()
    """Final evaluation."""
    tracking: TrackingConfig = TrackingConfig()
    """MLflow."""
    cluster: ClusterConfig = ClusterConfig()
    """Ray cluster and placement."""
    faults: FaultConfig = FaultConfig()
    """What the job survives: actor restarts, non-finite steps."""

    @field_validator("env", mode="before")
    @classmethod
    def _plugin_env(cls, env: Any) -> Any:
        return _env_type_from_task(env)

    @model_validator(mode="after")
    def _check_cross(self) -> Config:
        if not self.run.name and isinstance(self.env, BlackjackEnvConfig):  # the built-in defaults' own name
            self.run.name = DEFAULT_RUN_NAME
        if isinstance(self.env, PluginEnvConfig) and self.model.source == "scratch":  # an hf checkpoint brings its tokenizer
            _plugin_tokenizer(self.model.titan)
        episodes = self.grpo.groups_per_step * self.grpo.group_size
        if episodes % self.trainer.minibatches:
            raise ValueError(f"trainer.minibatches ({self.trainer.minibatches}) must divide groups_per_step*group_size ({episodes})")
        if isinstance(self.env, CodeEnvConfig) and self.model.source == "scratch" and self.model.titan.tokenizer != "chars":
            raise ValueError("env.type=code needs model.titan.tokenizer=chars (the blackjack vocabulary cannot write code)")
        if getattr(self.env, "chat", False) and self.model.source == "scratch":
            raise ValueError("env.chat=true needs a chat model (model.source=hf); the built-in tokenizers have no chat template")
        if isinstance(self.env, ReasoningEnvConfig):
            _check_reasoning(self.env, self.model)
        if self.model.lora.enabled:
            _check_lora(self)
        if isinstance(self.env, EndpointEnvConfig):
            _check_endpoint(self)
        if self.grpo.overlong_buffer and self.grpo.overlong_buffer > self.rollout.max_tokens:
            raise ValueError(
                f"grpo.overlong_buffer ({self.grpo.overlong_buffer}) must be at most rollout.max_tokens ({self.rollout.max_tokens})"
            )
        if self.rollout.max_tokens >= self.model.seq_len:
            raise ValueError(f"rollout.max_tokens ({self.rollout.max_tokens}) must be below the model's max_seq_len ({self.model.seq_len})")
        return self


LORA_TRANSPORTS = ("auto", "ray", "shm")
"""The weight-sync transports that move LoRA adapters (rlsvc/cluster/weight_sync/__init__.py)."""


def _check_lora(cfg: Config) -> None:
    """What a job with `model.lora.enabled` needs: a pretrained base (the engines serve the
    adapters on the checkpoint's own weights), a transport that moves adapters, and, with a KL
    term in the asynchronous loop, one trainer rank (the base reference's logprobs are a
    collective of the trainer ranks, asked from the scorer thread beside the trainer's step)."""
    if cfg.model.source != "hf":
        raise ValueError("model.lora.enabled needs model.source=hf: the rollout engines serve the adapters on the checkpoint's weights")
    if cfg.weight_sync.type not in LORA_TRANSPORTS:
        raise ValueError(
            f"weight_sync.type={cfg.weight_sync.type} cannot move LoRA adapters (model.lora.enabled); use one of {', '.join(LORA_TRANSPORTS)}"
        )
    if cfg.rollout.asynchronous and cfg.grpo.kl_coef > 0 and cfg.trainer.num_ranks > 1:
        raise ValueError(
            "model.lora.enabled with grpo.kl_coef > 0 and rollout.asynchronous needs trainer.num_ranks=1 (the base reference runs on the trainer ranks)"
        )


def _check_endpoint(cfg: Config) -> None:
    """An endpoint job serves a chat model's template to agents and takes their ended episodes
    in the synchronous loop (rlsvc/serve/loop.py); LoRA's per-version adapters are not served."""
    if cfg.model.source != "hf":
        raise ValueError("env.type=endpoint needs a chat model (model.source=hf): agents' messages go through its chat template")
    if cfg.rollout.asynchronous:
        raise ValueError("env.type=endpoint runs the synchronous loop: set rollout.asynchronous=false (staleness: buffer.max_staleness)")
    if cfg.model.lora.enabled:
        raise ValueError("env.type=endpoint does not serve LoRA adapters yet: set model.lora.enabled=false")


def _check_reasoning(env: ReasoningEnvConfig, model: ModelConfig) -> None:
    if env.prompt.style == "chat" and model.source == "scratch":
        raise ValueError("env.prompt.style=chat needs a chat model (model.source=hf); the built-in tokenizers have no chat template")
    if model.source == "scratch" and model.titan.tokenizer == "blackjack":
        raise ValueError("env.type=reasoning needs model.titan.tokenizer=chars or bytes (the blackjack vocabulary cannot write numbers)")


def _plugin_tokenizer(titan: TitanModelConfig) -> None:
    """A plug-in task's prompts are its own words: unless the config chose a tokenizer, the byte
    one, which reads any text (the word vocabulary is BlackJack's), and room for its 260 tokens."""
    from rlsvc.models.tokenizer import TOKENIZER_SIZES

    if "tokenizer" in titan.model_fields_set:
        return
    needed = TOKENIZER_SIZES["bytes"]
    if "vocab_size" not in titan.model_fields_set:
        titan.vocab_size = -(-needed // 64) * 64  # a multiple of 64, as the other built-ins' sizes
    elif titan.vocab_size < needed:
        raise ValueError(
            f"model.titan.vocab_size ({titan.vocab_size}) must be >= the bytes tokenizer's {needed} tokens "
            "(a plug-in task's default; set model.titan.tokenizer to choose another)"
        )
    titan.tokenizer = "bytes"  # (assignments are validated: the vocabulary has room first)


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"config error: {dotted}: '{key}' is a value, not a section")
        node = child
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", value), the value read as YAML (so 3, 0.1, true, null, [1,2] work)."""
    if "=" not in text:
        raise ConfigError(f"config error: override '{text}' must look like key.sub=value")
    key, raw = text.split("=", 1)
    if not key:
        raise ConfigError(f"config error: override '{text}' has no key")
    try:
        return key.strip(), yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        return key.strip(), raw


ENV_TYPES = ("blackjack", "code", "reasoning", "plugin")


def _one_line(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"]]
    msg = first["msg"].removeprefix("Value error, ")
    if loc[:1] == ["env"] and len(loc) > 1 and loc[1] in ENV_TYPES:  # pydantic names the union's member: say it as the user wrote it
        kind = loc.pop(1)
        if first["type"] == "extra_forbidden":
            msg = f"not a setting of env.type={kind}"
    where = ".".join(loc) or "config"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"config error: {where}: {msg}{more}"


def read_tree(path: str | Path | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """The YAML file (if given) with the dotted overrides applied, not yet validated (the RL job's
    and `rlsvc sft`'s configs are read alike); raise ConfigError with one line."""
    tree: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config error: config file not found: {p}")
        try:
            loaded = yaml.safe_load(p.read_text())
        except yaml.YAMLError as e:
            raise ConfigError(f"config error: {p} is not valid YAML: {str(e).splitlines()[0]}") from e
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config error: {p} must hold a mapping at the top level")
        tree = loaded or {}
    for text in overrides or []:
        _set_dotted(tree, *parse_override(text))
    return tree


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read YAML (if given), apply dotted overrides, validate; raise ConfigError with one line."""
    tree = read_tree(path, overrides)
    try:
        return Config.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(_one_line(e)) from e


WHOLE_PARAMS = ("env.options",)
"""Config keys whose value is one param, as JSON: a task's options are whatever its factory
takes, and `rlsvc.compare` rebuilds the task from them exactly (types, nesting, empty)."""


def flatten(tree: dict[str, Any], prefix: str = "", whole: tuple[str, ...] = WHOLE_PARAMS) -> dict[str, Any]:
    """Nested dict -> {"a.b.c": value}: the form MLflow params take; a key in `whole` stays one
    value, its JSON text."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if name in whole:
            flat[name] = json.dumps(value, sort_keys=True)
        elif isinstance(value, dict):
            flat.update(flatten(value, name + ".", whole))
        else:
            flat[name] = value
    return flat


def to_yaml(cfg: Config) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
