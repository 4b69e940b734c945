"""The explorer's views: each module turns an Exploration into one tab's HTML.

    for title, render in VIEWS: html = render(exploration)
"""

from explorer.views import (
    autograd,
    capture,
    compare,
    fusion,
    graph,
    kernels,
    memory,
    primitives,
    roofline,
    stepper,
    summary,
    timing,
    whatif,
)

# Tab order: from what was captured (and, training, how forward and backward were split), to what it
# became, to what it costs; last, what it would become with other options.
VIEWS = (
    ("Capture", capture.render),
    ("Graph", graph.render),
    ("Autograd", autograd.render),
    ("Primitives", primitives.render),
    ("Fusion", fusion.render),
    ("Kernels", kernels.render),
    ("Compare", compare.render),
    ("Memory", memory.render),
    ("Roofline", roofline.render),
    ("Timing", timing.render),
    ("Summary", summary.render),
    ("Stepper", stepper.render),
    ("What-if", whatif.render),
)

__all__ = ["VIEWS"]
