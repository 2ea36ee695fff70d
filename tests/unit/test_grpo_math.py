import math

import pytest
import torch

from rlsvc.algo.grpo import LossSettings, group_advantages, k3_kl, mask_logits, policy_loss, token_logprobs


def test_group_advantages_hand_computed():
    returns = torch.tensor([[1.0, -1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    adv = group_advantages(returns, normalize_std=True, eps=0.0 + 1e-12)
    std = math.sqrt(0.5)  # population std of (1, -1, 0, 0)
    assert adv[0].tolist() == pytest.approx([1 / std, -1 / std, 0.0, 0.0], rel=1e-6)
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]  # identical returns: no signal, no nan
    assert group_advantages(returns, normalize_std=False)[0].tolist() == [1.0, -1.0, 0.0, 0.0]


def test_token_logprobs_shift_and_mask():
    logits = torch.zeros(1, 3, 4)
    logits[0, 0] = torch.tensor([0.0, math.log(3.0), 0.0, 0.0])  # p(tok1 | pos0) = 3/6
    ids = torch.tensor([[2, 1, 3]])
    lp, ent = token_logprobs(logits, ids)
    assert lp[0, 0] == 0 and lp[0, 1].item() == pytest.approx(math.log(0.5))
    assert lp[0, 2].item() == pytest.approx(math.log(0.25))
    lp2, ent2 = token_logprobs(logits, ids, allowed_token_ids=[1, 3])
    assert lp2[0, 1].item() == pytest.approx(math.log(0.75))  # 3 / (3 + 1)
    assert lp2[0, 2].item() == pytest.approx(math.log(0.5))
    assert ent2[0, 2].item() == pytest.approx(math.log(2.0)) and torch.isfinite(ent2).all()
    assert torch.isinf(mask_logits(torch.zeros(4), [1])[0])


def test_policy_loss_on_policy_equals_minus_mean_advantage():
    lp = torch.tensor([[0.0, -0.5, -1.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    loss, stats = policy_loss(lp, lp.clone(), torch.tensor([2.0]), mask)
    assert loss.item() == pytest.approx(-2.0) and stats["clip_frac"].item() == 0.0


def test_policy_loss_clipping_hand_computed():
    old = torch.zeros(2, 2)
    new = torch.tensor([[0.0, math.log(1.5)], [0.0, math.log(0.5)]])
    mask = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    adv = torch.tensor([1.0, -1.0])
    loss, stats = policy_loss(new, old, adv, mask, LossSettings(clip_eps=0.2))
    # row 0: min(1.5*1, 1.2*1) = 1.2 -> -1.2; row 1: min(0.5*-1, 0.8*-1) = -0.8 -> 0.8
    assert loss.item() == pytest.approx((-1.2 + 0.8) / 2)
    assert stats["clip_frac"].item() == pytest.approx(1.0)
    loss_hi, _ = policy_loss(new, old, adv, mask, LossSettings(clip_eps=0.2, clip_eps_high=0.28))
    assert loss_hi.item() == pytest.approx((-1.28 + 0.8) / 2)


def test_k3_kl_and_kl_term():
    lp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    r = math.log(0.25) - math.log(0.5)
    assert k3_kl(lp, ref).item() == pytest.approx(math.exp(r) - r - 1)
    mask = torch.tensor([[0.0, 1.0]])
    lp2 = torch.tensor([[0.0, math.log(0.5)]])
    ref2 = torch.tensor([[0.0, math.log(0.25)]])
    loss, stats = policy_loss(lp2, lp2.clone(), torch.tensor([0.0]), mask, LossSettings(kl_coef=0.5), ref_logprobs=ref2)
    assert loss.item() == pytest.approx(0.5 * (math.exp(r) - r - 1)) and stats["kl"].item() > 0
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(lp2, lp2, torch.tensor([0.0]), mask, LossSettings(kl_coef=0.1))


def test_token_vs_sequence_normalisation():
    lp = torch.zeros(2, 4)
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 0, 0]], dtype=torch.float32)
    adv = torch.tensor([1.0, 4.0])
    tok, _ = policy_loss(lp, lp, adv, mask, LossSettings(normalization="token"))
    seq, _ = policy_loss(lp, lp, adv, mask, LossSettings(normalization="sequence"))
    assert tok.item() == pytest.approx(-(3 * 1 + 4) / 4)
    assert seq.item() == pytest.approx(-(1 + 4) / 2)
    glob, _ = policy_loss(lp, lp, adv, mask, LossSettings(normalization="token"), denominator=8.0)
    assert glob.item() == pytest.approx(-7 / 8)


def test_gradient_pushes_toward_positive_advantage():
    logits = torch.zeros(1, 2, 3, requires_grad=True)
    ids = torch.tensor([[0, 2]])
    lp, _ = token_logprobs(logits, ids)
    loss, _ = policy_loss(lp, lp.detach(), torch.tensor([1.0]), torch.tensor([[0.0, 1.0]]))
    loss.backward()
    assert logits.grad[0, 0, 2] < 0 and logits.grad[0, 0, 0] > 0  # descent raises token 2


def test_truncated_importance_sampling_weights_tokens_by_the_capped_ratio():
    torch.manual_seed(0)
    lp = torch.randn(4, 3, requires_grad=True)
    behaviour = lp.detach() + 0.5 * torch.randn(4, 3)
    prox = lp.detach()
    adv = torch.tensor([1.0, -1.0, 0.5, 2.0])
    mask = torch.ones(4, 3)
    # proximal == behaviour: TIS changes nothing
    plain, _ = policy_loss(lp, behaviour, adv, mask)
    same, stats = policy_loss(lp, behaviour, adv, mask, LossSettings(tis_cap=2.0), behaviour_logprobs=behaviour)
    assert torch.allclose(plain, same) and torch.isclose(stats["tis_weight"], torch.tensor(1.0))
    # off-policy: each token's term is scaled by min(exp(prox - behaviour), cap), detached
    loss, stats = policy_loss(lp, prox, adv, mask, LossSettings(tis_cap=1.5), behaviour_logprobs=behaviour)
    w = torch.exp(prox - behaviour).clamp(max=1.5)
    expected = (-(adv.unsqueeze(1)) * w).mean()  # ratio == 1 against the proximal policy
    assert torch.isclose(loss, expected, atol=1e-6)
    assert float(w.max()) <= 1.5 and torch.isclose(stats["tis_weight"], w.mean())
    loss.backward()
    assert torch.allclose(lp.grad, -(adv.unsqueeze(1)) * w / 12, atol=1e-6)
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        policy_loss(lp, prox, adv, mask, LossSettings(tis_cap=1.5))


def test_token_logprobs_at_a_temperature_are_those_of_the_scaled_logits():
    g = torch.Generator().manual_seed(3)
    logits, ids = torch.randn(2, 5, 7, generator=g), torch.randint(0, 7, (2, 5), generator=g)
    lp, _ = token_logprobs(logits, ids, temperature=0.7)
    expected = torch.log_softmax(logits[:, :-1] / 0.7, -1).gather(-1, ids[:, 1:, None])[..., 0]
    assert torch.allclose(lp[:, 1:], expected) and not torch.allclose(lp, token_logprobs(logits, ids)[0])
    restricted, _ = token_logprobs(logits, ids, allowed_token_ids=[1, 3], temperature=0.7)
    assert torch.allclose(restricted, token_logprobs(logits / 0.7, ids, allowed_token_ids=[1, 3])[0])
