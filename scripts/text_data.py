#!/usr/bin/env python3
"""text_data.py: real English text as a bpbench token-data file, made offline from a Debian package.

usage: text_data.py [--seq-len T] [--vocab V] [--out DIR] [--sources DIR] [--cache DIR]

The corpus is the Python 3.11 documentation's reStructuredText sources (every `_sources/**/*.rst.txt`: the
tutorial, the library and language references, the HOWTOs, the FAQ, What's New; about 12 MB) from Debian 12's
`python3.11-doc` package, under the Python Software Foundation License Version 2 (the package's
/usr/share/doc/python3.11-doc/copyright). Where the package is installed its files are read in place;
otherwise `apt-get download` fetches the .deb (12.6 MB, no root needed) into the cache (--cache, default
.cache/text_data at the repository root, git-ignored, reused by later runs) and `dpkg-deb -x` unpacks it there
(83 MB in all). The cache is kept out of the output folder because that folder is what travels to a GPU
machine, whose files come only through the device tool's 64 MiB carry. Nothing is downloaded when bpbench
runs: a scenario names the file this script wrote.

The tokenizer is a byte-level BPE (GPT-2's scheme) of V tokens (default 8192; id 0 is <|endoftext|>) trained
here on the same corpus with Hugging Face `tokenizers` (pinned in scripts/requirements.txt): no pretrained
vocabulary is available offline, and training one takes seconds. Documents, in sorted path order, are
tokenised, joined by <|endoftext|> and cut into sequences of exactly T tokens (the last partial one dropped),
as pretraining packs text. bpbench's training run splits them into training and held-out sequences by the
scenario's seed (harness/run/train_data.h).

Writes, in DIR (--out, default .data, git-ignored):
  python_docs_V{V}_T{T}.json           the token-data file (a JSON list of lists of ids;
                                       harness/objectives/data_file.h)
  python_docs_V{V}_T{T}.manifest.json  what it was made from: package and version, licence, files, characters,
                                  tokens, sequences, tokenizers' version, the data file's SHA-256
  python_docs_tokenizer_V{V}.json     the tokenizer (decode ids back to text with
                                      tokenizers.Tokenizer.from_file)
prints the data file's path on stdout, and on stderr the size of DIR. Those files are all that DIR holds:
carry .data/ whole to a GPU machine (the two shapes scripts/setup.sh makes: 25.1 MiB, of which V2048_T128's
three files are 13.5 MiB and V8192_T1024's 11.7 MiB). Versions before this one left the download in DIR/deb/;
it is removed (its .deb moved to the cache). The same package version, V and T give the same bytes (BPE
training is deterministic; a test checks it on a small corpus).

Exit status: 0 done; 2 bad arguments, or no corpus (the package neither installed nor downloadable).
"""
import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys

PACKAGE = "python3.11-doc"
INSTALLED_SOURCES = "/usr/share/doc/python3.11/html/_sources"
LICENCE = "Python Software Foundation License Version 2 (/usr/share/doc/python3.11-doc/copyright)"
EOS = "<|endoftext|>"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CACHE = os.path.join(REPO, ".cache", "text_data")
CARRY_LIMIT = 64 << 20  # the device tool's carry, .data/ and .deps/ together


def fail(message):
    print(f"text_data.py: {message}", file=sys.stderr)
    sys.exit(2)


def installed_version():
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Status} ${Version}", PACKAGE], capture_output=True,
                             text=True, check=False)
    except FileNotFoundError:
        return None
    words = out.stdout.split()
    return words[-1] if out.returncode == 0 and "installed" in words[:3] else None


def corpus_sources(cache_dir):
    """(directory of .rst.txt sources, package version): the installed package's, else a downloaded .deb's."""
    version = installed_version()
    if version and os.path.isdir(INSTALLED_SOURCES):
        return INSTALLED_SOURCES, version
    os.makedirs(cache_dir, exist_ok=True)
    debs = sorted(glob.glob(os.path.join(cache_dir, f"{PACKAGE}_*.deb")))
    if not debs:
        got = subprocess.run(["apt-get", "download", PACKAGE], cwd=cache_dir, capture_output=True, text=True)
        debs = sorted(glob.glob(os.path.join(cache_dir, f"{PACKAGE}_*.deb")))
        if got.returncode != 0 or not debs:
            fail(f"cannot get Debian's {PACKAGE} (apt-get download: {got.stderr.strip() or 'no .deb'}); "
                 f"install it (apt-get install {PACKAGE}) or pass --sources DIR")
    deb = debs[-1]
    version = subprocess.run(["dpkg-deb", "-f", deb, "Version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    # One tree per version, unpacked beside and renamed into place: an interrupted unpack is never read as
    # whole.
    root = os.path.join(cache_dir, "unpacked", version)
    if not os.path.isdir(root):
        partial = root + ".partial"
        shutil.rmtree(partial, ignore_errors=True)
        os.makedirs(os.path.dirname(partial), exist_ok=True)  # dpkg-deb -x makes the last directory only
        subprocess.run(["dpkg-deb", "-x", deb, partial], check=True)
        os.rename(partial, root)
    return os.path.join(root, INSTALLED_SOURCES.lstrip("/")), version


def remove_old_download(out_dir, cache_dir):
    """Earlier versions downloaded into OUT/deb/ and unpacked there (83 MB in the folder that is carried to
    GPU machines): move its .deb to the cache, where this version looks for it, and remove the rest."""
    old = os.path.join(out_dir, "deb")
    if not os.path.isdir(old):
        return
    entries = os.listdir(old)
    debs = [e for e in entries if e.startswith(f"{PACKAGE}_") and e.endswith(".deb")]
    if len(debs) + ("unpacked" in entries) != len(entries):
        print(f"text_data.py: warning: {old} holds files that are not {PACKAGE}'s download; left as it is "
              f"(remove it: the output folder is carried to GPU machines)", file=sys.stderr)
        return
    os.makedirs(cache_dir, exist_ok=True)
    for e in debs:
        if not os.path.exists(os.path.join(cache_dir, e)):
            shutil.move(os.path.join(old, e), os.path.join(cache_dir, e))
    shutil.rmtree(old)
    print(f"text_data.py: removed {old} (an earlier version's download; its .deb is now in {cache_dir})",
          file=sys.stderr)


def folder_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def read_documents(sources):
    paths = sorted(glob.glob(os.path.join(sources, "**", "*.rst.txt"), recursive=True))
    if not paths:
        fail(f"no .rst.txt files under {sources}")
    docs = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            docs.append(f.read())
    return [os.path.relpath(p, sources) for p in paths], docs


def train_tokenizer(docs, vocab):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq-len", type=int, default=128, help="tokens per sequence (default 128)")
    ap.add_argument("--vocab", type=int, default=8192, help="BPE vocabulary size (default 8192)")
    ap.add_argument("--out", default=".data", help="output directory (default .data)")
    ap.add_argument("--sources", help="a directory of .rst.txt files to use instead of the package's")
    ap.add_argument("--cache", default=DEFAULT_CACHE,
                    help="where the package's .deb is downloaded and unpacked (default .cache/text_data at "
                         "the repository root); outside --out")
    a = ap.parse_args()
    if a.seq_len < 1:
        fail(f"--seq-len must be >= 1, got {a.seq_len}")
    if not 257 <= a.vocab <= 1 << 20:
        fail(f"--vocab must be in [257, 1048576] (256 bytes and <|endoftext|> at least), got {a.vocab}")
    out_real, cache_real = os.path.realpath(a.out), os.path.realpath(a.cache)
    if os.path.commonpath([out_real, cache_real]) == out_real:
        fail(f"--cache '{a.cache}' is inside --out '{a.out}': the output folder is carried to GPU machines, "
             f"the download must stay out of it")
    try:
        import tokenizers
    except ImportError:
        fail("Hugging Face tokenizers is not installed for this python (bash scripts/setup.sh, then "
             ".venv/bin/python scripts/text_data.py)")
    os.makedirs(a.out, exist_ok=True)
    remove_old_download(a.out, a.cache)
    if a.sources:
        if not os.path.isdir(a.sources):
            fail(f"--sources: no such directory '{a.sources}'")
        sources, version = a.sources, "local"
    else:
        sources, version = corpus_sources(a.cache)
    names, docs = read_documents(sources)

    tok = train_tokenizer(docs, a.vocab)
    eos = tok.token_to_id(EOS)
    assert eos == 0, "the first special token gets id 0"
    stream = []
    for encoding in tok.encode_batch(docs):
        stream.extend(encoding.ids)
        stream.append(eos)
    T = a.seq_len
    sequences = [stream[i:i + T] for i in range(0, len(stream) - T + 1, T)]
    if not sequences:
        fail(f"the corpus has {len(stream)} tokens, fewer than one sequence of {T}")

    data_path = os.path.join(a.out, f"python_docs_V{a.vocab}_T{T}.json")
    text = "[" + ",\n".join(json.dumps(s, separators=(",", ":")) for s in sequences) + "]\n"
    with open(data_path, "w") as f:
        f.write(text)
    tok.save(os.path.join(a.out, f"python_docs_tokenizer_V{a.vocab}.json"))
    manifest = {
        "corpus": f"Python 3.11 documentation, reStructuredText sources (Debian {PACKAGE})",
        "package": PACKAGE, "package_version": version, "licence": LICENCE,
        "files": len(names), "characters": sum(len(d) for d in docs),
        "tokenizer": f"byte-level BPE trained here, tokenizers {tokenizers.__version__}",
        "vocab": tok.get_vocab_size(), "eos_id": eos, "tokens": len(stream), "seq_len": T,
        "sequences": len(sequences), "sha256": hashlib.sha256(text.encode()).hexdigest(),
    }
    with open(os.path.join(a.out, f"python_docs_V{a.vocab}_T{T}.manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    # The path first (stdout is what callers read), then the size, so that a log of both keeps that order.
    print(data_path, flush=True)
    size = folder_bytes(a.out)
    print(f"text_data.py: {a.out} holds {size / (1 << 20):.1f} MiB; carry it whole to a GPU machine"
          + ("" if size < CARRY_LIMIT else " (warning: more than the device tool's 64 MiB carry)"),
          file=sys.stderr)


if __name__ == "__main__":
    main()
