import pytest
import torch

from rlsvc.weight_sync.manifest import build_manifest, digest_tensors, split_key, versioned_key, views


def test_versioned_keys_round_trip():
    key = versioned_key(42, "model.layers.0.mlp.up_proj.weight")
    assert key == "policy_ver_0000000042.model.layers.0.mlp.up_proj.weight"
    assert split_key(key) == (42, "model.layers.0.mlp.up_proj.weight")
    with pytest.raises(ValueError, match="not a versioned"):
        split_key("model.norm.weight")


def test_buckets_are_contiguous_bounded_and_cover_every_tensor():
    tensors = {f"t{i}": torch.randn(10 + i, 3) for i in range(12)}
    tensors["big"] = torch.randn(1000)  # larger than a bucket: gets one of its own
    m = build_manifest(3, tensors, bucket_bytes=600)
    assert sorted(j for b in m.buckets for j in b) == list(range(len(m.specs)))
    for i, bucket in enumerate(m.buckets):
        start, end = m.bucket_bytes(i)
        assert end - start == sum(m.specs[j].nbytes for j in bucket)
        assert len(bucket) == 1 or end - start <= 600
    assert m.total_bytes == sum(t.numel() * 4 for t in tensors.values())
    assert m.keys()[0].startswith("policy_ver_0000000003.")


def test_flat_views_reproduce_the_tensors_and_the_digest():
    tensors = {"a": torch.randn(4, 5), "b": torch.arange(6, dtype=torch.int64), "c": torch.randn(3).to(torch.bfloat16)}
    m = build_manifest(0, tensors, bucket_bytes=64)
    flat = torch.empty(m.total_bytes, dtype=torch.uint8)
    for name, dst in views(flat, m.specs):
        dst.copy_(tensors[name])
    out = dict(views(flat, m.specs))
    assert all(torch.equal(out[k], tensors[k]) for k in tensors)
    # one bucket's views from a buffer that starts at the bucket's offset
    start, _ = m.bucket_bytes(1)
    part = dict(views(flat[start:], [m.specs[j] for j in m.buckets[1]], base=start))
    assert all(torch.equal(v, tensors[k]) for k, v in part.items())
    d = digest_tensors((s.name, tensors[s.name]) for s in m.specs)
    assert d == digest_tensors(views(flat, m.specs))
    tensors["a"][0, 0] += 1
    assert d != digest_tensors((s.name, tensors[s.name]) for s in m.specs)
