"""The dashboard of a real (tiny) run, as headless Chromium draws it.

Set DASHBOARD_SCREENSHOT=/some/file.png to keep the screenshot and look at it.
"""
import html.parser
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from tests.cli_runner import in_process
from tests.conftest import TINY_OVERRIDES, missing_tool

INSTALL = "apt-get install -y --no-install-recommends chromium"
WIDTH, HEIGHT = 1400, 2000


def chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)
    if path is None:
        missing_tool("chromium", f"headless Chromium is needed for this test; install it with `{INSTALL}`")
    return path


def screenshot(page: Path, png: Path, profile: Path) -> None:
    """Chromium's flags that work as root in a container, with no network and a fresh profile."""
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
           f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={png}", page.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert png.is_file(), f"chromium wrote no screenshot (exit {proc.returncode}):\n{proc.stderr[-3000:]}"


class PageParts(html.parser.HTMLParser):
    """Charts (with their axis titles and tick labels) and round blocks of a dashboard page."""

    def __init__(self):
        super().__init__()
        self.charts, self.captions, self.rounds, self.open_rounds = [], [], [], []
        self._text_class = None
        self._in_caption = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self.charts.append({"viewBox": a.get("viewbox"), "axis-title": [], "xtick": [], "ytick": []})
        elif tag == "text" and self.charts:
            self._text_class = a.get("class")
        elif tag == "figcaption":
            self._in_caption = True
        elif tag == "details":
            self.rounds.append(a.get("id"))
            if "open" in a:
                self.open_rounds.append(a.get("id"))

    def handle_data(self, data):
        if self._in_caption:
            self.captions.append(data)
        if self._text_class in ("axis-title", "xtick", "ytick"):
            self.charts[-1][self._text_class].append(data)

    def handle_endtag(self, tag):
        if tag == "text":
            self._text_class = None
        elif tag == "figcaption":
            self._in_caption = False


@pytest.mark.slow
def test_dashboard_of_a_real_run_in_chromium(tmp_path, warmup_cache_override):
    run = tmp_path / "run"
    in_process("train", "configs/demo_cpu.yaml", *TINY_OVERRIDES, "train.rounds=2", f"run.dir={run}",
               warmup_cache_override, "run.threads=1")
    page = run / "dashboard.html"  # written by the trainer after the last round

    parts = PageParts()
    parts.feed(page.read_text())
    assert {"Held-out accuracy", "Greedy accuracy per level", "Task difficulty (1 − solve rate)", "Solve rate",
            "Pool", "Validity", "Reward"} <= set(parts.captions)
    assert len(parts.charts) >= 6  # the rest: "no data yet" (this tiny run accepts no task)
    for chart in parts.charts:  # every chart scales with the page and says what its axes are
        assert chart["viewBox"] and len(chart["axis-title"]) == 2 and chart["ytick"]
        assert chart["axis-title"][0] == "round" and set(chart["xtick"]) <= {"0", "1", "2"}
    assert parts.rounds == ["round-2", "round-1"] and parts.open_rounds == ["round-2"]

    png = Path(os.environ.get("DASHBOARD_SCREENSHOT", tmp_path / "dashboard.png"))
    screenshot(page, png, tmp_path / "profile")
    image = Image.open(png).convert("RGB")
    assert image.size == (WIDTH, HEIGHT)
    colours = image.getcolors(maxcolors=WIDTH * HEIGHT)
    assert len(colours) > 50, f"the screenshot is nearly blank ({len(colours)} colours)"
    # Charts span the window: something is drawn in the right quarter, not only at the left.
    right = image.crop((WIDTH * 3 // 4, 0, WIDTH, HEIGHT)).getcolors(maxcolors=WIDTH * HEIGHT)
    assert len(right) > 10, "the right quarter of the page is empty"
