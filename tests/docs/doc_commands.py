"""doc_commands.py: the commands pasted in README.md and docs/*.md, run again and compared with the output
pasted under them (the practice of Python's doctest, Rust's doc tests and Mercurial's cram tests). ctest's
"docs_commands" runs it on the tree; "docs_commands_refuses" on planted drifts.

usage: doc_commands.py --bpbench PATH --root DIR [PAGE.md ...]   (default: README.md and docs/*.md)

A doc test is a fenced block whose first line starts with "$ ": each "$ " line is a command (a line ending in
"\\" continues it), and the lines up to the next "$ " are what it prints, stdout and stderr together as a
terminal shows them. The commands run with bash in a scratch directory that mirrors the repository (its
folders linked, so `--out out/x` writes there, not into the tree), `bpbench` and `build/bpbench` being the
binary under test. The comparison is exact, line by line, trailing spaces aside, except where the page marks:
  - "…" in an output line stands for any text (a time, the last digits of an error: what varies by machine);
    in such a line runs of spaces and of dashes match any run, since a wider value widens its column;
  - a line that is only "…" stands for any number of lines (an output shown in part).
An HTML comment on the line above the block, `<!-- doc-test: skip: REASON -->`, skips it (a GPU, minutes of
run time, the network), and this script prints the reason. A mismatch names the page, the line of the command
and the first line that differs.

A list of names in prose comes from its registry: `<!-- doc-list: COMMAND -->TEXT<!-- /doc-list -->` (the
comments invisible on the page) holds what COMMAND prints, `bpbench list families --names` say, spaces and
line breaks aside; a family added or removed that the page does not follow fails here. Prose that explains
each name in turn is `<!-- doc-names: COMMAND -->TEXT<!-- /doc-names -->`: every name COMMAND prints
(comma-separated) must appear in TEXT as a word, so a new grid key the paragraph does not explain fails. A
table after `<!-- doc-files: GLOB [except PATH ...] -->` names every file GLOB matches, by its path, its name
within its folder, or a glob of either in backquotes (`scenarios/h100_*.json`): a file the table leaves out
fails.
And no sentence of prose (tables and code aside) names most of a registry by hand: five families, six
strategies, all three objectives or five GPUs outside a doc-list fail, since a new entry would not reach them.
Exit status: 0 every doc test passed; 1 one failed (each on stderr); 2 bad arguments.
"""
import argparse
import fnmatch
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ELLIPSIS = "…"
SKIP = re.compile(r"<!--\s*doc-test:\s*skip:\s*(.+?)\s*-->")
DOC_FILES = re.compile(r"<!--\s*doc-files:\s*(\S+)(?:\s+except\s+(.+?))?\s*-->")
DOC_NAMES = re.compile(r"<!--\s*doc-names:\s*(.+?)\s*-->(.*?)<!--\s*/doc-names\s*-->", re.DOTALL)
DOC_LIST = re.compile(r"<!--\s*doc-list:\s*(.+?)\s*-->(.*?)<!--\s*/doc-list\s*-->", re.DOTALL)
COMMAND_TIMEOUT_S = 120


@dataclass
class Command:
    line: int  # 1-based line of the "$ " in its page
    text: str
    expected: list[str] = field(default_factory=list)


@dataclass
class Block:
    page: Path
    line: int  # the fence's line
    commands: list[Command]
    skip: str = ""


def blocks_of(page: Path) -> list[Block]:
    lines = page.read_text().split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        body = lines[i + 1:end]
        if body and body[0].startswith("$ "):
            skip = SKIP.search(lines[i - 1]) if i > 0 else None
            commands: list[Command] = []
            k = 0
            while k < len(body):
                if body[k].startswith("$ "):
                    text, first = body[k][2:], k
                    while text.endswith("\\") and k + 1 < len(body):
                        k += 1
                        text = text[:-1] + " " + body[k].strip()
                    commands.append(Command(i + 2 + first, text))
                else:
                    commands[-1].expected.append(body[k])
                k += 1
            blocks.append(Block(page, i + 1, commands, skip.group(1) if skip else ""))
        i = end + 1
    return blocks


def line_pattern(expected: str) -> re.Pattern[str]:
    """An output line with "…" as a pattern: "…" any text, runs of spaces or dashes any such run."""
    parts = []
    for piece in re.split(r"(…| +|-{2,})", expected.rstrip()):
        if piece == ELLIPSIS:
            parts.append(".*?")
        elif piece.startswith(" ") and piece.strip() == "":
            parts.append(" +")
        elif piece.startswith("--"):
            parts.append("-+")
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts) + r"\s*")


def first_difference(expected: list[str], actual: list[str]) -> str:
    """"" when the output matches, else which line differs and how."""
    def matches(e: str, a: str) -> bool:
        if ELLIPSIS in e:
            return line_pattern(e).fullmatch(a) is not None
        return e.rstrip() == a.rstrip()

    def walk(ei: int, ai: int) -> tuple[int, int] | None:
        """None where expected[ei:] matches actual[ai:], else the furthest (ei, ai) reached."""
        while ei < len(expected):
            if expected[ei].strip() == ELLIPSIS:  # any number of lines
                if ei + 1 == len(expected):
                    return None
                best = (ei, ai)
                for skip_to in range(ai, len(actual) + 1):
                    r = walk(ei + 1, skip_to)
                    if r is None:
                        return None
                    best = max(best, r)
                return best
            if ai >= len(actual) or not matches(expected[ei], actual[ai]):
                return (ei, ai)
            ei, ai = ei + 1, ai + 1
        return None if ai == len(actual) else (ei, ai)

    while expected and expected[-1].strip() == "":
        expected = expected[:-1]
    while actual and actual[-1].strip() == "":
        actual = actual[:-1]
    at = walk(0, 0)
    if at is None:
        return ""
    ei, ai = at
    want = expected[ei] if ei < len(expected) else "(the end of the output)"
    got = actual[ai] if ai < len(actual) else "(the end of the output)"
    return f"output line {ai + 1} differs:\n    expected: {want}\n    actual:   {got}"


def scratch(root: Path, bpbench: Path, into: Path) -> dict[str, str]:
    """A directory that mirrors the repository, and the environment the commands run in."""
    for entry in root.iterdir():
        if entry.name not in ("build", "out", ".git"):
            (into / entry.name).symlink_to(entry)
    (into / "build").mkdir()
    (into / "build" / "bpbench").symlink_to(bpbench)
    env = dict(os.environ)
    env["PATH"] = f"{into / 'build'}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "110"
    return env


def run_block(block: Block, cwd: Path, env: dict[str, str]) -> list[str]:
    failures = []
    for c in block.commands:
        try:
            run = subprocess.run(["bash", "-c", c.text], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, timeout=COMMAND_TIMEOUT_S)
            actual = run.stdout.split("\n")
        except subprocess.TimeoutExpired:
            failures.append(f"{block.page}:{c.line}: `{c.text}` ran past {COMMAND_TIMEOUT_S} s (mark the "
                            "block <!-- doc-test: skip: REASON -->)")
            continue
        difference = first_difference(c.expected, actual)
        if difference:
            failures.append(f"{block.page}:{c.line}: `{c.text}`: {difference}")
    return failures


def regions(pattern: re.Pattern[str], text: str) -> list[tuple[int, str, str]]:
    """(line, command, enclosed text) of each region of a directive; one written in code (the syntax shown, as
    docs/development.md does) is not a region."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)) for m in pattern.finditer(text)
            if text[max(0, m.start() - 1)] != "`"]


def check_lists(page: Path, shown: Path, cwd: Path, env: dict[str, str]) -> tuple[int, list[str]]:
    """Every doc-list and doc-names region of a page against its command's output: (regions, failures)."""
    text, failures = page.read_text(), []

    def run(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S)

    lists, names = regions(DOC_LIST, text), regions(DOC_NAMES, text)
    for line, command, enclosed in lists:
        out = run(command)
        want, got = " ".join(enclosed.split()), " ".join(out.stdout.split())
        if out.returncode != 0 or want != got:
            failures.append(f"{shown}:{line}: the list is not what `{command}` prints:\n"
                            f"    page:     {want}\n    registry: {got or out.stderr.strip()}")
    for line, command, enclosed in names:
        out = run(command)
        printed = [n.strip() for n in out.stdout.split(",") if n.strip()]
        missing = [n for n in printed if not re.search(r"(?<![\w-])" + re.escape(n) + r"(?![\w-])", enclosed)]
        if out.returncode != 0 or not printed or missing:
            failures.append(f"{shown}:{line}: the text leaves out what `{command}` names: "
                            f"{', '.join(missing) or out.stderr.strip()}")
    return len(lists) + len(names), failures


def check_files(page: Path, shown: Path, root: Path) -> tuple[int, list[str]]:
    """Every doc-files table of a page against the files its glob matches: (tables checked, failures)."""
    lines, failures, count = page.read_text().split("\n"), [], 0
    for at, line in enumerate(lines):
        m = DOC_FILES.search(line)
        if not m:
            continue
        count += 1
        table = []
        for row in lines[at + 1:]:
            if not row.startswith("|"):
                break
            table.append(row)
        named = [n for row in table for n in re.findall(r"`([^`]+)`", row.split("|")[1])]
        excepted = set((m.group(2) or "").split())
        for f in sorted(root.glob(m.group(1))):
            path = f.relative_to(root).as_posix()
            if path in excepted:
                continue
            inner = path.split("/", 1)[1] if "/" in path else path
            if not any(fnmatch.fnmatch(path, n) or fnmatch.fnmatch(inner, n) or
                       fnmatch.fnmatch(f.name, n) for n in named):
                failures.append(f"{shown}:{at + 1}: the table leaves out {path}")
    return count, failures


# The registries a hand-kept list would copy, and how many of one registry's names in one sentence make one.
HAND_KEPT = {"families": 5, "impls": 6, "objectives": 3, "gpus": 5}


def check_hand_kept(page: Path, shown: Path, names: dict[str, list[str]]) -> list[str]:
    """Sentences of prose (code, tables and doc-list regions blanked) naming many of a registry's names."""
    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    text = DOC_LIST.sub(blank, page.read_text())
    text = re.sub(r"```.*?```", blank, text, flags=re.DOTALL)
    text = "\n".join(" " * len(line) if line.lstrip().startswith("|") else line for line in text.split("\n"))
    failures = []
    for sentence in re.finditer(r"[^.]*(?:\.(?!\s)[^.]*)*\.", text):
        for registry, threshold in HAND_KEPT.items():
            found = [n for n in names[registry]
                     if re.search(r"(?<![\w-])" + re.escape(n) + r"(?![\w-])", sentence.group(0))]
            if len(found) >= threshold:
                start = sentence.start() + len(sentence.group(0)) - len(sentence.group(0).lstrip())
                line = text.count("\n", 0, start) + 1
                failures.append(f"{shown}:{line}: a hand-kept list of {registry} ({', '.join(found)}): "
                                f"quote `bpbench list {registry} --names` in a doc-list")
    return failures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bpbench", required=True, type=Path)
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("pages", nargs="*", type=Path)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    pages = args.pages or [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    if not args.bpbench.is_file():
        print(f"doc_commands: no binary at {args.bpbench}", file=sys.stderr)
        return 2
    blocks = [b for p in pages for b in blocks_of(p)]
    failures: list[str] = []
    ran = skipped = lists = 0
    with tempfile.TemporaryDirectory(prefix="bpbench-docs-") as tmp:
        env = scratch(root, args.bpbench.resolve(), Path(tmp))
        names = {r: subprocess.run([str(args.bpbench), "list", r, "--names"], capture_output=True, text=True,
                                   check=True).stdout.strip().split(", ") for r in HAND_KEPT}
        for p in pages:
            failures += check_hand_kept(p, Path(os.path.relpath(p, root)), names)
            checked, wrong = check_lists(p, Path(os.path.relpath(p, root)), Path(tmp), env)
            tables, missing = check_files(p, Path(os.path.relpath(p, root)), root)
            lists += checked + tables
            failures += wrong + missing
        for b in blocks:
            where = os.path.relpath(b.page, root)
            b.page = Path(where)
            if b.skip:
                skipped += 1
                print(f"doc_commands: skipped {where}:{b.line}: {b.skip}")
                continue
            ran += 1
            failures += run_block(b, Path(tmp), env)
    for f in failures:
        print(f"doc_commands: FAIL: {f}", file=sys.stderr)
    commands = sum(len(b.commands) for b in blocks if not b.skip)
    print(f"doc_commands: {ran} blocks run ({commands} commands), {skipped} skipped, {lists} lists and "
          f"tables checked against their registries, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
