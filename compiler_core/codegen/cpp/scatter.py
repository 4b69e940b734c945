"""C++ for a scatter kernel's plan (KernelPlan.scatters): a loop over the source elements whose scatter
steps add their value into positions read from memory (an overwrite stores it, on one thread in
index order: decomp/store_scatter.py).

    #pragma omp parallel for collapse(2) num_threads(nthreads)     (only from SCATTER_PARALLEL_MIN)
    for (int64_t x0 = 0; x0 < 2048; x0++) {
        for (int64_t x1 = 0; x1 < 64; x1++) {
            auto t0 = in_ptr0[x0];
            auto t1 = fc::checked_position(static_cast<int64_t>(t0), 5000LL, 4, false);
            auto t2 = ...value...;
            if (t0 >= 0 && t0 < 5000) {
                #pragma omp atomic
                out_ptr0[x1 + t1 * 64] += static_cast<float>(t2);
            }
        }
    }

No `omp simd`: lanes of one vector may hit one element. A position out of range adds nothing and
sets the error flag (the runtime raises eager's error after the call).
"""

from __future__ import annotations

from compiler_core.codegen.cse import CSEPrinter
from compiler_core.ir.symbolic import c_expr
from compiler_core.schedule.kernel_plan import KernelPlan, Step

# Below this many source elements one thread adds them all, without atomics: waking the OpenMP team
# and contended atomic adds (every token of a batch hits a few hot rows of an embedding table) cost
# more than the adds themselves, and one thread sums in index order, the same every run.
SCATTER_PARALLEL_MIN = 1 << 16


def scatter_body(plan: KernelPlan, printer: CSEPrinter, store_statement, stored_value) -> list[str]:
    """The loop nest of a scatter plan; `store_statement(step, value)` prints its plain stores,
    `stored_value(dtype, value)` a value converted to the storage type."""
    # An overwrite keeps eager CPU's element where two land on one position only in index order.
    parallel = plan.xnumel >= SCATTER_PARALLEL_MIN and not any(s.accumulate == "overwrite" for s in plan.steps)
    for step in plan.steps:
        printer.origins = step.origins
        if step.accumulate:
            value = stored_value(step.store_dtype, printer.emit(step.value))
            printer.lines += _scattered(printer, step, parallel, value)
        else:
            printer.lines.append(printer.mark(store_statement(step, printer.emit(step.value))))
    names = [f"x{i}" for i in range(len(plan.space.x))]
    if not names:
        return ["{"] + ["    " + ln for ln in printer.lines] + ["}"]
    clause = f" collapse({len(names)})" if len(names) > 1 else ""
    out = [f"#pragma omp parallel for{clause} num_threads(nthreads)"] if parallel else []
    for depth, (name, size) in enumerate(zip(names, plan.space.x)):
        out.append("    " * depth + f"for (int64_t {name} = 0; {name} < {c_expr(size)}; {name}++) {{")
    out += ["    " * len(names) + ln for ln in printer.lines]
    return out + ["    " * d + "}" for d in reversed(range(len(names)))]


def _scattered(printer: CSEPrinter, step: Step, parallel: bool, value: str) -> list[str]:
    offset = step.store_index.render(div="/")
    inside = []
    for t in step.store_positions:
        raw = printer.emit(t.value)
        checked = printer.named(printer.position(t, raw, None), t.value)
        offset += f" + {checked}" if t.stride == 1 else f" + {checked} * {c_expr(t.stride)}"
        inside.append(f"{raw} >= 0 && {raw} < {c_expr(t.size)}")
    op = "+=" if step.accumulate == "add" else "="
    write = printer.mark(f"    {step.store_buffer}[{offset}] {op} {value};")
    pragma = ["    #pragma omp atomic"] if parallel and step.accumulate == "add" else []
    return [f"if ({' && '.join(inside) or 'true'}) {{", *pragma, write, "}"]
