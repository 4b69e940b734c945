"""ExplorerView: the tabs of an Exploration, as a live ipywidgets view and as static HTML.

    view = ExplorerView(exploration)
    view                      # in Jupyter: widget tabs; in nbconvert/GitHub: the static HTML fallback
    view.to_html("out.html")  # standalone page, no kernel or network needed

Each tab's HTML is rendered once and shared by the widget and the static fallback, so the two always
show the same thing. The widget adds what needs a kernel: a zoom control on the graph pictures and a
search over nodes and kernels (`view.search("attn")` is the same search, as data), and the fusion
decision log filtered and sorted (`view.decisions(0, "sum_1", verdict="refused", sort="bytes saved")`).
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

from explorer.collapse import Drawing
from explorer.decisions import SORTS, VERDICTS, DecisionRow, decision_rows, decision_table, pick
from explorer.exploration import Exploration
from explorer.hierarchy import graph_tree
from explorer.provenance import Provenance, provenance
from explorer.render.clickable import clickable, inline_svg, line_key, node_key
from explorer.render.html import Markup, esc, inline_styles, panel, plural, tabbed, table, write_page
from explorer.render.svg import zoom_pictures
from explorer.views import VIEWS
from explorer.views.fusion import kernel_clusters, kernel_drawing, kernel_tree
from explorer.views.graph import DRAWING_END, DRAWING_START, graph_drawing, picture_pane, start_drawing
from explorer.views.kernels import FOLD_ABOVE, line_html, node_html, render_kernel
from explorer.views.kernels import render as render_kernels
from explorer.views.stepper import Step, pipeline_steps, step_html
from explorer.views.whatif import (
    WhatIf,
    WhatIfRefused,
    available_backends,
    available_modes,
    current_options,
    program_device,
    result_html,
    what_if,
)
from explorer.why import WhyFused, computed_nodes, in_other_graphs, why_fused

ZOOMS = {"25%": 0.25, "50%": 0.5, "100%": 1.0, "200%": 2.0}  # 100%: the picture's natural size
ZOOMED_TABS = ("Graph", "Fusion")
# The value of a list's "(pick ...)" entry. Not None: ipywidgets turns the value None into no selection,
# and the list then shows a blank instead of the placeholder.
NO_PICK = ()
BOX = "box:"  # the DOT id of a collapsed drawing's box is its name after this (compiler_core/analysis/dot.py)
DECISIONS_SHOWN = 200  # rows of the filtered decision log the widget shows (a GPT-2 graph has thousands)
# In the widget, in place of a tab's static drawings: it draws each graph once, in a pane that expands.
DRAWN_ABOVE = inline_styles('<p class="fxe-note">Drawn above: pick this graph there, expand what you want to read, '
                            "or draw every node.</p>")


class ExplorerView:
    def __init__(self, exploration: Exploration):
        self.exploration = exploration
        self._decision_cache: dict[int, tuple[DecisionRow, ...]] = {}  # graph -> its decision log's rows

    @property
    def session(self):
        return self.exploration.session

    @property
    def tab_titles(self) -> tuple[str, ...]:
        return tuple(title for title, _ in VIEWS)

    @cached_property
    def sections(self) -> dict[str, str]:
        """Tab title -> that view's HTML (rendered on first use: drawing graphs takes a moment)."""
        # Graphviz lays the largest pictures out in the background while the other tabs render, and the
        # tabs that show them render last: a 12-layer GPT-2 training step's take Graphviz 1.5 s.
        for drawing in sorted((d for ds in self.drawings.values() for d in ds), key=lambda d: -len(d.graph.nodes)):
            start_drawing(drawing)
        rendered = {title: render(self.exploration) for title, render in sorted(
            VIEWS, key=lambda view: view[0] in self.drawings)}
        return {title: rendered[title] for title, _ in VIEWS}

    def headline(self) -> str:
        exp, stats = self.exploration, self.exploration.session.stats
        speed = f", {exp.timing.short()}" if exp.timing else ""
        breaks = f", {plural(stats['graph_breaks'], 'graph break')}" if stats["graph_breaks"] else ""
        fallback = f", {plural(stats['fallback_graphs'], 'graph')} ran in eager" if stats["fallback_graphs"] else ""
        kernels = plural(stats["kernel_count"], f"{exp.backend} kernel")
        return f"{exp.title}: {plural(stats['graphs'], 'graph')}, {kernels}{breaks}{fallback}{speed}"

    def html(self) -> str:
        """The static fragment: every tab a <details> element, styled inline (no <style>, no script)."""
        return tabbed(esc(self.headline()), self.sections)

    def to_html(self, path: str | Path) -> Path:
        """Write a standalone HTML page (inline styles, pictures as data URIs, no scripts) and return its path."""
        return write_page(path, f"{self.exploration.title}: compiler explorer", self.html())

    def search(self, query: str) -> list[tuple[str, str, object]]:
        """(graph, "node" | "kernel" | "primitive op", item) for every captured FX node, kernel and
        primitive op (with the kernel computing it) whose name, op, module path or kernel contains `query`
        (case-insensitive)."""
        found = []
        for record in self.session.all_records():
            where = f"graph {record.captured.index}" + (" (backward)" if record.part == "backward" else "")
            if record.part != "backward":
                found += [(where, "node", n) for n in graph_tree(record.captured.graph_module.graph).find(query)]
            if record.prims is not None and record.schedule is not None:
                found += [(where, "kernel", k) for k in kernel_tree(record).find(query)]
                clusters, _ = kernel_clusters(record)
                ops = graph_tree(record.prims.graph_module.graph, clusters, record.prims.node_prims)
                found += [(where, "primitive op", op) for op in ops.find(query)]
        return found

    def why_fused(self, a: str, b: str, graph: int | None = None) -> WhyFused:
        """Whether FX nodes `a` and `b` (as the Fusion tab's graph names them) run in one kernel, and why
        not, from the scheduler's decision log: `print(view.why_fused("sum_1", "sum_2"))`."""
        return why_fused(self.session, a, b, graph)

    def decisions(self, graph: int = 0, query: str = "", verdict: str = "all",
                  sort: str = "order considered") -> list[DecisionRow]:
        """The Fusion tab's decision log of graph `graph` (an index into session.all_records()), filtered
        and sorted as its widget does: `view.decisions(0, "sum_1", verdict="refused", sort="bytes saved")`."""
        return pick(self._decision_rows(graph), query, verdict, sort)

    def _decision_rows(self, graph: int) -> tuple[DecisionRow, ...]:
        # Thousands of rows for a large graph: made once per graph, then only filtered and sorted.
        if graph not in self._decision_cache:
            self._decision_cache[graph] = decision_rows(self.session.all_records()[graph])
        return self._decision_cache[graph]

    def decision_graphs(self) -> list[tuple[str, int]]:
        """(title, index into session.all_records()) of every graph with a fusion decision log."""
        return [(f"graph {r.captured.index}" + (" (backward)" if r.part == "backward" else ""), i)
                for i, r in enumerate(self.session.all_records()) if r.schedule is not None and r.schedule.decisions]

    def decisions_html(self, graph: int = 0, query: str = "", verdict: str = "all",
                       sort: str = "order considered") -> str:
        rows = self._decision_rows(graph)
        found = pick(rows, query, verdict, sort)
        shown = found[:DECISIONS_SHOWN]
        more = f"; the first {len(shown)} shown, narrow the filter for the rest" if len(shown) < len(found) else ""
        count = f"{len(found)} of {plural(len(rows), 'decision')} match{more}"
        return f'<p class="fxe-note">{esc(count)}</p>' + (decision_table(shown) if shown else "")

    def fx_node_choices(self) -> list[tuple[str, tuple[int, str]]]:
        """(label, (graph index, FX node)) for every node a kernel computes: the why-fused dropdowns."""
        records = self.session.all_records()
        choices = []
        for i, record in enumerate(records):
            where = "" if len(records) == 1 else f"  (graph {record.captured.index}" + (
                ", backward)" if record.part == "backward" else ")")
            choices += [(name + where, (i, name)) for name in computed_nodes(record)]
        return choices

    def why_fused_html(self, a: tuple[int, str] | None, b: tuple[int, str] | None) -> str:
        if a is None or b is None:
            return ""
        records = self.session.all_records()
        if a[0] != b[0]:
            answer = in_other_graphs(a[1], records[a[0]], b[1], records[b[0]])
        else:
            answer = why_fused(self.session, a[1], b[1], graph=a[0])
        return f"<p>{esc(answer)}</p>"

    def search_html(self, query: str) -> str:
        if not query.strip():
            return ""
        found = self.search(query)
        if not found:
            return f'<p class="fxe-note">Nothing matches {esc(query)}.</p>'
        rows = [(where, kind, Markup(f"<code>{esc(item.name)}</code>"),
                 getattr(item, "op", "") or getattr(item, "kind", ""), getattr(item, "module", "") or "-",
                 getattr(item, "kernel", "") or ", ".join(o.name for o in getattr(item, "ops", ())))
                for where, kind, item in found]
        count = f"{len(found)} match" + ("" if len(found) == 1 else "es")
        return f"<p>{count}</p>" + table(
            ["graph", "what", "name", "op / kind", "module", "kernel / ops"], rows)

    @cached_property
    def controls(self) -> dict[tuple[str, str], Any]:
        """(tab title, "zoom" | "search" | "results" | "body" | "why_a" | "why_b" | "why",
        for the Kernels tab "node" | "line" | "origin" | "picture" | "picture_graph" (clickable: see
        explorer/render/clickable.py), for the Stepper tab "back" | "next" | "counter" | "step",
        for the What-if tab "fusion" | "backend" | "mode" | "dynamic" | "activation_budget" | "recompile" | "result")
        -> widget,
        for tests and notebooks."""
        _ = self.tab  # building the tab makes them
        return self._controls

    @cached_property
    def tab(self) -> Any:
        import ipywidgets as widgets

        self._controls: dict[tuple[str, str], Any] = {}
        children = []
        for title, html in self.sections.items():
            body = widgets.HTML(panel(html))
            self._controls[(title, "body")] = body
            controls = []
            if title in ZOOMED_TABS and 'class="fxe-pic"' in html:
                zoom = widgets.ToggleButtons(options=list(ZOOMS), value="100%", description="zoom",
                                             tooltips=["quarter size", "half size", "natural size", "double size"])
                self._controls[(title, "zoom")] = zoom
                controls.append(zoom)
                if any(d.collapses for d in self.drawings.get(title, ())):
                    controls += self._drawing_controls(widgets, title, zoom)
                    # The static drawings are the pane's first picture: show each graph once. The markers
                    # survive styling, so the tab styled for the static HTML is cut, not styled again.
                    body.value = re.sub(f"{DRAWING_START}.*?{DRAWING_END}", lambda _drawing: DRAWN_ABOVE,
                                        body.value, flags=re.S)
                zoom.observe(lambda change, body=body, styled=body.value: setattr(
                    body, "value", zoom_pictures(styled, ZOOMS[change["new"]])), names="value")
            if title == "Graph":
                search = widgets.Text(placeholder="search nodes and kernels: name, op or module",
                                      description="search", continuous_update=False)
                results = widgets.HTML()
                search.observe(lambda change, results=results: setattr(
                    results, "value", panel(self.search_html(change["new"]))), names="value")
                if ("Graph", "redraw") in self._controls:  # search hits outlined red in the drawing
                    search.observe(lambda _change: self._controls[("Graph", "redraw")](), names="value")
                self._controls[(title, "search")] = search
                self._controls[(title, "results")] = results
                controls += [search, results]
            if title == "Fusion" and self.fx_node_choices():
                controls += self._why_fused_controls(widgets)
            if title == "Fusion" and self.decision_graphs():
                controls += self._decision_controls(widgets)
            if title == "Kernels" and self.provenance.nodes and self.provenance_pictures():
                # Each kernel line an element a click picks: rendered apart from the static tab (plain text).
                body = clickable(value=panel(render_kernels(self.exploration, clickable=True)))
                self._controls[(title, "body")] = body
                controls += self._provenance_controls(widgets, body)
            if title == "Kernels" and len(self.kernel_choices()) > FOLD_ABOVE:
                controls += self._kernel_picker(widgets)
            if title == "What-if" and self.exploration.program is not None:
                controls += self._what_if_controls(widgets)
            if title == "Stepper" and self.steps:
                controls, body = self._stepper_controls(widgets), self._controls[("Stepper", "step")]
            children.append(widgets.VBox(controls + [body]) if controls else body)
        tab = widgets.Tab(children=children)
        tab.titles = self.tab_titles
        return tab

    @cached_property
    def drawings(self) -> dict[str, list[Drawing]]:
        """Tab -> the drawings its widget can collapse and expand: captured graphs (by module) in the
        Graph tab, primitive graphs (by kernel) in the Fusion tab."""
        return {"Graph": [graph_drawing(r.captured) for r in self.session.graphs],
                "Fusion": [kernel_drawing(r, f"graph {r.captured.index}" + (" (backward)" if r.part == "backward"
                                                                            else ""))
                           for r in self.session.all_records() if r.prims is not None and r.schedule is not None]}

    def drawing_html(self, tab: str, index: int = 0, expanded: Iterable[str] = (), every_node: bool = False,
                     marked: Iterable[str] = (), zoom: float = 1.0) -> str:
        """One drawing of `tab` with the modules (or kernels) in `expanded` drawn node by node."""
        drawing = self.drawings[tab][index]
        dot = drawing.dot(tuple(expanded), every_node=every_node, marked=set(marked))
        return zoom_pictures(picture_pane(dot, drawing.title), zoom)

    def _drawing_controls(self, widgets: Any, tab: str, zoom: Any) -> list:
        """Pick a graph, expand modules (or kernels) of its collapsed drawing, or draw every node."""
        drawings = self.drawings[tab]
        graph = widgets.Dropdown(options=[(d.title, i) for i, d in enumerate(drawings)], value=0, description="graph")
        # Module paths are long (transformer.h.11.attn.c_proj): a wide list; ctrl/shift-click picks several.
        # The Fusion tab lists modules, then kernels (each with its module): both expand.
        expand = widgets.SelectMultiple(options=drawings[0].options(), rows=8, description="expand",
                                        layout=widgets.Layout(width="460px"))
        every_node = widgets.Checkbox(value=False, description="every node")
        pane = widgets.HTML()

        def redraw(_change: Any = None) -> None:
            search = self._controls.get(("Graph", "search"))
            query = search.value if tab == "Graph" and search is not None else ""
            marked = [n.name for n in graph_tree(drawings[graph.value].graph).find(query)] if query else ()
            pane.value = panel(self.drawing_html(tab, graph.value, expand.value, every_node.value, marked,
                                                 ZOOMS[zoom.value]))

        def pick_graph(change: Any) -> None:
            expand.options = drawings[change["new"]].options()
            redraw()

        graph.observe(pick_graph, names="value")
        for control in (expand, every_node, zoom):
            control.observe(redraw, names="value")
        redraw()
        self._controls.update({(tab, "graph"): graph, (tab, "expand"): expand, (tab, "every_node"): every_node,
                               (tab, "drawing"): pane, (tab, "redraw"): redraw})
        return [widgets.HBox(([graph] if len(drawings) > 1 else []) + [expand, every_node]), pane]

    @cached_property
    def steps(self) -> list[Step]:
        """The pipeline one stage at a time (the Stepper tab): `for s in view.steps: print(s.title, s.changed)`."""
        return pipeline_steps(self.session)

    def _stepper_controls(self, widgets: Any) -> list:
        """Back / Next and a step counter; the body shows one step at a time."""
        back = widgets.Button(description="Back", icon="arrow-left")
        forward = widgets.Button(description="Next", icon="arrow-right")
        counter = widgets.Label()
        body = widgets.HTML()
        position = {"index": 0}

        def show(index: int) -> None:
            position["index"] = index = max(0, min(index, len(self.steps) - 1))
            step = self.steps[index]
            counter.value = f"step {index + 1} of {len(self.steps)}: {step.title}"
            body.value = panel(step_html(step, len(self.steps)))
            back.disabled, forward.disabled = index == 0, index == len(self.steps) - 1

        back.on_click(lambda _button: show(position["index"] - 1))
        forward.on_click(lambda _button: show(position["index"] + 1))
        show(0)
        self._controls.update({("Stepper", "back"): back, ("Stepper", "next"): forward,
                               ("Stepper", "counter"): counter, ("Stepper", "step"): body})
        return [widgets.HBox([back, forward, counter])]

    @cached_property
    def provenance(self) -> Provenance:
        """FX node <-> generated lines <-> your Python lines (the Kernels tab's two dropdowns, as data)."""
        return provenance(self.exploration)

    def provenance_pictures(self) -> list[tuple[str, int, Drawing]]:
        """(title, index into session.all_records(), drawing) of every primitive graph with kernels, forward
        and backward: the Kernels tab draws the one picked, and a click on a node asks for its provenance.
        These are the Fusion tab's drawings (boxed by kernel): their nodes are the FX nodes kernels compute."""
        records = [i for i, r in enumerate(self.session.all_records())
                   if r.prims is not None and r.schedule is not None]  # as self.drawings["Fusion"] picks them
        return [(drawing.title, record, drawing) for record, drawing in zip(records, self.drawings["Fusion"])]

    def pick_html(self, record: int, name: str) -> str:
        """The answer to a click on `name` in record `record`'s picture: an FX node's kernels, lines and
        your line; a collapsed kernel's source; or what the shape is when nothing computes it."""
        prov = self.provenance
        try:
            return node_html(prov, record, name, clickable=True)
        except KeyError:
            pass
        box = name.removeprefix(BOX)  # a collapsed drawing's shape: a kernel, an extern call or a module
        if any(k.name == box for k in self.session.all_records()[record].kernels):
            return render_kernel(prov.kernel(prov.backend, box), prov=prov, clickable=True)
        fx = {n.name: n for n in self.session.all_records()[record].prims.graph_module.graph.nodes}
        if name in fx:
            what = {"placeholder": "an input of the graph", "output": "the graph's outputs"}.get(
                fx[name].op, "a view or a value no kernel computes (it costs no kernel)")
        elif box.startswith("extern: "):
            what = "an extern call (a library kernel such as a matmul): no generated source; the host program calls it"
        else:
            what = "a box of several kernels or ops: the Fusion tab expands it, or pick one of its nodes from the list"
        return f"<p><code>{esc(box)}</code>: {esc(what)}.</p>"

    def _provenance_controls(self, widgets: Any, body: Any) -> list:
        """Click an FX node in the graph picture (or pick it from the list): its kernels, lines highlighted,
        and your line. Click a line of a kernel (below, or in an answer), or pick it: its FX nodes and your
        lines. The answer shows the latest pick; the picture and the sources outline what it is about.
        The lists stay for keyboard users and scripts."""
        prov = self.provenance
        nodes = [(o.label, (o.record, o.node)) for o in prov.nodes]
        several = len(prov.kernels) > 1
        lines = [((f"[{b}] " if several else "") + label, where) for b in prov.kernels
                 for label, where in prov.line_choices(b)]
        node = widgets.Dropdown(options=[("(pick an FX node)", NO_PICK)] + nodes, value=NO_PICK, description="FX node")
        line = widgets.Dropdown(options=[("(pick a kernel line)", NO_PICK)] + lines, value=NO_PICK, description="line")
        answer = clickable(reveal=True)  # scrolls into view: a click on a line far below it is answered here
        answer.add_class("fxe-answer")  # (the browser test finds the answer, picture and sources by these)
        pictures = self.provenance_pictures()
        graph = widgets.Dropdown(options=[(title, i) for i, (title, _, _) in enumerate(pictures)], value=0,
                                 description="graph")
        picture = clickable()
        picture.add_class("fxe-picture")
        body.add_class("fxe-sources")
        # Every widget a click can come from; all of them show the same pick (outlined, and in their traits,
        # so that a second click on what is already answered changes nothing and any other click does).
        self._pick_sources = sources = [picture, body, answer]
        syncing = {"now": False}

        def draw(_change: Any = None) -> None:
            title, record, drawing = pictures[graph.value]
            picture.value = panel('<p class="fxe-note">Click a node: its kernel and the lines computing it. '
                                  "Click a line of a kernel: its FX nodes and your line.</p>"
                                  + inline_svg(picture_pane(drawing.dot(), title), record))

        listed = {value for _, value in nodes + lines}

        def show(html: str, picked_node: Any, picked_line: Any, marked: list[str]) -> None:
            # The lists follow a click (the placeholder where the pick is not listed, such as an input).
            syncing["now"] = True
            try:
                as_node = (picked_node["record"], picked_node["node"]) if picked_node else None
                as_line = tuple(picked_line[k] for k in ("backend", "kernel", "line")) if picked_line else None
                node.value = as_node if as_node in listed else NO_PICK
                line.value = as_line if as_line in listed else NO_PICK
                for source in sources:
                    source.picked_node, source.picked_line, source.marked = picked_node, picked_line, marked
                answer.value = panel(html)
            finally:
                syncing["now"] = False

        def pick_node(record: int, name: str) -> None:
            shown = [i for i, (_, r, _) in enumerate(pictures) if r == record]
            if shown and pictures[graph.value][1] != record:  # picked from the list: draw its graph
                graph.value = shown[0]
            marked = [node_key(record, name)] + [line_key(b, k, n) for b in prov.kernels
                                                 for k, ns in prov.kernels_of(record, name, b) for n in ns]
            show(self.pick_html(record, name), {"record": record, "node": name}, None, marked)

        def pick_line(backend: str, kernel: str, number: int) -> None:
            found = prov.at(backend, kernel, number)
            marked = [line_key(backend, kernel, number)] + [node_key(o.record, o.node) for o in found.nodes]
            show(line_html(prov, backend, kernel, number, clickable=True), None,
                 {"backend": backend, "kernel": kernel, "line": number}, marked)

        def picked(change: Any) -> None:
            if syncing["now"] or not change["new"]:
                return
            new = change["new"]
            if change["name"] == "picked_node":
                pick_node(int(new["record"]), str(new["node"]))
            else:
                pick_line(str(new["backend"]), str(new["kernel"]), int(new["line"]))

        node.observe(lambda change: None if syncing["now"] or not change["new"] else pick_node(*change["new"]),
                     names="value")
        line.observe(lambda change: None if syncing["now"] or not change["new"] else pick_line(*change["new"]),
                     names="value")
        for source in sources:
            source.observe(picked, names=["picked_node", "picked_line"])
        graph.observe(draw, names="value")
        draw()
        self._controls.update({("Kernels", "node"): node, ("Kernels", "line"): line, ("Kernels", "origin"): answer,
                               ("Kernels", "picture"): picture, ("Kernels", "picture_graph"): graph,
                               ("Kernels", "redraw_picture"): draw, ("Kernels", "picked"): picked})
        return [widgets.HBox([node, line]), widgets.HBox(([graph] if len(pictures) > 1 else [])), picture, answer]

    def kernel_choices(self) -> list[tuple[str, tuple[str, int]]]:
        """(label, (backend, index)) for every kernel of every backend shown."""
        exp = self.exploration
        several = len(exp.kernels) > 1
        return [((f"[{b}] " if several else "") + k.name, (b, i)) for b, ks in exp.kernels.items()
                for i, k in enumerate(ks)]

    def _kernel_picker(self, widgets: Any) -> list:
        """Many kernels: pick one to read instead of scrolling through every one."""
        choices = self.kernel_choices()
        picker = widgets.Dropdown(options=[("(pick a kernel)", NO_PICK)] + choices, value=NO_PICK, description="kernel")
        shown = clickable()

        def show(change: Any) -> None:
            if change["new"]:
                backend, index = change["new"]
                shown.value = panel(render_kernel(self.exploration.kernels[backend][index], prov=self.provenance,
                                                  clickable=True))

        picker.observe(show, names="value")
        if ("Kernels", "picked") in self._controls:  # its lines answer a click as the tab's own do
            shown.observe(self._controls[("Kernels", "picked")], names=["picked_node", "picked_line"])
            self._pick_sources.append(shown)
        self._controls.update({("Kernels", "kernel"): picker, ("Kernels", "kernel_source"): shown})
        return [picker, shown]

    def what_if(self, repeats: int = 5, **changes: Any) -> WhatIf:
        """Compile the program again with other options and compare: `view.what_if(fusion=False).rows()`."""
        return what_if(self.exploration, repeats=repeats, **changes)

    def what_if_html(self, repeats: int = 5, **changes: Any) -> str:
        """The What-if tab's answer: the before/after table, or one line saying why not."""
        try:
            return result_html(self.what_if(repeats=repeats, **changes))
        except WhatIfRefused as exc:
            return f'<p class="fxe-bad">{esc(exc)}</p>'

    def _what_if_controls(self, widgets: Any) -> list:
        """The toggles change nothing until Recompile is pressed (a slider drag must not compile)."""
        exp = self.exploration
        now, device = current_options(exp), program_device(exp.program)
        backends = list(dict.fromkeys([now.backend, *available_backends(device)]))
        modes = list(dict.fromkeys([now.mode, *available_modes(device)]))
        toggles = {
            "fusion": widgets.Checkbox(value=now.fusion, description="fusion"),
            "backend": widgets.Dropdown(options=backends, value=now.backend, description="backend"),
            "mode": widgets.Dropdown(options=modes, value=now.mode, description="mode"),
            # Ticked: symbolic sizes from the first call (dynamic=True); unticked leaves the option as it is.
            "dynamic": widgets.Checkbox(value=bool(now.dynamic), description="dynamic"),
            "activation_budget": widgets.FloatSlider(value=now.activation_budget, min=0.0, max=1.0, step=0.05,
                                                     description="activation budget", disabled=not exp.train),
        }
        button = widgets.Button(description="Recompile", icon="refresh")
        result = widgets.HTML()

        shown = {name: toggle.value for name, toggle in toggles.items()}

        def recompile(_button: Any) -> None:
            changes = {name: toggle.value for name, toggle in toggles.items() if toggle.value != shown[name]}
            result.value = panel('<p class="fxe-note">Recompiling and timing...</p>')
            result.value = panel(self.what_if_html(**changes))

        button.on_click(recompile)
        self._controls.update({("What-if", name): toggle for name, toggle in toggles.items()})
        self._controls.update({("What-if", "recompile"): button, ("What-if", "result"): result})
        return [widgets.HBox([toggles["fusion"], toggles["dynamic"], toggles["backend"], toggles["mode"]]),
                widgets.HBox([toggles["activation_budget"], button]), result]

    def _decision_controls(self, widgets: Any) -> list:
        """The decision log filtered by a text (FX names or reason) and a verdict, sorted by a column."""
        graphs = self.decision_graphs()
        graph = widgets.Dropdown(options=graphs, value=graphs[0][1], description="decisions of")
        query = widgets.Text(placeholder="FX node or reason: sum_1, reduction axis, memory",
                             description="filter", continuous_update=False)
        verdict = widgets.Dropdown(options=list(VERDICTS), value="all", description="verdict")
        order = widgets.Dropdown(options=list(SORTS), value="order considered", description="sort by")
        table_ = widgets.HTML()

        def update(_change: Any = None) -> None:
            table_.value = panel(self.decisions_html(graph.value, query.value, verdict.value, order.value))

        for control in (graph, query, verdict, order):
            control.observe(update, names="value")
        update()
        self._controls.update({("Fusion", "decisions_graph"): graph, ("Fusion", "decisions_filter"): query,
                               ("Fusion", "decisions_verdict"): verdict, ("Fusion", "decisions_sort"): order,
                               ("Fusion", "decisions"): table_})
        return [widgets.HBox(([graph] if len(graphs) > 1 else []) + [query, verdict, order]), table_]

    def _why_fused_controls(self, widgets: Any) -> list:
        """Two dropdowns of FX nodes and the answer line; answering reads the artifacts only."""
        choices = self.fx_node_choices()
        first = widgets.Dropdown(options=choices, value=choices[0][1], description="why fused")
        second = widgets.Dropdown(options=choices, value=choices[-1][1], description="with")
        answer = widgets.HTML()

        def update(_change: Any = None) -> None:
            answer.value = panel(self.why_fused_html(first.value, second.value))

        first.observe(update, names="value")
        second.observe(update, names="value")
        update()
        self._controls.update({("Fusion", "why_a"): first, ("Fusion", "why_b"): second,
                               ("Fusion", "why"): answer})
        return [widgets.HBox([first, second]), answer]

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
