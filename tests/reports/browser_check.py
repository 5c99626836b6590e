"""browser_check.py: opens a bpbench report.html in a real browser (Debian's chromium, headless) and checks
what a reader would see. ctest's "report_browser" runs it through tests/reports/browser_check.sh.

usage: browser_check.py --chromium PATH --html report.html --results results.json [MORE.json ...]
                        [--screenshot OUT.png]
       browser_check.py --chromium PATH --html history.html|compare.html

The browser is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: no port, no package
beyond Python's standard library). Checks, each a failure with its reason:
  - the page loads from file:// with the network emulated offline, and it requests nothing that is not
    file: or data: (a page that fetched a script from a CDN fails here even where the CDN is reachable);
  - no console error, no uncaught exception, no Content-Security-Policy violation;
  - a click on a table's numeric heading sorts its rows by that column's numbers (with their units);
  - the "Cells" table holds one row per cell of the results files, numbered as they are;
  - every figure is an SVG with content (paths and points), and none says it could not be drawn; there is
    one timeline per cell that recorded one;
  - a hover over the first timeline's peak shows the innermost phase open at the peak and the peak's exact
    bytes, both computed here from that cell's timeline file, not read from the page;
  - a click on a phase zooms the timeline to that phase;
  - a screenshot is not blank (decoded here: enough colours and ink).
Without --results (a history or compare page) only its figures, its tables and its console are checked.
Exit status: 0 all passed; 1 a check failed (one line per failure on stderr); 2 bad arguments.
"""
import argparse
import base64
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any


class Browser:
    """Chromium headless, spoken to over the DevTools protocol on fds 3 (to it) and 4 (from it)."""

    def __init__(self, chromium: str):
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()
        self._profile = tempfile.TemporaryDirectory(prefix="bpbench-chromium-")

        def child_fds() -> None:
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        args = [chromium, "--headless", "--remote-debugging-pipe", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                "--user-data-dir=" + self._profile.name, "--window-size=1280,1000"]
        if os.geteuid() == 0:
            args.append("--no-sandbox")  # chromium refuses to run as root with its sandbox (CI runs as root)
        self._proc = subprocess.Popen(args + ["about:blank"], pass_fds=(3, 4), preexec_fn=child_fds,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            if time.time() > deadline:
                raise TimeoutError("the browser did not answer in time")
            chunk = os.read(self._from_r, 1 << 20)
            if not chunk:
                err = self._proc.stderr.read().decode(errors="replace")[-600:] if self._proc.stderr else ""
                raise RuntimeError(f"the browser closed its pipe: {err.strip()}")
            self._buf += chunk
        message, self._buf = self._buf.split(b"\0", 1)
        result: dict[str, Any] = json.loads(message)
        return result

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if self.session and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self.session
        os.write(self._to_w, json.dumps(message).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error'].get('message')}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self.events.append(reply)

    def evaluate(self, expression: str) -> Any:
        reply = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                               "awaitPromise": True})
        if "exceptionDetails" in reply:
            raise RuntimeError(f"evaluating in the page failed: {reply['exceptionDetails'].get('text')}")
        return reply["result"].get("value")

    def open_page(self, url: str) -> None:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.call(domain + ".enable")
        offline = {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
        self.call("Network.emulateNetworkConditions", offline)
        screen = {"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": False}
        self.call("Emulation.setDeviceMetricsOverride", screen)
        self.call("Page.navigate", {"url": url})
        deadline = time.time() + 60
        while not self.evaluate("window.bpReady === true"):
            if time.time() > deadline:
                raise TimeoutError("report.js never set window.bpReady (did the script run?)")
            time.sleep(0.1)

    def mouse(self, kind: str, x: float, y: float) -> None:
        params = {"type": kind, "x": x, "y": y, "button": "left" if kind != "mouseMoved" else "none"}
        if kind != "mouseMoved":
            params["clickCount"] = 1
        self.call("Input.dispatchMouseEvent", params)

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._profile.cleanup()


def png_pixels(png: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB(A) rows of an 8-bit PNG, unfiltered (enough of the format for a screenshot)."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    at, idat, width, height, channels = 8, b"", 0, 0, 0
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at:at + 8])
        body = png[at + 8:at + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            if depth != 8 or colour not in (2, 6):
                raise ValueError(f"unexpected PNG depth {depth} colour type {colour}")
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for r in range(height):
        filt, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1:(r + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if filt == 1:
                line[i] = (line[i] + a) & 255
            elif filt == 2:
                line[i] = (line[i] + b) & 255
            elif filt == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif filt == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def innermost_phase(phases: list[dict[str, Any]], t: float) -> str:
    best, depth = "", -1
    for p in phases:
        end = p.get("end_ms", -1)
        if p["begin_ms"] <= t and (end < 0 or t <= end) and p.get("depth", 0) > depth:
            best, depth = p["name"], p.get("depth", 0)
    return best


def cell_timeline(results: list[tuple[Path, dict[str, Any]]], index: int) -> dict[str, Any] | None:
    """The timeline of the index-th cell of the results files taken together (as the report merges them)."""
    for path, doc in results:
        if index >= len(doc["cells"]):
            index -= len(doc["cells"])
            continue
        name = (doc["cells"][index].get("memory") or {}).get("timeline_file")
        if not name:
            return None
        data = json.loads((path.parent / name).read_text())
        timeline: dict[str, Any] = data.get("timeline", data)
        return timeline
    return None


CELL_ROWS = """(() => {
  const h = document.getElementById('cells');
  let e = h && h.nextElementSibling;
  while (e && !(e.classList && e.classList.contains('bp-table-wrap'))) e = e.nextElementSibling;
  return e ? Array.from(e.querySelectorAll('tbody tr')).map((r) => r.cells[0].textContent) : null;
})()"""
FIGURES = """Array.from(document.querySelectorAll('figure.bp-figure')).map((f) => ({
  name: f.dataset.figure, svgs: f.querySelectorAll('svg.bp-chart').length,
  marks: f.querySelectorAll('svg.bp-chart path, svg.bp-chart circle').length,
  error: (f.querySelector('.bp-error') || {}).textContent || ''}))"""
PEAK_MARK = """(() => {
  const c = document.querySelector('svg.bp-timeline .bp-peak');
  c.scrollIntoView({block: 'center'});
  const r = c.getBoundingClientRect();
  return {x: r.left + r.width / 2, y: r.top + r.height / 2};
})()"""
FIRST_PHASE = """(() => {
  const svg = document.querySelector('svg.bp-timeline'), phase = svg.querySelector('.bp-phase');
  const r = phase.getBoundingClientRect();
  return {x: r.left + Math.min(r.width / 2, 20), y: r.top + r.height / 2, before: svg.dataset.domain,
          phase: phase.dataset.phase};
})()"""


NUMERIC_HEADING = """(() => {
  for (const th of document.querySelectorAll('table.bp-table th.num')) {
    const table = th.closest('table');
    if (table.tBodies[0].rows.length < 3) continue;
    th.scrollIntoView({block: 'center'});
    const r = th.getBoundingClientRect();
    table.id = 'bp-sorted';
    return {x: r.left + r.width / 2, y: r.top + r.height / 2, column: th.cellIndex, heading: th.textContent};
  }
  return null;
})()"""
SORTED_COLUMN = """Array.from(document.getElementById('bp-sorted').tBodies[0].rows).map((r) =>
  r.cells[%d].textContent)"""
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "k": 1e3, "ms": 1e-3, "s": 1, "%": 1}


def number_of(text: str) -> float | None:
    """A table cell's leading number with its unit, as a reader compares them ("1.5 MiB" > "900 KiB")."""
    m = re.match(r"\s*\**([-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?)\s*(KiB|MiB|GiB|B|k|ms|s|%)?", text)
    return float(m.group(1).replace(",", "")) * UNITS.get(m.group(2) or "", 1) if m else None


def check_sort(browser: Browser) -> list[str]:
    """A click on the first numeric heading of a table with three rows or more sorts its rows ascending."""
    spot = browser.evaluate(NUMERIC_HEADING)
    if spot is None:
        return ["no table with a numeric column and three rows to sort"]
    browser.mouse("mousePressed", spot["x"], spot["y"])
    browser.mouse("mouseReleased", spot["x"], spot["y"])
    values = [number_of(t) for t in browser.evaluate(SORTED_COLUMN % spot["column"])]
    numbers = [v for v in values if v is not None]
    if numbers != sorted(numbers) or values[:len(numbers)] != numbers:
        return [f"a click on {spot['heading']!r} left its column {values}"]
    return []


def check_cells(browser: Browser, cells: list[dict[str, Any]]) -> list[str]:
    rows = browser.evaluate(CELL_ROWS)
    if rows is None:
        return ["no \"Cells\" table after the heading #cells"]
    if rows != [f"#{i}" for i in range(len(cells))]:
        return [f"the Cells table has rows {rows[:6]}... ({len(rows)}), expected #0..#{len(cells) - 1}"]
    return []


def check_figures(browser: Browser, cells: list[dict[str, Any]] | None) -> list[str]:
    failures = []
    figures = browser.evaluate(FIGURES)
    if not figures and cells is not None:
        failures.append("the page has no figure")
    for f in figures:
        if f["error"] or f["svgs"] == 0 or f["marks"] < 3:
            failures.append(f"figure {f['name']}: {f['svgs']} SVGs, {f['marks']} marks {f['error']}".strip())
    if cells is None:
        return failures
    with_timeline = sum(1 for c in cells if (c.get("memory") or {}).get("timeline_file"))
    drawn = browser.evaluate("document.querySelectorAll('svg.bp-timeline').length")
    if drawn != with_timeline:
        failures.append(f"{drawn} timelines drawn, {with_timeline} cells recorded one")
    return failures


def check_hover(browser: Browser, timeline: dict[str, Any]) -> list[str]:
    """The tooltip at the first timeline's peak: its innermost phase and exact bytes, both from the file."""
    peak = max(timeline["points"], key=lambda p: p["live"])  # the first of equals, as bpbench takes it
    phase = innermost_phase(timeline.get("phases", []), peak["t_ms"])
    exact = f"{peak['live']:,} B"
    spot = browser.evaluate(PEAK_MARK)
    browser.mouse("mouseMoved", spot["x"], spot["y"] + 40)  # below the marker, over the areas
    browser.mouse("mouseMoved", spot["x"], spot["y"] + 30)
    tip = browser.evaluate("(document.getElementById('bp-tip') || {}).innerText || ''")
    if f"phase: {phase}" not in tip or exact not in tip:
        return [f"hovering the peak shows {tip!r}; expected the phase {phase!r} and {exact}"]
    return []


def check_screenshot(browser: Browser, path: Path) -> list[str]:
    shot = base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"})["data"])
    path.write_bytes(shot)
    width, height, pixel_rows = png_pixels(shot)
    colours: set[bytes] = set()
    ink = sampled = 0
    for row in pixel_rows[::4]:  # every 4th pixel of every 4th row
        step = len(row) // width
        for i in range(0, len(row), step * 4):
            colours.add(row[i:i + 3])
            ink += row[i:i + 3] != b"\xff\xff\xff"
            sampled += 1
    if len(colours) < 20 or ink < sampled * 0.05:
        return [f"the screenshot looks blank: {len(colours)} colours, {ink} of {sampled} pixels not white"]
    return []


def check_zoom(browser: Browser, timeline: dict[str, Any]) -> list[str]:
    spot = browser.evaluate(FIRST_PHASE)
    browser.mouse("mousePressed", spot["x"], spot["y"])
    browser.mouse("mouseReleased", spot["x"], spot["y"])
    after = browser.evaluate("document.querySelector('svg.bp-timeline').dataset.domain")
    begins = [p["begin_ms"] for p in timeline.get("phases", []) if p["name"] == spot["phase"]]
    if after == spot["before"] or not begins or abs(float(after.split(",")[0]) - begins[0]) > 1e-3:
        return [f"a click on the phase {spot['phase']!r} left the timeline at {after} (was {spot['before']})"]
    return []


def check_events(events: list[dict[str, Any]]) -> list[str]:
    """Console errors, uncaught exceptions, the browser's own errors (CSP) and requests off the file."""
    failures = []
    for e in events:
        method, params = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            failures.append(f"console error: {args[:300]}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            what = details.get("exception", {}).get("description", details.get("text"))
            failures.append(f"uncaught exception: {what}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            failures.append(f"browser error: {params['entry'].get('text', '')[:300]}")
        elif method == "Network.requestWillBeSent":
            url = params.get("request", {}).get("url", "")
            if not url.startswith(("file:", "data:")):
                failures.append(f"the page requested {url[:200]}")
    return failures


def check(browser: Browser, html: Path, results: list[tuple[Path, dict[str, Any]]],
          screenshot: Path | None) -> list[str]:
    browser.open_page(html.resolve().as_uri())
    cells = [c for _, doc in results for c in doc["cells"]]
    failures = check_figures(browser, cells if results else None)
    if not results:  # a history or compare page: its figures, its tables and its console only
        return failures + check_sort(browser) + check_events(browser.events)
    failures += check_cells(browser, cells) + check_sort(browser)  # the rows in the results' order first
    # The page's first timeline (the cell report.md shows), read here from that cell's own file.
    shown = browser.evaluate("(document.querySelector('svg.bp-timeline') || {dataset: {}}).dataset.cell")
    timeline = cell_timeline(results, int(shown)) if shown is not None else None
    if timeline is None:
        failures.append(f"the page's first timeline is of cell {shown}, which has no timeline file")
    else:
        failures += check_hover(browser, timeline)
        if screenshot is not None:  # with the tooltip showing, as a reader would see it
            failures += check_screenshot(browser, screenshot)
        failures += check_zoom(browser, timeline)
    time.sleep(0.3)  # late console messages
    browser.evaluate("0")
    return failures + check_events(browser.events)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", required=True)
    parser.add_argument("--html", required=True, type=Path)
    parser.add_argument("--results", nargs="+", type=Path, default=[],
                        help="the page's results files (report.html); none for history.html or compare.html")
    parser.add_argument("--screenshot", type=Path)
    args = parser.parse_args(argv)
    try:
        results = [(p, json.loads(p.read_text())) for p in args.results]
    except (OSError, ValueError) as e:
        print(f"browser_check: cannot read the results: {e}", file=sys.stderr)
        return 2
    if not args.html.is_file():
        print(f"browser_check: no such page: {args.html}", file=sys.stderr)
        return 2
    browser = Browser(args.chromium)
    try:
        failures = check(browser, args.html, results, args.screenshot)
    except (RuntimeError, TimeoutError, OSError, KeyError, TypeError) as e:
        failures = [f"{type(e).__name__}: {e}"]
    finally:
        browser.close()
    for f in failures:
        print(f"browser_check: FAIL: {f}", file=sys.stderr)
    if not failures:
        print(f"browser_check: {args.html} passed in {Path(args.chromium).name}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
