#!/usr/bin/env python3
"""Write tests/data/source_index.json: every primary source the catalog cites, as it was read.

For each ``owner/name@ref:path`` that a bundled spec or site file cites, the git blob id and the
number of lines of that file at that ref, read from local bare clones. Each entry's ``cited`` maps every line number some citation names (``#L12``,
``:12-14``) to that line's text, so that tests/test_provenance.py can check offline that a pin's
version is on its cited line and compare a spec's ``HOROVOD_*`` build variables with those its
cited build script sets (a cited line must exist; a repository file must have been read at that
ref).

Usage: python3 scripts/source_index.py MIRROR_DIR
  MIRROR_DIR holds one bare clone per repository at ``<owner>+<name>/repo`` (what the team's
  ``fetch`` tool makes).
Exit 1 when a cited file cannot be read at its ref.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from envtool.spec import provenance  # noqa: E402
from envtool.spec.yamlload import load_yaml  # noqa: E402


def cited_entries():
    """Every ``sources`` entry text of the bundled specs and sites."""
    for kind in ("specs", "sites"):
        for f in sorted((REPO / kind).glob("*.yaml")):
            raw = load_yaml(f)
            for text in (raw.get("sources") or {}).values():
                yield str(text)


def _cite(entry: dict, lines, span) -> None:
    """Record in ``entry["cited"]`` the text of the lines ``span`` (``(first, last)``, 1-based) names."""
    if not span:
        return
    for n in range(span[0], min(span[1], len(lines)) + 1):
        entry["cited"][str(n)] = lines[n - 1]


def main(argv) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    mirrors = Path(argv[1])
    index = {"repo_files": {}}
    texts = {}
    failed = 0
    for text in cited_entries():
        ref = provenance.parse(text)
        if ref is None:
            continue
        if ref.kind == "repo":
            key = f"{ref.repo}@{ref.ref}:{ref.path}"
            if key in index["repo_files"]:
                _cite(index["repo_files"][key], texts[key], ref.lines)
                continue
            git_dir = mirrors / ref.repo.replace("/", "+") / "repo"
            show = subprocess.run(["git", "-C", str(git_dir), "show", f"{ref.ref}:{ref.path}"], capture_output=True)
            blob = subprocess.run(["git", "-C", str(git_dir), "rev-parse", f"{ref.ref}:{ref.path}"],
                                  capture_output=True, text=True)
            if show.returncode != 0 or blob.returncode != 0:
                print(f"cannot read {key}: {show.stderr.decode(errors='replace').strip()}", file=sys.stderr)
                failed += 1
                continue
            texts[key] = show.stdout.decode(errors="replace").splitlines()
            index["repo_files"][key] = {"blob": blob.stdout.strip(), "lines": len(show.stdout.splitlines()),
                                        "cited": {}}
            _cite(index["repo_files"][key], texts[key], ref.lines)
    for entry in index["repo_files"].values():
        entry["cited"] = dict(sorted(entry["cited"].items(), key=lambda kv: int(kv[0])))
    index["repo_files"] = dict(sorted(index["repo_files"].items()))
    out = REPO / "tests" / "data" / "source_index.json"
    out.write_text(json.dumps(index, indent=1) + "\n")
    print(f"{out}: {len(index['repo_files'])} repository files")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
