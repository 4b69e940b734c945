"""Size expressions printed into kernels and host programs (compiler_core/ir/symbolic.py).

Every printed expression is evaluated as Python reads it (the host program, Triton's interpreter) and
as C++ reads it (truncating / and %), and must equal sympy's value of the expression at many sizes:
the class of bug where a printed size is wrong (a missing parenthesis, a floor taken the other way
for a negative dividend) gives wrong strides and wrong answers, never an error of its own."""

from __future__ import annotations

import ast
import itertools

import pytest
import sympy
from torch.utils._sympy.functions import FloorDiv, Mod, PythonMod

from compiler_core.ir import symbolic

s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)

EXPRESSIONS = {
    "product_of_a_sum": 32 * (s0 + s1) * s1,
    "power": s0**2 * (s1 + 1) ** 2,
    "floordiv": FloorDiv(s0 * s1 + 3, 4),
    "floordiv_of_a_negative_dividend": FloorDiv(-s0 - 3, s1 + 1),
    "mod_of_a_negative_dividend": sympy.Mod(-FloorDiv(s0 - 1, 2) - 2, s1 + 2),
    "torch_mod": Mod(s0 * s1 + 5, s1 + 3),
    "python_mod": PythonMod(7 - s0, 3),
    "pad_to_a_multiple_of_8": s0 + PythonMod(8 - PythonMod(s0, 8), 8),
    "floor_of_a_quotient": sympy.floor((3 * s0 + 1) / (s1 + 2)),
    "ceiling_of_a_quotient": sympy.ceiling(s0 / (s1 + 1)),
    "floor_that_cancels": sympy.floor((32 * s0 - 32) / (s0 - 1 + 0 * s1)) * s1,
    "max_with_a_known_winner_in_a_product": 32 * sympy.Max(s0 + 1, s0) * s1,
    "min_in_a_product": -3 * sympy.Min(s0, s0 + s1),
}


def _c_value(text: str, env: dict) -> int:
    """`text` evaluated with C's integer / and %, which truncate toward zero."""
    class Truncating(ast.NodeTransformer):
        def visit_BinOp(self, node):
            self.generic_visit(node)
            name = {ast.Div: "_tdiv", ast.Mod: "_tmod"}.get(type(node.op))
            if name is None:
                return node
            return ast.Call(ast.Name(name, ast.Load()), [node.left, node.right], [])

    tree = ast.fix_missing_locations(Truncating().visit(ast.parse(text, mode="eval")))

    def tdiv(a, b):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b > 0) else -q

    return eval(compile(tree, "<c>", "eval"), {"_tdiv": tdiv, "_tmod": lambda a, b: a - b * tdiv(a, b), **env})


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_printed_sizes_equal_sympys_value_in_python_and_in_cpp(name):
    expr = EXPRESSIONS[name]
    python_text, c_text = symbolic.python_expr(expr), symbolic.c_expr(expr)
    assert "**" not in python_text + c_text
    for a, b in itertools.product(range(2, 12), range(2, 7)):
        env = {"s0": a, "s1": b}
        want = int(expr.xreplace({s0: a, s1: b}))
        assert eval(python_text, {}, env) == want, (python_text, env)
        assert _c_value(c_text, env) == want, (c_text, env)


class _ExampleCall:
    """A stand-in for Dynamo's ShapeEnv at one example call: decisions are answered at its sizes."""

    def __init__(self, values):
        self.backed_var_to_val = values
        self.guards = []

    def evaluate_expr(self, condition):
        self.guards.append(condition)
        return bool(condition.xreplace(self.backed_var_to_val))

    def _maybe_evaluate_static(self, condition):
        return None


def test_a_max_that_depends_on_the_sizes_prints_the_example_calls_winner_and_keeps_a_guard():
    expr = 32 * sympy.Max(1, FloorDiv(s0, 5) - 1)  # wav2vec2's feature-extractor length
    env = _ExampleCall({s0: 130})
    token = symbolic._SHAPE_ENV.set(env)
    try:
        text = symbolic.python_expr(expr)
    finally:
        symbolic._SHAPE_ENV.reset(token)
    assert env.guards, "the choice is kept as a guard"
    for a in range(10, 200, 7):  # every size the guard admits
        assert all(bool(g.xreplace({s0: a})) for g in env.guards)
        assert eval(text, {}, {"s0": a}) == int(expr.xreplace({s0: a})), text


def test_a_max_outside_a_compilation_is_refused_not_guessed():
    with pytest.raises(symbolic.NotSymbolic):
        symbolic.python_expr(sympy.Max(1, s0 - 3))


def test_a_bound_covers_another_only_where_it_is_at_least_as_large_at_every_size():
    """symbolic._covers decides which int32 bounds a graph keeps as guards: a yes drops a guard, so it
    must hold at every size; a no only keeps one more. Its quick answers (a size at which the difference
    is negative; a difference that grows with every size) are checked against a grid of sizes, on
    random polynomials of the shape index bounds have."""
    import itertools
    import random

    import sympy

    from compiler_core.ir.symbolic import _covers

    a, b, c = sympy.symbols("s0 s1 s2", positive=True, integer=True)
    big = 16777216
    assert _covers(64 * a * b + big, 32 * a * b + big)
    assert not _covers(64 * a * b + big, 64 * b * c + big)  # c large: only a size of 2^40 shows it
    assert not _covers(63 * a * b, 97)  # negative at the smallest sizes (0 without a ShapeEnv)
    pad = sympy.Symbol("s3", integer=True)  # a pad amount: any integer, negative too
    assert not _covers(64 * a + pad, 32 * a) and _covers(64 * a + pad, 32 * a + pad)
    rng = random.Random(0)
    monomials = [sympy.Integer(1), a, b, c, a * b, b * c, a * b * c, a**2]
    yes = 0
    for _ in range(300):
        top, bound = (sum(rng.choice([0, 0, 1, 2, 32, 64, -1]) * m for m in rng.sample(monomials, 3))
                      + rng.choice([0, 97, big]) for _ in range(2))
        if _covers(top, bound):
            yes += 1
            difference = sympy.lambdify((a, b, c), top - bound)
            assert all(difference(*p) >= 0 for p in itertools.product(range(0, 40, 3), repeat=3)), (top, bound)
    assert yes >= 20  # the check above saw enough yeses to mean something (27 of 300)
