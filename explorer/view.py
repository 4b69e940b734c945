"""ExplorerView: the tabs of an Exploration, as a live ipywidgets view and as static HTML.

    view = ExplorerView(exploration)
    view                      # in Jupyter: widget tabs; in nbconvert/GitHub: the static HTML fallback
    view.to_html("out.html")  # standalone page, no kernel or network needed

Each tab's HTML is rendered once and shared by the widget and the static fallback, so the two always
show the same thing.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

from explorer.exploration import Exploration
from explorer.render.html import esc, panel, plural, tabbed, write_page
from explorer.views import VIEWS


class ExplorerView:
    def __init__(self, exploration: Exploration):
        self.exploration = exploration

    @property
    def session(self):
        return self.exploration.session

    @property
    def tab_titles(self) -> tuple[str, ...]:
        return tuple(title for title, _ in VIEWS)

    @cached_property
    def sections(self) -> dict[str, str]:
        """Tab title -> that view's HTML (rendered on first use: drawing graphs takes a moment)."""
        return {title: render(self.exploration) for title, render in VIEWS}

    def headline(self) -> str:
        exp, stats = self.exploration, self.exploration.session.stats
        speed = f", {exp.timing.short()}" if exp.timing else ""
        breaks = f", {plural(stats['graph_breaks'], 'graph break')}" if stats["graph_breaks"] else ""
        fallback = f", {plural(stats['fallback_graphs'], 'graph')} ran in eager" if stats["fallback_graphs"] else ""
        kernels = plural(stats["kernel_count"], f"{exp.backend} kernel")
        return f"{exp.title}: {plural(stats['graphs'], 'graph')}, {kernels}{breaks}{fallback}{speed}"

    def html(self) -> str:
        """The static fragment: every tab, switchable with CSS only."""
        return tabbed(esc(self.headline()), self.sections)

    def to_html(self, path: str | Path) -> Path:
        """Write a standalone HTML page (inline SVG and CSS, no scripts) and return its path."""
        return write_page(path, f"{self.exploration.title}: compiler explorer", self.html())

    @cached_property
    def tab(self) -> Any:
        import ipywidgets as widgets

        tab = widgets.Tab(children=[widgets.HTML(panel(html)) for html in self.sections.values()])
        tab.titles = self.tab_titles
        return tab

    @cached_property
    def widget(self) -> Any:
        import ipywidgets as widgets

        return widgets.VBox([widgets.HTML(panel(f'<div class="fxe-head">{esc(self.headline())}</div>')), self.tab])

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict:
        bundle = {}
        try:
            bundle.update(self.widget._repr_mimebundle_())
        except Exception:  # noqa: BLE001 - no widget machinery: the static HTML is still a full view
            pass
        # The static fallback travels beside the widget: nbconvert and GitHub cannot run widget JS.
        bundle["text/html"] = self.html()
        bundle["text/plain"] = repr(self)
        return bundle

    def __repr__(self) -> str:
        return f"<ExplorerView {self.headline()}; tabs: {' | '.join(self.tab_titles)}>"
