"""The HTML report in a real browser: headless Chromium, driven over the DevTools protocol.

For the hand-built fixture (and for a real run when ``SPECBENCH_RUN_DIR``
points at ``results/<suite>/<run-id>``) the test writes the report, opens it
from ``file://``, and checks that there are no console errors or exceptions,
that no request leaves the file (only ``file:`` and ``data:`` URLs), that
there is no script, and that every image decoded. It then takes a screenshot
with ``--screenshot`` and checks the figures' colours show in it. Set
``SPECBENCH_SCREENSHOT_DIR`` to keep the screenshots.

Skipped only when no Chromium is installed (``apt-get install chromium``).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specbench.report.html import write_reports

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
IMAGES_OK = "Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)"

if CHROMIUM is None:
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

websockets_sync = pytest.importorskip("websockets.sync.client")


class DevTools:
    """A minimal CDP client over one browser websocket, with flattened page sessions."""

    def __init__(self, url: str) -> None:
        self.ws = websockets_sync.connect(url, max_size=None, open_timeout=30)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        for e in self.events:
            if e.get("method") == method:
                return e
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            e = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            self.events.append(e)
            if e.get("method") == method:
                return e
        raise TimeoutError(method)

    def close(self) -> None:
        self.ws.close()


def launch(profile: Path) -> tuple[subprocess.Popen, str]:
    profile.mkdir()
    proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if port_file.is_file():
            lines = port_file.read_text().splitlines()
            if len(lines) >= 2:
                return proc, f"ws://127.0.0.1:{lines[0].strip()}{lines[1].strip()}"
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("chromium did not write DevToolsActivePort")


def inspect(url: str, profile: Path) -> dict[str, Any]:
    proc, ws_url = launch(profile)
    cdp = DevTools(ws_url)
    try:
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            cdp.send(f"{domain}.enable", session=session)
        cdp.send("Page.navigate", {"url": url}, session=session)
        cdp.wait_for("Page.loadEventFired", timeout=60)

        def evaluate(expr: str) -> Any:
            return cdp.send("Runtime.evaluate", {"expression": expr, "returnByValue": True},
                            session=session)["result"].get("value")

        result = {
            "images_ok": evaluate(IMAGES_OK),
            "n_images": evaluate("document.images.length"),
            "n_scripts": evaluate("document.scripts.length"),
            "title": evaluate("document.title"),
            "tables": evaluate("document.querySelectorAll('table').length"),
        }
        errors = []
        requests = []
        for e in cdp.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                errors.append(p.get("exceptionDetails", {}).get("text", "exception"))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                errors.append(p["entry"].get("text", ""))
            elif m == "Network.requestWillBeSent":
                requests.append(p.get("request", {}).get("url", ""))
        result["errors"] = errors
        result["external"] = [u for u in requests if not u.startswith(("file:", "data:"))]
        try:
            cdp.send("Browser.close", timeout=10)
        except Exception:  # noqa: BLE001 - the browser may drop the socket while closing
            pass
    finally:
        cdp.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return result


def screenshot(url: str, out: Path, profile: Path) -> None:
    profile.mkdir()
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1400,7000",
                    f"--screenshot={out}", url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=120, check=True)


def sources() -> list[str]:
    return ["fixture"] + (["run_dir"] if os.environ.get("SPECBENCH_RUN_DIR") else [])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("source", sources())
def test_html_report_in_chromium(source: str, tmp_path: Path) -> None:
    if source == "fixture":
        run_dir = tmp_path / "results" / "gsm8k-gpu" / "20260501T120000Z-full"
        run_dir.mkdir(parents=True)
        shutil.copy(FIXTURES / "summary_full.json", run_dir / "summary.json")
        shutil.copy(FIXTURES / "manifest_full.json", run_dir / "manifest.json")
    else:
        run_dir = Path(os.environ["SPECBENCH_RUN_DIR"])
    paths = write_reports(run_dir, tmp_path / "reports")
    html_path = paths["html"]
    url = html_path.resolve().as_uri()

    result = inspect(url, tmp_path / "profile-cdp")
    assert result["errors"] == [], result["errors"]
    assert result["external"] == [], result["external"]
    assert result["n_scripts"] == 0
    assert result["images_ok"] is True
    n_figures = html_path.read_text().count('src="data:image/png;base64,')
    assert result["n_images"] == n_figures
    if source == "fixture":
        assert n_figures == 6 and result["tables"] >= 10

    shot = tmp_path / f"report-{source}.png"
    screenshot(url, shot, tmp_path / "profile-shot")
    assert shot.read_bytes().startswith(b"\x89PNG")
    keep = os.environ.get("SPECBENCH_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)
    if source == "fixture":
        from matplotlib.image import imread

        img = (imread(io.BytesIO(shot.read_bytes()), format="png")[..., :3] * 255).round().astype(int)
        eagle_blue = np.array([0x1F, 0x77, 0xB4])
        assert int((np.abs(img - eagle_blue).sum(axis=-1) <= 8).sum()) > 500, "figures do not show"


def _fixture_history(tmp_path: Path) -> str:
    """A history of six copies of the fixture run, τ of one group 10% lower in the last two (a step)."""
    from specbench.regression.history import History

    db = f"sqlite:///{tmp_path / 'history.sqlite'}"
    with History(db) as hist:
        for i in range(6):
            summary = json.loads((FIXTURES / "summary_full.json").read_text())
            manifest = json.loads((FIXTURES / "manifest_full.json").read_text())
            summary["run_id"] = manifest["run_id"] = f"2026050{i + 1}T120000Z-r{i}"
            manifest["created_at"] = f"2026-05-0{i + 1}T12:00:00+00:00"
            for g in summary["groups"]:
                if g["group_id"] == "llama-3.1-8b/eagle3/gsm8k/T0/b1" and i >= 4:
                    g["tau"].update({k: g["tau"][k] * 0.9 for k in ("value", "ci_low", "ci_high")})
            d = tmp_path / "runs" / summary["run_id"]
            d.mkdir(parents=True)
            (d / "summary.json").write_text(json.dumps(summary))
            (d / "manifest.json").write_text(json.dumps(manifest))
            hist.add_run(d)
    return db


def trend_sources() -> list[str]:
    return ["fixture"] + (["db"] if os.environ.get("SPECBENCH_HISTORY_DB") else [])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("source", trend_sources())
def test_trend_page_in_chromium(source: str, tmp_path: Path) -> None:
    """``specbench trend``'s HTML: no console errors, nothing external, no script, every figure decoded."""
    from specbench.regression.history import History
    from specbench.report.trend import write_trend

    db = _fixture_history(tmp_path) if source == "fixture" else os.environ["SPECBENCH_HISTORY_DB"]
    with History(db) as hist:
        pages = write_trend(hist, tmp_path / "trend")
    assert pages
    for name, paths in pages.items():
        html_path = paths["html"]
        result = inspect(html_path.resolve().as_uri(), tmp_path / f"profile-{name}")
        assert result["errors"] == [], result["errors"]
        assert result["external"] == [], result["external"]
        assert result["n_scripts"] == 0
        assert result["images_ok"] is True
        n_figures = html_path.read_text().count('src="data:image/png;base64,')
        assert result["n_images"] == n_figures > 0
        if source == "fixture":
            assert n_figures == 12 and result["tables"] == 14  # latest changes, runs, one per group
            assert "REGRESSION" in html_path.read_text()
            shot = tmp_path / f"trend-{name}.png"
            screenshot(html_path.resolve().as_uri(), shot, tmp_path / f"profile-shot-{name}")
            keep = os.environ.get("SPECBENCH_SCREENSHOT_DIR")
            if keep:
                Path(keep).mkdir(parents=True, exist_ok=True)
                shutil.copy(shot, Path(keep) / shot.name)
            assert shot.read_bytes().startswith(b"\x89PNG")
            # the stepped group's figure marks the first run of the worse level in red
            import base64
            import re

            from matplotlib.image import imread

            src = re.search(r'alt="llama-3.1-8b/eagle3/gsm8k/T0/b1 over runs" src="data:image/png;base64,([^"]+)"',
                            html_path.read_text())
            assert src is not None
            img = (imread(io.BytesIO(base64.b64decode(src.group(1))), format="png")[..., :3] * 255).round().astype(int)
            red = np.array([0xD6, 0x27, 0x28])
            assert int((np.abs(img - red).sum(axis=-1) <= 8).sum()) > 30, "the regression marker does not show"
