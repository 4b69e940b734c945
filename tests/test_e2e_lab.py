"""End to end in a real JupyterLab, driven by headless Chromium; part of `make test` (which installs
Debian's chromium and the playwright package), also alone with `make test-e2e`.

One JupyterLab server for the module:
- a `%%fcompile` cell, run from the browser, shows its value and the explorer;
- the tour notebook: Run All, no error outputs, every tab of every explorer widget clicked and not
  empty (tabs found in the page, so a new view is covered without touching this file); in the Kernels
  tab a graph node (forward and backward) and a kernel line clicked, the answer read;
- the executed tour reopened as an *untrusted* notebook: the widgets are not drawn and JupyterLab's
  sanitizer rewrites the static HTML fallback, which must still read as tabs with styles and
  pictures;
- an exported report (view.to_html) opened from disk: no request leaves the file, every view reads.
Screenshots go to build/browser/ (for a person to look at, pass or fail).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from explorer.tour import TOUR_NOTEBOOK
from explorer.views import VIEWS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
SHOTS = REPO / "build" / "browser"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"]
WAIT_MS = int(os.environ.get("FCOMPILE_E2E_WAIT_MS", "600000"))  # for a notebook to finish running
CELLS = [
    "%load_ext explorer\nimport torch\nx = torch.randn(64, 128)",
    "%%fcompile\ny = torch.softmax(x, -1) * 2\ny.sum()",
    "print('assigned:', tuple(y.shape))",
    # A graph large enough to be drawn collapsed (86 nodes): the Graph tab's search, expand and zoom.
    "from explorer import explore\nimport torch.nn as nn\n"
    "deep = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16), nn.GELU()) for _ in range(12)])\n"
    "explore(deep, torch.randn(4, 16), repeats=2, kernels_for=())",
]
TAB_TITLES = [title for title, _ in VIEWS]

if CHROMIUM is None:
    pytest.skip("needs Debian's chromium: `make test` installs it when run as root with apt-get; "
                "elsewhere install it yourself (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install -e '.[dev]')")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.5)
    raise TimeoutError(f"JupyterLab did not answer at {url}")


class Lab:
    """A JupyterLab server on a loopback port, serving `root`, with its own config, data (trust
    database) and settings directories, so nothing of the user's Jupyter set-up is read or written."""

    def __init__(self, root: Path, home: Path):
        self.root, self.port, self.token = root, _free_port(), "fcompile-e2e"
        settings = home / "settings" / "@jupyterlab"
        # JupyterLab 4 draws only the cells on screen (the others' prompts read empty): draw them all.
        self._write(settings / "notebook-extension" / "tracker.jupyterlab-settings", {"windowingMode": "none"})
        self._write(settings / "apputils-extension" / "notification.jupyterlab-settings", {"fetchNews": "false"})
        env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
                   JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), JUPYTER_CONFIG_DIR=str(home / "config"),
                   JUPYTER_DATA_DIR=str(home / "data"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
                   PYTHONPATH=str(REPO))
        self.log = home / "lab.log"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
                 f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={root}",
                 "--LabApp.expose_app_in_browser=True", "--allow-root"],
                env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        try:
            _wait_for(self.url("api/status"), 60)
        except TimeoutError as e:
            self.stop()
            raise TimeoutError(f"{e}; its log ends:\n{self.log.read_text()[-3000:]}") from None

    @staticmethod
    def _write(path: Path, settings: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def shut_down_kernels(self) -> None:
        """Stop every kernel, so the next notebook does not share the CPU with an idle one's threads."""
        for kernel in json.load(urllib.request.urlopen(self.url("api/kernels"))):
            request = urllib.request.Request(self.url(f"api/kernels/{kernel['id']}"), method="DELETE")
            urllib.request.urlopen(request)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root, home = tmp_path_factory.mktemp("lab-root"), tmp_path_factory.mktemp("lab-home")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "e2e.ipynb")
    shutil.copy(TOUR_NOTEBOOK, root / "tour.ipynb")  # a copy: the committed notebook stays without outputs
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    server = Lab(root, home)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _open_notebook(browser, lab: Lab, name: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    # A workspace of its own: Lab would otherwise reopen (and start kernels for) the notebooks before.
    page.goto(lab.url(f"lab/workspaces/{Path(name).stem}/tree/{name}"), timeout=60_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    # Either the kernel is up or Lab asks which one to start ("Select Kernel"): then take its default.
    page.wait_for_function("""() => document.querySelector('.jp-Dialog .jp-mod-accept') || (window.jupyterapp
        && window.jupyterapp.shell.currentWidget?.sessionContext?.isReady)""", timeout=120_000)
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    if accept.count():
        accept.click()
    page.wait_for_function("window.jupyterapp.commands.hasCommand('notebook:run-all-cells')", timeout=60_000)
    return page


def _run_all(page) -> bool:
    """Run every cell; True when all ran without an error (the command's own answer)."""
    # Started here, awaited below: the command resolves only when every cell has run.
    page.evaluate("() => { window.__ranAll = undefined; window.jupyterapp.commands"
                  ".execute('notebook:run-all-cells').then(ok => { window.__ranAll = ok; }); }")
    page.wait_for_function("window.__ranAll !== undefined", timeout=WAIT_MS, polling=1000)
    return page.evaluate("window.__ranAll")


def _save(page) -> None:
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("!window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000)


def _shot(locator, name: str) -> None:
    """The page with `locator` at the top (an element screenshot would be cut by the notebook's scrolling)."""
    locator.evaluate("e => e.scrollIntoView({block: 'start'})")
    locator.page.screenshot(path=str(SHOTS / f"{name}.png"))


def test_fcompile_cell_runs_in_real_jupyterlab(lab, browser):
    page = _open_notebook(browser, lab, "e2e.ipynb")
    try:
        ok = _run_all(page)
        cells = [c.inner_text() for c in page.locator(".jp-Notebook .jp-Cell").all()]
        if ok:
            _save(page)  # the outputs as the kernel sent them, to check apart from how Lab drew them
            _use_the_graph_controls(page.locator(".jp-OutputArea .widget-tab").last)
    finally:
        page.screenshot(path=str(SHOTS / "fcompile-cell.png"), full_page=True)
        page.close()
        lab.shut_down_kernels()
    assert ok, "\n---\n".join(text[-1500:] for text in cells)
    saved = nbformat.read(lab.root / "e2e.ipynb", as_version=4).cells
    magic_cell, magic_outputs = cells[1], saved[1].outputs
    # The cell's value, then the explorer's headline and tabs (the ipywidgets view rendered by Lab).
    values = [o.data["text/plain"] for o in magic_outputs if o.output_type == "execute_result"]
    assert len(values) == 1 and values[0].startswith("tensor(128."), magic_outputs
    assert "tensor(128." in magic_cell, magic_cell
    assert "this cell: 1 graph" in magic_cell and "Fusion" in magic_cell and "Kernels" in magic_cell, magic_cell
    assert "Traceback" not in magic_cell and "Error" not in magic_cell, magic_cell
    assert "assigned: (64, 128)" in cells[2], cells[2]


def _use_the_graph_controls(tab) -> None:
    """The Graph tab of a collapsed drawing, used as a person would: search (hits listed, and outlined
    in the drawing), expand a module of the overview (the drawing is redrawn), zoom to half size."""
    expect = sync_api.expect
    tab.locator(":scope > .lm-TabBar .lm-TabBar-tab").nth(TAB_TITLES.index("Graph")).click()
    pane = tab.locator(".fxe-graph:visible").first
    expect(pane).to_be_visible(timeout=30_000)
    before = pane.inner_html()
    search = tab.get_by_placeholder("search nodes and kernels: name, op or module")
    search.fill("layer_norm")
    search.press("Enter")
    expect(tab).to_contain_text(re.compile(r"\d+ match(es)?"), timeout=30_000)
    searched = tab.locator(".fxe-graph:visible").first.inner_html()
    assert searched != before, "the search hits were not marked in the drawing"
    # The widget replaces the drawing's element on every redraw: look it up afresh each time.
    drawing = tab.locator(".fxe-graph:visible").first
    tab.locator("select[multiple]:visible").first.select_option(index=0)
    _wait_until(lambda: drawing.inner_html() != searched, "expanding a module did not redraw the graph")
    _shot(tab, "deep-graph-expanded")
    width = drawing.evaluate("e => e.querySelector('img').getBoundingClientRect().width")
    tab.get_by_role("button", name="50%").click()
    _wait_until(lambda: drawing.evaluate("e => e.querySelector('img').getBoundingClientRect().width") < width,
                "zooming to 50% did not shrink the drawing")
    _shot(tab, "deep-graph-zoomed")


def _wait_until(condition, failure: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.25)


# Every ipywidgets Tab on the page: its tab titles, in order (ipywidgets 8 draws a Lumino TabPanel).
_TABS_JS = """() => [...document.querySelectorAll('.jp-OutputArea .widget-tab')].map(
    tab => [...tab.querySelectorAll(':scope > .lm-TabBar .lm-TabBar-tab')].map(t => t.innerText.trim()))"""
# The panel a Tab shows now: text, pictures that loaded, and pictures that did not.
_PANEL_JS = """async (tab) => {
    const shown = [...tab.querySelectorAll(':scope > .widget-tab-contents > *')]
        .filter(p => !p.classList.contains('lm-mod-hidden'));
    const panel = shown[0];
    if (!panel) return {shown: 0};
    const pictures = [...panel.querySelectorAll('img')];
    await Promise.all(pictures.map(i => i.decode().catch(() => null)));  // loaded, or known broken
    return {shown: shown.length, text: panel.innerText.trim().length, height: panel.offsetHeight,
            loaded: pictures.filter(i => i.complete && i.naturalWidth > 0).length,
            broken: pictures.filter(i => !(i.complete && i.naturalWidth > 0)).length};
}"""


def test_tour_runs_and_every_tab_of_every_view_shows_something(lab, browser):
    page = _open_notebook(browser, lab, "tour.ipynb")
    try:
        ok = _run_all(page)
        _save(page)
        page.screenshot(path=str(SHOTS / "tour.png"), full_page=True)
        errors = [o for c in nbformat.read(lab.root / "tour.ipynb", as_version=4).cells
                  for o in c.get("outputs", []) if o.output_type == "error"]
        assert ok and not errors, [f"{e.ename}: {e.evalue}" for e in errors] or "run-all reported a failure"

        views = page.evaluate(_TABS_JS)
        # explore(softmax), explore(layernorm_gelu), the %%fcompile cell, explore(mlp, train=True).
        assert len(views) == 4, views
        empty = []
        for v, titles in enumerate(views):
            assert titles == TAB_TITLES, titles
            tab = page.locator(".jp-OutputArea .widget-tab").nth(v)
            for t, title in enumerate(titles):
                tab.locator(":scope > .lm-TabBar .lm-TabBar-tab").nth(t).click()
                panel = tab.evaluate(_PANEL_JS)
                _shot(tab, f"view{v}-{t:02d}-{title}")
                if panel["shown"] != 1 or not (panel["text"] or panel["loaded"]) or panel["broken"]:
                    empty.append((v, title, panel))
        assert not empty, empty
        _use_the_controls(page.locator(".jp-OutputArea .widget-tab").nth(0), views[0])
        _click_a_backward_node(page.locator(".jp-OutputArea .widget-tab").nth(3), views[3])
    finally:
        page.close()
        lab.shut_down_kernels()


def _use_the_controls(tab, titles: list[str]) -> None:
    """The controls that run Python in the kernel, used as a person would: the Stepper's Next, the
    What-if toggles with Recompile (fusion off: one kernel per loop node, still equal to eager), the
    FX node picker of the Kernels tab, and a click on a graph node and on a kernel line there."""
    expect = sync_api.expect

    def open_tab(title: str):
        tab.locator(":scope > .lm-TabBar .lm-TabBar-tab").nth(titles.index(title)).click()

    open_tab("Stepper")
    tab.get_by_role("button", name="Next").click()
    expect(tab).to_contain_text("step 2 of", timeout=30_000)
    open_tab("What-if")
    tab.get_by_role("checkbox", name="fusion").uncheck()
    tab.get_by_role("button", name="Recompile").click()
    expect(tab).to_contain_text("outputs match eager PyTorch", timeout=120_000)
    expect(tab).to_contain_text("kernels")
    _shot(tab, "view0-what-if-recompiled")
    open_tab("Kernels")
    tab.locator("select:visible").first.select_option(index=1)  # the FX node picker: its first node
    expect(tab).to_contain_text(re.compile(r"\): (lines \d|no single line)"), timeout=30_000)
    _shot(tab, "view0-fx-node-picked")
    _click_provenance(tab)


def _click_provenance(tab) -> None:
    """Clicks reach Python (explorer/render/clickable.py): a node of the Kernels tab's graph picture
    answers with its kernel lines and your line, a line of a kernel's source with its FX nodes."""
    expect = sync_api.expect
    answer = tab.locator(".fxe-answer:visible")
    # The node whose Graphviz <title> is its FX name (XPath: the SVG's elements are in their own namespace).
    exp_node = tab.locator(".fxe-picture:visible").locator(
        "xpath=.//*[local-name()='g' and contains(@class, 'node')][*[local-name()='title']='exp']")
    exp_node.click()
    expect(answer).to_contain_text(re.compile(r"exp \(aten\.exp\.default, graph 0\): line \d+ in softmax"),
                                   timeout=30_000)
    expect(answer).to_contain_text(re.compile(r"\): lines \d"))
    assert "fxe-picked" in exp_node.get_attribute("class"), "the clicked node is not outlined"
    expect(tab.locator(".fxe-sources .fxe-picked[data-fxe-line]").first).to_be_visible()  # its lines, outlined
    _shot(tab, "view0-node-clicked")
    line = tab.locator(".fxe-sources [data-fxe-line]", has_text="fc::exp_f32(").first
    line.click()
    expect(answer).to_contain_text(re.compile(r"line \d+: .*fc::exp_f32\(.* computes [^\n]*\bexp\b"), timeout=30_000)
    expect(answer).to_contain_text(re.compile(r"line \d+ in softmax"))
    assert "fxe-picked" in line.get_attribute("class"), "the clicked line is not outlined"
    assert tab.locator(".fxe-picture:visible g.node.fxe-picked").count() >= 1, "the line's nodes are not outlined"
    _shot(tab, "view0-line-clicked")


def _click_a_backward_node(tab, titles: list[str]) -> None:
    """The training view (explore(mlp, train=True)): the Kernels tab's picture of the backward graph, one
    of its listed FX nodes clicked; the answer names it in the backward graph."""
    expect = sync_api.expect
    tab.locator(":scope > .lm-TabBar .lm-TabBar-tab").nth(titles.index("Kernels")).click()
    tab.get_by_role("combobox", name="graph").select_option(label="graph 0 (backward)")
    picture = tab.locator(".fxe-picture:visible")
    expect(picture).to_contain_text("graph 0 (backward)", timeout=30_000)
    # ipywidgets writes the options' spaces as no-break spaces.
    listed = [label.replace("\xa0", " ") for label in
              tab.get_by_role("combobox", name="FX node").locator("option").all_inner_texts()]
    backward = [label.split()[0] for label in listed if label.endswith("(graph 0 (backward))")]
    assert backward, listed
    name = backward[0]
    picture.locator("xpath=.//*[local-name()='g' and contains(@class, 'node')]"
                    f"[*[local-name()='title']='{name}']").click()
    expect(tab.locator(".fxe-answer:visible")).to_contain_text(f"{name} (aten.", timeout=30_000)
    expect(tab.locator(".fxe-answer:visible")).to_contain_text("graph 0 (backward)): ")
    _shot(tab, "view3-backward-node-clicked")


def test_executed_tour_reads_well_untrusted(lab, browser):
    executed = nbformat.read(lab.root / "tour.ipynb", as_version=4)
    if not any(c.get("outputs") for c in executed.cells):
        pytest.skip("needs the executed tour from the test before")
    # A fresh file that nobody signed: JupyterLab trusts what it executed itself, not this copy (the
    # note below also changes its contents, so the trust database cannot know them either).
    executed.cells.insert(0, nbformat.v4.new_markdown_cell("An untrusted copy of the executed tour."))
    executed.metadata.pop("signature", None)
    nbformat.write(executed, lab.root / "tour-untrusted.ipynb")
    page = _open_notebook(browser, lab, "tour-untrusted.ipynb")
    try:
        trusted = page.evaluate("""() => {
            const cells = window.jupyterapp.shell.currentWidget.content.model.cells, found = [];
            for (let i = 0; i < cells.length; i++) found.push(cells.get(i).trusted);
            return found; }""")
        assert not any(trusted), "JupyterLab trusts the copy, so this test would not see the sanitizer"
        page.screenshot(path=str(SHOTS / "untrusted.png"), full_page=True)
        # Untrusted, the widgets are not drawn: each view is its static text/html fallback, sanitized.
        assert page.locator(".jp-OutputArea .widget-tab").count() == 0
        fallbacks = page.locator(".jp-RenderedHTMLCommon:has(> div > details)")
        assert fallbacks.count() == 4, page.inner_text(".jp-Notebook")[-3000:]
        report, code_colours = [], set()
        for v in range(fallbacks.count()):
            view = fallbacks.nth(v)
            shown = view.evaluate(_FALLBACK_JS)
            titles = [s["title"] for s in shown["sections"]]
            assert titles == TAB_TITLES, titles
            # Styles survive: tabs are boxed, tables ruled, and nothing is a bare radio button.
            assert shown["radios"] == 0, shown
            assert all(s["border"] == "1px" for s in shown["sections"]), shown["sections"]
            assert shown["table_cells"] and set(shown["table_cells"]) == {"1px"}, shown["table_cells"]
            assert shown["font"].startswith("Helvetica"), shown["font"]
            # Graphs are pictures (an <img> that loaded), not a run of SVG text.
            assert shown["broken"] == 0 and shown["inline_svg"] == 0, shown
            assert all(s["pictures"] for s in shown["sections"] if s["title"] in ("Graph", "Fusion")), shown
            code_colours |= set(shown["code_colours"])
            for i, s in enumerate(shown["sections"]):
                if not (s["text"] or s["pictures"]):
                    report.append((v, s))
                _shot(view.locator(":scope > div > details").nth(i), f"untrusted-view{v}-{i:02d}-{s['title']}")
        assert not report, report
        assert len(code_colours) >= 3, code_colours  # kernel source keeps its highlighting (inline colours)
    finally:
        page.close()
        lab.shut_down_kernels()


# One static fallback after the sanitizer: every <details> opened, then what it shows.
_FALLBACK_JS = r"""async (view) => {
    const sections = [...view.querySelectorAll(':scope > div > details')];
    sections.forEach(d => { d.open = true; });
    const pictures = [...view.querySelectorAll('img')];
    await Promise.all(pictures.map(i => i.decode().catch(() => null)));  // loaded, or known broken
    return {
        radios: view.querySelectorAll('input[type=radio]').length,
        table_cells: [...view.querySelectorAll('td')].map(c => getComputedStyle(c).borderTopWidth),
        font: getComputedStyle(view.querySelector(':scope > div')).fontFamily,
        pictures: pictures.filter(i => i.complete && i.naturalWidth > 0).length,
        broken: pictures.filter(i => !(i.complete && i.naturalWidth > 0)).length,
        inline_svg: view.querySelectorAll('svg').length,
        code_colours: [...new Set([...view.querySelectorAll('pre span')].map(s => getComputedStyle(s).color))],
        sections: sections.map(d => {
            const summary = d.querySelector(':scope > summary');
            const body = [...d.children].filter(c => c !== summary);
            return {title: summary ? summary.innerText.trim() : '',
                    border: getComputedStyle(d).borderTopWidth,
                    text: body.map(c => c.innerText.trim()).join('').length,
                    pictures: [...d.querySelectorAll('img')].filter(i => i.complete && i.naturalWidth > 0).length};
        }),
    };
}"""


def test_exported_report_reads_offline_in_the_browser(browser, tmp_path):
    """view.to_html(): one self-contained page. Opened from disk, it asks nothing of the network,
    and every view is there with its text or pictures, styled (the same checks as the untrusted tour)."""
    import torch

    from explorer import explore

    view = explore(lambda x: torch.softmax(x * 2, -1).sum(0) + x.mean(), torch.randn(16, 32), repeats=2,
                   kernels_for=("cpp",))
    path = view.to_html(tmp_path / "report.html")
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    try:
        page.goto(path.as_uri(), wait_until="load")
        shown = page.locator("body").evaluate(_FALLBACK_JS)
        page.screenshot(path=str(SHOTS / "report-offline.png"), full_page=True)
    finally:
        page.close()
    assert [s["title"] for s in shown["sections"]] == TAB_TITLES, shown["sections"]
    empty = [s for s in shown["sections"] if not (s["text"] or s["pictures"])]
    assert not empty, empty
    assert shown["broken"] == 0 and shown["radios"] == 0, shown
    assert all(s["border"] == "1px" for s in shown["sections"]), shown["sections"]
    assert all(s["pictures"] for s in shown["sections"] if s["title"] in ("Graph", "Fusion")), shown
    off_disk = [url for url in asked if not url.startswith(("file:", "data:"))]
    assert off_disk == [], off_disk
