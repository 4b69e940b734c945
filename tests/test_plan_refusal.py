"""The scheduler's verdict on a candidate group (kernel_plan.plan_refusal) walks the inlined trees a
plan would hold instead of building them: it must refuse exactly what building the plan refuses, with
the same reason, on programs that reach every refusal it can give."""

import torch
import torch.nn.functional as F

import compiler_core as cc
from compiler_core.schedule import fusion, kernel_plan
from tests.test_compile_time import _loops, _recurrence


def _programs():
    idx = torch.tensor([0, 2, 2, 5, 1, 7])
    return [
        # inlining past the depth limit ("size")
        (lambda x: _recurrence(x, 100), (torch.rand(16),)),
        # a consumer reading a reduction at another row than its own ("reduction axis")
        (lambda x: (x - x.mean(0)).sum(1) + x.sum(1).flip(0) * x.amax(1), (torch.randn(6, 5),)),
        # masked reads of computed values (cat, pad), and a softmax over them
        (lambda x: torch.cat([x.sin(), x.cos() * 2], 1).softmax(-1), (torch.randn(4, 6),)),
        (lambda x: F.pad(x.exp(), (1, 2)).sum(-1) + F.pad(x, (3, 0)).mean(-1), (torch.randn(5, 7),)),
        # a scatter and its readers ("scatter"), a gather of a computed tensor ("indirect read")
        (lambda x, i: torch.zeros(8, 3).index_add(0, i, x.exp()).relu() * 3, (torch.randn(6, 3), idx)),
        (lambda x, i: (x.exp() * 2)[i].sum(-1) + x.sum(), (torch.randn(8, 3), idx)),
        (lambda x, i: torch.gather(x.tanh(), 0, i[:4, None].expand(4, 3)).cumsum(0), (torch.randn(8, 3), idx)),
    ]


def test_the_verdict_is_what_building_the_plan_says(monkeypatch):
    verdicts = []

    def both(graph, members, materialized, space, recomputed=None):
        walked = kernel_plan.plan_refusal(graph, members, materialized, space, recomputed)
        try:
            kernel_plan.build_kernel_plan(graph, "candidate", members, materialized, space, parameters=False)
            built = None
        except kernel_plan.PlanError as why:
            built = str(why)
        verdicts.append((walked, built))
        return built

    monkeypatch.setattr(fusion, "plan_refusal", both)
    from compiler_core.schedule.epilogues import schedule_with_epilogues

    schedule_with_epilogues(_loops(2))  # layer norms, attention, GELU: many accepted candidates
    for fn, args in _programs():
        compiled = cc.compile(fn, backend="cpp")
        torch.testing.assert_close(compiled(*args), fn(*args))
        assert not compiled.session.graphs[0].fallback_reason
    wrong = [(w, b) for w, b in verdicts if w != b]
    assert not wrong, wrong[:5]
    refusals = {b.split(":")[0] for _, b in verdicts if b is not None}
    assert {"size", "reduction axis"} <= refusals, refusals
    assert sum(b is None for _, b in verdicts) > 100
