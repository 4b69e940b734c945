"""End to end in a real JupyterLab: `%%fcompile` in a notebook, run from the browser, shows its result
and the explorer.  Run with `make test-e2e` (needs Debian's chromium and the playwright package;
not part of `make test`)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.e2e

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"]
WAIT_MS = int(os.environ.get("FCOMPILE_E2E_WAIT_MS", "180000"))  # for the notebook to finish running
CELLS = [
    "%load_ext explorer\nimport torch\nx = torch.randn(64, 128)",
    "%%fcompile\ny = torch.softmax(x, -1) * 2\ny.sum()",
    "print('assigned:', tuple(y.shape))",
]


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


@pytest.fixture
def lab(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "e2e.ipynb")
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    port, token = _free_port(), "fcompile-e2e"
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}", "--LabApp.expose_app_in_browser=True",
         "--allow-root"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(f"http://127.0.0.1:{port}/api/status?token={token}", 60)
        yield f"http://127.0.0.1:{port}/lab/tree/e2e.ipynb?token={token}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_fcompile_cell_runs_in_real_jupyterlab(lab, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1800})
        try:
            page.goto(lab, timeout=60_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            accept = page.locator(".jp-Dialog .jp-mod-accept")  # "Select Kernel", when Lab asks
            try:
                accept.wait_for(timeout=10_000)
                accept.click()
            except sync_api.TimeoutError:
                pass
            page.wait_for_function("window.jupyterapp && window.jupyterapp.commands.hasCommand("
                                   "'notebook:run-all-cells')", timeout=60_000)
            # Started, not awaited: the command resolves only when every cell has run.
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            try:
                page.wait_for_selector("text=assigned: (64, 128)", timeout=WAIT_MS)
            finally:  # the page as it was, for a person to look at when this fails
                page.screenshot(path=str(tmp_path / "lab.png"), full_page=True)
            outputs = page.inner_text(".jp-Notebook")
        finally:
            browser.close()
    # The cell's value, then the explorer's headline and tabs (the ipywidgets view rendered by Lab).
    assert "tensor(128." in outputs, outputs[-2000:]
    assert "this cell: 1 graph" in outputs and "Fusion" in outputs and "Kernels" in outputs, outputs[-2000:]
    assert "Traceback" not in outputs and "Error" not in outputs.split("assigned")[0]
