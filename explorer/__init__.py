"""The compiler explorer: compiler_core's stage artifacts as Jupyter views and standalone HTML.

    from explorer import explore
    view = explore(lambda x: torch.softmax(x, -1), torch.randn(64, 128))
    view    # tabs: Capture, Graph, Autograd, Primitives, Fusion, Kernels, Compare, Memory, Roofline, Timing,
            #   Summary, Stepper, What-if
    view.to_html("softmax.html")

    %load_ext explorer         # then a cell starting with %%fcompile compiles the cell itself
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from explorer.view import ExplorerView


def explore(fn: Callable, *args: Any, backend: str = "auto", mode: str = "default", train: bool = False,
            compare: Any = None, kernels_for: Optional[Sequence[str]] = None, repeats: int = 10,
            title: Optional[str] = None, check: bool = False) -> ExplorerView:
    """Compile `fn` on `args` (as compiler_core.explain does), time it against eager, return the view.

        view = explore(lambda x: torch.softmax(x, -1), torch.randn(64, 128))
        view.tab_titles  # Capture, Graph, Autograd, Primitives, Fusion, Kernels, ..., Summary, Stepper, What-if

    `compare="inductor"` also compiles with torch.compile (Inductor): its kernels beside ours in the Compare
    tab, timed beside ours. `kernels_for` lists the backends whose
    kernel source to show (default on CPU: ("cpp", "triton"), Triton through its interpreter).
    `repeats=0` skips timing. `check=True` compares every kernel with eager PyTorch after its launch
    (compiler_core's check mode) and marks each kernel with the verdict in the Kernels tab.
    """
    from explorer.exploration import explore_function

    exploration = explore_function(fn, args, backend=backend, mode=mode, train=train, compare=compare,
                                   kernels_for=kernels_for, repeats=repeats, title=title, check=check)
    return ExplorerView(exploration)


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext explorer`: registers the %%fcompile cell magic (and the %fcompile line magic)."""
    from explorer.magic import FcompileMagics

    magics = FcompileMagics(ipython)
    ipython.register_magics(magics)
    # `%config FcompileMagics.backend = "cpp"` reaches the configurables the shell lists.
    if magics not in ipython.configurables:
        ipython.configurables.append(magics)


def unload_ipython_extension(ipython: Any) -> None:
    from explorer.magic import FcompileMagics

    magics = ipython.magics_manager.magics
    for kind in ("line", "cell"):
        if isinstance(getattr(magics[kind].get("fcompile"), "__self__", None), FcompileMagics):
            del magics[kind]["fcompile"]
    ipython.magics_manager.registry.pop("FcompileMagics", None)
    ipython.configurables = [c for c in ipython.configurables if not isinstance(c, FcompileMagics)]


__all__ = ["explore", "ExplorerView", "load_ipython_extension", "unload_ipython_extension"]
