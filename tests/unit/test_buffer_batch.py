import pickle

import pytest
import torch

from rlsvc.buffer.replay import ReplayBuffer
from rlsvc.episode import Episode
from rlsvc.loop import assign_advantages, deal_seed, drop_failed_groups, episode_metrics
from rlsvc.models.tokenizer import build_tokenizer
from rlsvc.policy_io import TaskCodec
from rlsvc.rewards.rubric import env_return_rubric
from rlsvc.tasks.blackjack import BlackjackTask
from rlsvc.tasks.code import CodeTask
from rlsvc.trainer.batch import build_batch


def _ep(version: int, group: int = 0, reward: float = 0.0, n: int = 1) -> Episode:
    ep = Episode(group_id=group, policy_version=version, reward=reward)
    for i in range(n):
        ep.prompts.append([1, 5, 6])
        ep.responses.append([11 + i % 2])
        ep.logprobs.append([-0.5])
        ep.texts.append("HIT")
    return ep


def test_buffer_is_fifo_within_its_capacity():
    """Staleness is the asynchronous producer's gate (tests/unit/test_staleness_gate.py), not
    the buffer's: it keeps order and capacity."""
    buf = ReplayBuffer(capacity=3)
    buf.add([_ep(0), _ep(1), _ep(2), _ep(2)])
    assert len(buf) == 3 and buf.dropped_full == 1
    got = buf.sample(2)
    assert [e.policy_version for e in got] == [1, 2] and len(buf) == 1
    snap = buf.snapshot()
    other = ReplayBuffer(capacity=3)
    other.restore(snap)
    assert [e.policy_version for e in other.sample(10)] == [2] and other.dropped_full == 1
    with pytest.raises(ValueError):
        ReplayBuffer(capacity=0)


def test_add_and_take_sends_back_only_what_the_caller_does_not_hold():
    """The buffer actor's call: episodes this call added come back as their index (the driver
    holds them), older ones in full; `resolve` makes one list of episodes again, in FIFO order."""
    buf = ReplayBuffer(capacity=10)
    older = _ep(0, group=7)
    buf.add([older])
    new = [_ep(1, group=g) for g in range(3)]
    across = pickle.loads(pickle.dumps(new))  # what the actor receives: copies
    depth, taken = buf.add_and_take(across, 3)
    assert depth == 1 and taken[0] is older and taken[1:] == [0, 1]
    assert ReplayBuffer.resolve(new, taken) == [older, new[0], new[1]]
    assert ReplayBuffer.resolve(new, taken)[1] is new[0]
    assert [e.group_id for e in buf.sample(5)] == [2]


def test_rubric_invalid_penalty():
    rub = env_return_rubric(-1.5)
    ok, bad = _ep(0), _ep(0)
    ok.env_return = 1.0
    bad.invalid, bad.env_return = True, 1.0
    assert rub.score_all([ok, bad]) == [1.0, -1.5]


def test_advantages_by_group_and_metrics():
    eps = [_ep(0, group=g, reward=r) for g, r in [(0, 1.0), (0, -1.0), (1, 0.0), (1, 0.0)]]
    eps[1].outcome, eps[0].outcome = "loss", "win"
    assign_advantages(eps, group_size=2, normalize_std=False)
    assert [e.advantage for e in eps] == [1.0, -1.0, 0.0, 0.0]
    m = episode_metrics(eps, TaskCodec(BlackjackTask(), build_tokenizer()))
    assert m["win_rate"] == 0.25 and m["return_mean"] == 0.0 and m["hit_rate"] == 1.0
    assert deal_seed(0, 1, 2) != deal_seed(0, 2, 1)


def test_build_batch_masks_and_sequence_weights():
    a, b = _ep(0, n=2), _ep(0, n=1)
    a.advantage, b.advantage = 0.5, -1.0
    batch = build_batch([a, b], pad_id=0, normalization="token")
    assert batch.input_ids.shape == (3, 4)
    assert batch.loss_mask.tolist() == [[0, 0, 0, 1]] * 3
    assert batch.advantages.tolist() == [0.5, 0.5, -1.0]
    assert batch.old_logprobs[0, 3].item() == -0.5
    seq = build_batch([a, b], pad_id=0, normalization="sequence")
    assert seq.loss_mask[:, 3].tolist() == [0.5, 0.5, 1.0]  # each episode sums to 1
    cont = Episode(group_id=0, policy_version=0, continued=True, advantage=2.0)
    cont.prompts, cont.responses, cont.logprobs = [[1, 5], [7]], [[11, 12], [13]], [[-0.1, -0.2], [-0.3]]
    mixed = build_batch([cont, b], pad_id=0)
    assert mixed.input_ids.tolist() == [[1, 5, 11, 12, 7, 13], [1, 5, 6, 11, 0, 0]]
    assert mixed.loss_mask.tolist() == [[0, 0, 1, 1, 0, 1], [0, 0, 0, 1, 0, 0]]
    assert torch.allclose(mixed.old_logprobs[0], torch.tensor([0, 0, -0.1, -0.2, 0, -0.3]))
    assert mixed.lengths.tolist() == [6, 4] and mixed.advantages.tolist() == [2.0, -1.0]
    assert mixed.input_ids.dtype == torch.long and mixed.loss_mask.dtype == torch.float32
    parts = batch.split(2)
    assert [len(p) for p in parts] == [2, 1] and torch.equal(torch.cat([p.advantages for p in parts]), batch.advantages)
    assert torch.equal(torch.cat([p.lengths for p in parts]), batch.lengths) and parts[0].ref_logprobs is None
    cut = batch.rows(torch.tensor([2, 0]), width=3)
    assert cut.input_ids.tolist() == [batch.input_ids[2, :3].tolist(), batch.input_ids[0, :3].tolist()]
    assert cut.advantages.tolist() == [-1.0, 0.5] and cut.lengths.tolist() == [4, 4]


def test_groups_with_a_failed_episode_are_left_out():
    eps = [_ep(0, group=g) for g in (0, 0, 1, 1, 2, 2)]
    eps[3].failed = True
    kept, dropped = drop_failed_groups(eps)
    assert dropped == 1 and [e.group_id for e in kept] == [0, 0, 2, 2]


def test_code_codec_renders_the_last_output_and_parses_answers():
    from types import SimpleNamespace

    codec = TaskCodec(CodeTask(), build_tokenizer("chars"), 120)
    obs = SimpleNamespace(
        prompt="Write add(a, b).",
        turn=1,
        max_turns=3,
        stdout="7\n",
        error_type="NameError",
        error_message="name 'x' is not defined",
        task="programming",
        timed_out=False,
    )
    text = codec.task.render(obs)
    assert text.startswith("TASK: Write add(a, b).\nOUT: 7\n\nERR: NameError: name 'x' is not defined\nTURN 2/3") and text.endswith(">>> ")
    ids = codec.encode(obs)
    assert len(ids) <= 120 and ids[0] == codec.bos[0]
    assert codec.tokenizer.decode(ids[1:]) == text[-(len(ids) - 1) :]  # the end of the prompt is kept
    assert codec.parse(" ANSWER: 42") == ("answer", "42")
    assert codec.parse("print(1)") == ("code", "print(1)")
