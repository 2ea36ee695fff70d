"""The Ray implementations of the loop-side interfaces (rlsvc/interfaces.py) have every method
the loops and the recovery call, with the same parameters (mypy checks the types; this holds
the names where no type checker runs)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from rlsvc import interfaces


def _members(proto: type) -> dict[str, object]:
    return {n: v for n, v in vars(proto).items() if not n.startswith("_")}


def _parameters(fn: object) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]  # type: ignore[arg-type]


def test_the_cluster_handles_implement_the_interfaces() -> None:
    pytest.importorskip("ray")  # the modules only: no cluster starts
    from rlsvc.cluster import groups, services

    pairs = [
        (interfaces.Trainers, groups.TrainerGroup),
        (interfaces.Reference, groups.ReferenceModel),
        (interfaces.Buffer, groups.ReplayBufferClient),
        (interfaces.Rewards, groups.RewardClient),
        (interfaces.Services, services.Services),
    ]
    for proto, impl in pairs:
        fields = {f.name for f in dataclasses.fields(impl)} if dataclasses.is_dataclass(impl) else set()
        for name, member in _members(proto).items():
            assert hasattr(impl, name) or name in fields, f"{impl.__name__} lacks {proto.__name__}.{name}"
            if callable(member) and not isinstance(member, property):
                assert _parameters(getattr(impl, name)) == _parameters(member), f"{impl.__name__}.{name}"
