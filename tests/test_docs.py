"""The documentation that is generated from code stays in sync with it."""

from pathlib import Path

from compiler_core.decomp.primitives import describe

ROOT = Path(__file__).resolve().parents[1]


def test_primitive_table_in_docs_matches_code():
    assert describe() in (ROOT / "docs" / "primitives.md").read_text()


def test_both_code_generators_implement_every_primitive():
    import torch

    from compiler_core.codegen.cpp.kernel import CppPrinter
    from compiler_core.codegen.triton.kernel import TritonPrinter
    from compiler_core.decomp.primitives import POINTWISE
    from compiler_core.ir.values import Constant, Op

    for dtype in (torch.float32, torch.int64):
        for name, (arity, _) in POINTWISE.items():
            args = tuple(Constant(1, dtype) for _ in range(arity))
            if name == "where":
                args = (Constant(True, torch.bool),) + args[1:]
            op = Op(name, args, dtype)
            assert CppPrinter().render(op)
            assert TritonPrinter("xmask", interpret=True).render(op)
            assert TritonPrinter("xmask", interpret=False).render(op)
