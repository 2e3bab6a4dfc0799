#!/usr/bin/env python3
"""Spot-check every V pin against the text it cites: the pin's version (or a site mapping's
module names) must appear on the cited line(s) of the cited file at the cited ref, as a whole
version (``envtool.spec.provenance.states``: ``0.18.2+1`` is not on a line that says ``0.18.2``).
tests/test_provenance.py makes the same check offline from tests/data/source_index.json.

Usage: python3 scripts/verify_pins.py MIRROR_DIR
  MIRROR_DIR: bare clones at ``<owner>+<name>/repo``.
Prints one line per pin checked (ok / MISMATCH / unchecked and why) and a summary; exit 1 on a mismatch.
A URL cannot be read offline: its pins are listed as unchecked.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from envtool.spec import catalog, provenance, sites  # noqa: E402
from envtool.spec.yamlload import load_yaml  # noqa: E402


def cited_text(ref, mirrors: Path):
    """The cited lines (all of the file when no lines are given), or None when unreadable."""
    if ref.kind == "repo":
        proc = subprocess.run(["git", "-C", str(mirrors / ref.repo.replace("/", "+") / "repo"), "show",
                               f"{ref.ref}:{ref.path}"], capture_output=True, text=True, errors="replace")
        lines = proc.stdout.splitlines() if proc.returncode == 0 else None
    elif ref.kind == "project":
        f = REPO / ref.path
        lines = f.read_text(errors="replace").splitlines() if f.is_file() else None
    else:
        return None
    if lines is None:
        return None
    if ref.lines:
        lines = lines[ref.lines[0] - 1:ref.lines[1]]
    return "\n".join(lines)


def tokens(value: str, version=None):
    """The version to look for: the one a pin names, else the first in its text (a range's lower bound)."""
    if version:
        return [version]
    m = re.search(r"\d+(?:\.\d+)+", value)
    return [m.group(0)] if m else [value]


def main(argv) -> int:
    mirrors = Path(argv[1])
    checks = []
    for f in sorted((REPO / "specs").glob("*.yaml")):
        if load_yaml(f).get("abstract") is True:
            continue
        spec = catalog.load_spec(f.stem)
        src = dict(spec.sources)
        for field, pin in spec.pins():
            if pin.mark == "V":
                checks.append((spec.name, field, pin.value, src.get(pin.source or ""), tokens(pin.value, pin.version),
                               field == "python" or pin.value.startswith("python")))
    for f in sorted((REPO / "sites").glob("*.yaml")):
        sf = sites.load_site(f)
        src = dict(sf.sources)
        for st in sf.stacks:
            if st.mark == "V" and st.modules:
                checks.append((sf.name, f"stacks.{st.key}", " ".join(st.modules), src.get(st.source or ""),
                               list(st.modules), None))
            for key, val in (st.overrides or {}).items():
                if isinstance(val, dict) and val.get("mark") == "V":
                    checks.append((sf.name, f"stacks.{st.key}.overrides.{key}", str(val.get("value")),
                                   src.get(str(val.get("source"))), [str(val.get("value"))], key == "python"))
    bad = unchecked = 0
    for name, field, value, text, want, python in checks:
        ref = provenance.parse(text or "")
        body = cited_text(ref, mirrors) if ref else None
        if body is None:
            unchecked += 1
            print(f"unchecked  {name} {field} {value}: {text} (not readable offline)")
            continue
        if python is None:  # module names
            ok = all(w in body for w in want)
        else:
            ok = all(provenance.states(body, w, python=python) for w in want)
        bad += not ok
        print(f"{'ok' if ok else 'MISMATCH':9}  {name} {field} {value}: {ref.where()}")
    print(f"{len(checks)} V pins and mappings: {len(checks) - bad - unchecked} agree with the cited text, "
          f"{bad} do not, {unchecked} not checkable offline")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
