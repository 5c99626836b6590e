#!/usr/bin/env python3
"""check_paths.py: every path the repository's own text names must exist (ctest runs this as "paths").

Usage: python3 scripts/check_paths.py [ROOT]   (ROOT defaults to the repository holding this script)

Two checks over the files git knows (`git ls-files --cached --others --exclude-standard` from ROOT, so files
not yet committed count; skipped: shared/, .venv/, .peers/, build*/, out/, and the data of tests/fixtures/):

  (a) links: every relative Markdown link `[text](target)` or `![alt](target)` in a *.md file, outside code
      blocks, must name a file or folder that exists, relative to the Markdown file; a `#anchor` must be a
      heading of the target (GitHub's slugs). Links with a scheme (https:, mailto:) are not checked.
  (b) paths: every token of any text file that looks like a repository path, one that starts with a top-level
      folder (harness/ impls/ profiles/ scenarios/ reports/ tests/ scripts/ docs/ .ci/; also after `$root/`,
      `${CMAKE_SOURCE_DIR}/` or `./`) and ends in a file extension or "/", must exist as a file or a folder.
      Globs and templates pass (a token with *, {}, <>, $ or ..., or a word in capitals such as NAME), as do
      the few paths listed in ALLOWED below (build outputs, the refusal tests' fixture paths).

Each problem is one line, "FILE:LINE: ...", and the exit status is 1 when there is any (0 otherwise).
Standard library only.
"""

import os
import re
import subprocess
import sys

TOP_LEVEL = ("harness", "impls", "profiles", "scenarios", "reports", "tests", "scripts", "docs", ".ci")
SKIPPED_PREFIXES = ("shared/", ".venv/", ".peers/", "build/", "out/", ".data/", ".deps/", ".cache/",
                    "tests/fixtures/")
# What a path token may be prefixed with and still be read from the repository's root.
ROOT_PREFIXES = ("$root/", "${root}/", "$ROOT/", "${ROOT}/", "${CMAKE_SOURCE_DIR}/", "$check_root/",
                 "${check_root}/", "./")
# Paths that are right to name and absent from a clone, each with the one file that may name it (None: any):
# what the build or a run writes, and the paths the checks' own tests name inside the fixture trees they use.
ALLOWED = {
    "harness/run/schema_texts.h": None,  # configured from harness/run/schema_texts.h.in into build/generated/
    "reports/html/html_assets.h": None,  # configured from reports/html/html_assets.h.in, the same way
    "reports/results/h100-sxm/": None,  # scripts/gpu/continue.sh: one folder per GPU it ran on
    "harness/stray.cpp": "tests/check_layers_refuses.sh",  # a file of tests/fixtures/layers
    "impls/streambp.h": "tests/check_layers_refuses.sh",  # what a fixture of tests/fixtures/layers includes
    "harness/nothing.h": "tests/check_paths_refuses.sh",  # the missing path of its own fixture tree
}
# Placeholders written in capitals (impls/NAME.cpp, reports/results/h100/TABLE/): a template, not a path.
PLACEHOLDERS = {"NAME", "TABLE", "DIR", "FILE", "SCRIPT", "GPU", "OUT", "OUT_DIR", "SCENARIO", "N", "NNN",
                "K", "TIME", "RESULTS", "BASE", "NEW", "X", "PEER"}
BINARY_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".pickle", ".pkl", ".gz", ".tgz", ".zip", ".so", ".pt",
                   ".safetensors", ".bin", ".pdf", ".ico")

# A token: path characters, with {..} and <..> groups kept whole (globs and templates).
TOKEN = re.compile(r"(?:[\w.\-/*$~+]|\{[^}\s]*\}|<[\w.\-/ ]*?>)+")
EXTENSION = re.compile(r"\.[A-Za-z0-9]+$")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def tracked_files(root):
    try:
        command = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
        out = subprocess.run(command, cwd=root, capture_output=True, check=True).stdout.decode()
        files = sorted({f for f in out.split("\0") if f})
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (a source tarball): every file
        files = []
        for d, dirs, names in os.walk(root):
            here = os.path.relpath(d, root)
            here = "" if here == "." else here + "/"
            dirs[:] = [x for x in dirs if x != ".git" and not (here + x + "/").startswith(SKIPPED_PREFIXES)]
            files += [here + f for f in names]
        files.sort()
    return [f for f in files
            if not f.startswith(SKIPPED_PREFIXES) and not re.match(r"build[^/]*/", f)
            and os.path.isfile(os.path.join(root, f))]


def read_text(path):
    if path.lower().endswith(BINARY_SUFFIXES):
        return None
    try:
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data:
            return None
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def slug(heading):
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](link) -> text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


_anchor_cache: dict[str, set[str]] = {}


def anchors(path):
    if path not in _anchor_cache:
        found: set[str] = set()
        seen: dict[str, int] = {}
        text = read_text(path) or ""
        in_code = False
        for line in text.splitlines():
            if FENCE.match(line):
                in_code = not in_code
                continue
            m = None if in_code else HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        _anchor_cache[path] = found
    return _anchor_cache[path]


def check_links(root, rel, text, problems):
    in_code = False
    here = os.path.dirname(rel)
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            in_code = not in_code
            continue
        if in_code:
            continue
        line = re.sub(r"`[^`]*`", "", line)  # inline code holds no links
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*:", target):  # https:, mailto:, ...
                continue
            file_part, _, anchor = target.partition("#")
            if file_part:
                resolved = os.path.normpath(os.path.join(here, file_part))
                if resolved.startswith(".."):
                    problems.append(f"{rel}:{number}: link {target} leaves the repository")
                    continue
                full = os.path.join(root, resolved)
                if not os.path.exists(full):
                    problems.append(f"{rel}:{number}: link {target}: {resolved} does not exist")
                    continue
            else:
                full = os.path.join(root, rel)
            if anchor and full.endswith(".md") and os.path.isfile(full) and anchor not in anchors(full):
                shown = os.path.relpath(full, root)
                problems.append(f"{rel}:{number}: link {target}: {shown} has no heading #{anchor}")


def repository_path(token):
    """The repository-relative path a token names, or None when it is no path to check."""
    token = token.rstrip(".")  # the end of a sentence
    for prefix in ROOT_PREFIXES:
        if token.startswith(prefix):
            token = token[len(prefix):]
            break
    first = token.split("/", 1)[0]
    if first not in TOP_LEVEL or "/" not in token:
        return None
    if not (token.endswith("/") or EXTENSION.search(token)):
        return None
    if any(c in token for c in "*{}<>$~") or "..." in token or "//" in token:
        return None  # a glob or a template
    if any(word in PLACEHOLDERS for word in re.split(r"[/._\-]", token)):
        return None
    return token


def allowed(path, rel):
    for name, where in ALLOWED.items():
        if path.startswith(name) and (where in (None, rel) or rel == "scripts/check_paths.py"):
            return True
    return False


def check_paths(root, rel, text, problems):
    markdown = rel.endswith(".md")
    for number, line in enumerate(text.splitlines(), 1):
        for m in TOKEN.finditer(line):
            start = m.start()
            # Part of a longer path (/usr/share/doc/..., a URL, a folder elsewhere): not ours.
            if start > 0 and line[start - 1] in "/\\@:":
                continue
            # A Markdown link's target: check (a) reads it relative to its file.
            if markdown and line[max(0, start - 2):start] == "](":
                continue
            path = repository_path(m.group(0))
            if path is None or allowed(path, rel):
                continue
            if not os.path.exists(os.path.join(root, path)):
                problems.append(f"{rel}:{number}: {path} does not exist")


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems: list[str] = []
    files = tracked_files(root)
    for rel in files:
        text = read_text(os.path.join(root, rel))
        if text is None:
            continue
        if rel.endswith(".md"):
            check_links(root, rel, text, problems)
        check_paths(root, rel, text, problems)
    for p in problems:
        print(p)
    if problems:
        print(f"paths: {len(problems)} problem(s) in {len({p.split(':', 1)[0] for p in problems})} file(s) "
              f"of {len(files)} checked", file=sys.stderr)
        return 1
    print(f"paths: ok ({len(files)} files)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
