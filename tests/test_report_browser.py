"""The report in a real browser: headless Chromium draws it, every figure has a size on the page, every
navigation link leads to an element of the page, and the first screen holds the candidate table.

Skipped when no Chromium is installed (``make browser`` installs Debian's); with
``GWBATCH_REQUIRE_BROWSER=1`` (CI) a missing browser fails instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from gwbatch.report import write_report
from tests.test_report import FIGURE_IDS, rich_inputs

WIDTH, HEIGHT = 1280, 6000  # the screenshot's window: from the title down to the skymaps
TIMEOUT = 60  # seconds for each browser run
MIN_FIGURE_PX = 100

FIRST_SCREEN = (1280, 800)  # the window in which the candidate table must start

# Written into a copy of the report: on load, each figure's and each SVG's id (an SVG's is its figure's)
# and rendered size, one per line, then each navigation link's target and whether an element has that id,
# and the top of the candidate table (px from the page's top), in <pre id="layout">, which --dump-dom prints.
LAYOUT_SCRIPT = """<script>
window.addEventListener("load", function () {
  var lines = [];
  document.querySelectorAll("figure, svg").forEach(function (el) {
    var fig = el.tagName.toLowerCase() === "figure" ? el : el.closest("figure");
    var box = el.getBoundingClientRect();
    lines.push([el.tagName.toLowerCase(), (fig && fig.id) || "-", box.width.toFixed(1), box.height.toFixed(1)].join(" "));
  });
  document.querySelectorAll("nav a").forEach(function (a) {
    var id = a.getAttribute("href").slice(1);
    var target = document.getElementById(id);
    lines.push(["nav", id, target ? "found" : "missing", target ? target.getBoundingClientRect().height.toFixed(1) : "0"].join(" "));
  });
  var table = document.querySelector("#candidates table");
  lines.push(["candidates-table", "-", table ? (table.getBoundingClientRect().top + window.scrollY).toFixed(1) : "none", "0"].join(" "));
  var pre = document.createElement("pre");
  pre.id = "layout";
  pre.textContent = lines.join("\\n");
  document.body.appendChild(pre);
});
</script>
"""


def find_browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture(scope="module")
def browser() -> str:
    found = find_browser()
    if found is None:
        reason = ("no Chromium found on PATH (chromium, chromium-browser or google-chrome); "
                  "`make browser` installs Debian's as root")
        if os.environ.get("GWBATCH_REQUIRE_BROWSER") == "1":
            pytest.fail(f"GWBATCH_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    return found


def run_browser(browser: str, profile, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium with a throw-away profile and nothing fetched from the network."""
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", "--hide-scrollbars", "--force-device-scale-factor=1", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, f"{' '.join(command)} exited {result.returncode}:\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A report with every figure: the unit tests' synthetic inputs plus time series, skymaps, GPU
    utilisation, member searches and injections with hrss and skymap credible levels."""
    directory = tmp_path_factory.mktemp("browser")
    return write_report(directory / "report.html", **rich_inputs())


def test_screenshot_is_drawn(browser, report, tmp_path):
    import matplotlib.image

    png = tmp_path / "report.png"
    run_browser(browser, tmp_path / "profile", f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={png}",
                report.as_uri())
    image = matplotlib.image.imread(png)
    assert image.shape[:2] == (HEIGHT, WIDTH)
    rgb = np.round(image[..., :3] * 255).astype(np.uint8)
    assert rgb.std() > 20, "the screenshot is (nearly) blank"
    packed = (rgb[..., 0].astype(np.uint32) << 16) | (rgb[..., 1].astype(np.uint32) << 8) | rgb[..., 2]
    colours = np.unique(packed).size
    assert colours > 1000, f"only {colours} distinct colours: text and figures were not drawn"
    # not all white: the page's ink (text, tables, figures) covers a fair part of it
    assert (rgb.min(axis=2) < 200).mean() > 0.02


def layout(browser, report, tmp_path, width: int, height: int) -> list[tuple[str, str, str, str]]:
    """The layout script's lines (kind, id, two values) for ``report`` drawn in a ``width`` x ``height`` window."""
    page = tmp_path / f"layout-{height}.html"
    text = report.read_text(encoding="utf-8")
    assert text.count("</body>") == 1
    page.write_text(text.replace("</body>", LAYOUT_SCRIPT + "</body>"), encoding="utf-8")
    result = run_browser(browser, tmp_path / "profile", f"--window-size={width},{height}",
                         "--virtual-time-budget=5000", "--dump-dom", page.as_uri())
    match = re.search(r'<pre id="layout">(.*?)</pre>', result.stdout, re.S)
    assert match, "the layout script did not run:\n" + result.stdout[-2000:]
    return [tuple(line.split()) for line in match.group(1).strip().splitlines()]


@pytest.fixture(scope="module")
def first_screen(browser, report, tmp_path_factory):
    return layout(browser, report, tmp_path_factory.mktemp("first-screen"), *FIRST_SCREEN)


def test_every_figure_has_a_size(first_screen):
    sizes = {(tag, fig_id): (float(w), float(h)) for tag, fig_id, w, h in first_screen if tag in ("figure", "svg")}
    for fig_id in FIGURE_IDS:
        for tag in ("figure", "svg"):
            assert (tag, fig_id) in sizes, f"no {tag} for {fig_id} on the page"
            width, height = sizes[(tag, fig_id)]
            assert width > MIN_FIGURE_PX and height > MIN_FIGURE_PX, f"{tag} {fig_id} is {width} x {height} px"


def test_navigation_links_resolve(first_screen, report):
    """Every link of the navigation bar leads to a section on the page that has a height."""
    nav = [(target, found, float(height)) for tag, target, found, height in first_screen if tag == "nav"]
    assert [t for t, _, _ in nav][:2] == ["candidates", "details"] and len(nav) >= 10  # one search: no "searches"
    for target, found, height in nav:
        assert found == "found" and height > 0, f"navigation link #{target}: {found}, {height} px"


def test_first_screen_holds_the_candidate_table(first_screen):
    (top,) = [float(value) for tag, _, value, _ in first_screen if tag == "candidates-table"]
    assert 0 < top < FIRST_SCREEN[1] - 200, f"the candidate table starts {top} px down"
