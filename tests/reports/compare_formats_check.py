"""compare_formats_check.py: `bpbench compare`'s CI formats read back by the parsers CI systems use.
ctest's "compare_formats" runs it.

usage: compare_formats_check.py BPBENCH BASE_RESULTS.json

Makes NEW from BASE here (never through bpbench): one cell's peak up by 1 byte, one cell out of memory, one
cell gone. Then runs `bpbench compare BASE NEW --junit --markdown --benchmark-json --html` and checks:
  - the exit status is the 3 regressions;
  - JUnit (xml.etree.ElementTree): the counts of tests and failures add up; the peak's failure names both
    exact byte counts and the tolerance; the oom and the missing cell fail in the status suite, and nothing
    else fails;
  - the benchmark JSON: github-action-benchmark's fields and types, one peak entry per ok cell of NEW with
    its bytes, the raised peak as raised;
  - the markdown: a heading with the verdict, one table row per cell of BASE, the regressions in bold;
  - the HTML page: the same rows, in a sortable table.
Exit status: 0 passed; 1 a check failed (each on stderr).
"""
import copy
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

failures: list[str] = []


def expect(ok: bool, what: str) -> None:
    if not ok:
        failures.append(what)


def grid_cells(doc: dict[str, Any]) -> list[int]:
    """Indices of cells measured with a peak, not max-length searches."""
    return [i for i, c in enumerate(doc["cells"]) if c.get("status") == "ok" and "max_seq_len" not in c
            and (c.get("memory") or {}).get("peak_bytes") is not None]


def markdown_rows(text: str) -> list[list[str]]:
    """The table's body rows, split into cells (the header and the alignment row dropped)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines[2:]]


def check_junit(root: ET.Element, cells: int, base_peak: int) -> None:
    suites = {str(s.get("name")).rsplit(".", 1)[-1]: s for s in root.iter("testsuite")}
    total = sum(len(s.findall("testcase")) for s in suites.values())
    # (metric, the failure's message) of every failed testcase
    failed = [(metric, str(f.get("message", ""))) for metric, s in suites.items()
              for c in s.findall("testcase") for f in c.findall("failure")]
    expect(root.tag == "testsuites" and int(root.get("tests", -1)) == total,
           f"<testsuites tests={root.get('tests')}> but {total} testcases")
    expect(int(root.get("failures", -1)) == len(failed) == 3,
           f"failures={root.get('failures')}, {len(failed)} failed testcases, expected 3")
    expect(len(suites["status"].findall("testcase")) == cells, "the status suite has not a testcase per cell")
    expect(sorted(m for m, _ in failed) == ["peak_bytes", "status", "status"], f"failed: {failed}")
    for metric, message in failed:
        if metric == "peak_bytes":
            for needed in (f"({base_peak} B)", f"({base_peak + 1} B)", "tolerance +0%"):
                expect(needed in message, f"the peak's failure {message!r} lacks {needed!r}")
    status = " ".join(message for metric, message in failed if metric == "status")
    expect("became oom: out of memory <in> \"a\" & 'b'" in status and "only in BASE" in status,
           f"status failures {status!r}")


def main(argv: list[str]) -> int:
    bpbench, base_path = argv[0], Path(argv[1])
    base = json.loads(base_path.read_text())
    measured = grid_cells(base)
    if len(measured) < 3:
        print(f"compare_formats_check: {base_path} has {len(measured)} measured cells, 3 needed",
              file=sys.stderr)
        return 1
    raised, oom, gone = measured[0], measured[1], measured[2]
    now = copy.deepcopy(base)
    now["cells"][raised]["memory"]["peak_bytes"] += 1
    now["cells"][oom]["status"] = "oom"
    now["cells"][oom]["reason"] = "out of memory <in> \"a\" & 'b'"  # XML's five specials, escaped
    del now["cells"][gone]
    base_peak = base["cells"][raised]["memory"]["peak_bytes"]

    with tempfile.TemporaryDirectory(prefix="bpbench-compare-formats-") as tmp:
        work = Path(tmp)
        (work / "new.json").write_text(json.dumps(now))
        out = {k: work / f"compare.{k}" for k in ("xml", "md", "json", "html")}
        command = [bpbench, "compare", str(base_path), str(work / "new.json"), "--junit", str(out["xml"]),
                   "--markdown", str(out["md"]), "--benchmark-json", str(out["json"]),
                   "--html", str(out["html"])]
        run = subprocess.run(command, capture_output=True, text=True)
        expect(run.returncode == 3, f"exit status {run.returncode}, expected 3 regressions: {run.stderr}")

        # JUnit.
        check_junit(ET.parse(out["xml"]).getroot(), len(base["cells"]), base_peak)

        # github-action-benchmark's customSmallerIsBetter.
        entries = json.loads(out["json"].read_text())
        expect(isinstance(entries, list) and entries != [], "the benchmark JSON is not a list of entries")
        for e in entries:
            expect(isinstance(e.get("name"), str) and e.get("unit") in ("bytes", "s")
                   and isinstance(e.get("value"), (int, float)), f"a malformed entry {e}")
        peaks = [e for e in entries if e.get("unit") == "bytes"]
        expect(len(peaks) == len(grid_cells(now)), f"{len(peaks)} peaks for {len(grid_cells(now))} cells")
        expect(len({e["name"] for e in entries}) == len(entries), "benchmark names repeat")
        expect(base_peak + 1 in [e["value"] for e in peaks], "the raised peak is not among the entries")

        # The markdown summary.
        md = out["md"].read_text()
        expect(md.startswith("## bpbench compare: 3 regressions\n"), f"the markdown starts {md[:60]!r}")
        rows = markdown_rows(md)
        expect(len(rows) == len(base["cells"]), f"{len(rows)} markdown rows for {len(base['cells'])} cells")
        worse = [r for r in rows if "**worse**" in r or "**missing**" in r]
        expect(len(worse) == 3, f"{len(worse)} rows marked as regressions, expected 3")

        # The HTML page.
        html = out["html"].read_text()
        table = html.partition('<table class="bp-table">')[2].partition("</table>")[0]
        expect(table.count("<tr>") == len(base["cells"]) + 1,  # the heading's row too
               f"the HTML page's table has {table.count('<tr>')} rows for {len(base['cells'])} cells")

    for f in failures:
        print(f"compare_formats_check: FAIL: {f}", file=sys.stderr)
    if not failures:
        print(f"compare_formats_check: JUnit, markdown, benchmark JSON and HTML of {len(base['cells'])} "
              "cells read back")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
