#!/usr/bin/env python3
"""Generate envtool's shell completion for bash and zsh (``completions/``) with shtab.

The files are generated ahead of time and committed, so completion costs envtool nothing at
start-up. They complete subcommands and options (from the argument parser), spec names (the
bundled specs, listed when generated, plus the ``*.yaml`` files of ``$ENVTOOL_SPEC_PATH``'s
directories at completion time), site names (likewise with ``$ENVTOOL_SITE_PATH``), and paths
for path options. Re-run after changing a command's options or the bundled specs/sites;
``tests/test_completions.py`` fails when the committed files are out of date.

Usage: python scripts/gen_completions.py [--check]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

OUT = {"bash": REPO / "completions" / "envtool.bash", "zsh": REPO / "completions" / "_envtool"}
SPEC_DESTS = {"spec", "a", "b"}  # positional spec names (create, plan, show, lock, …; diff-specs A B) and --spec
FILE_DESTS = {"site_file", "lock", "output", "from_file", "script"}
DIR_DESTS = {"prefix", "prefix_positional", "modulefile_root", "root", "modulefiles", "lock_dir", "to"}


def _preamble(shell: str, specs, sites) -> str:
    if shell == "bash":
        return f"""
# names of the *.yaml / *.yml files in the ':'-separated directories of the variable named $1
_envtool_path_names() {{
  local IFS=: d f
  for d in ${{!1}}; do
    for f in "$d"/*.yaml "$d"/*.yml; do
      [ -e "$f" ] && {{ f="${{f##*/}}"; echo "${{f%.*}}"; }}
    done
  done
}}
_envtool_specs() {{
  compgen -W "{' '.join(specs)} $(_envtool_path_names ENVTOOL_SPEC_PATH)" -- "$1"
}}
_envtool_sites() {{
  compgen -W "{' '.join(sites)} $(_envtool_path_names ENVTOOL_SITE_PATH)" -- "$1"
}}
"""
    return f"""
_envtool_path_names() {{
  local d f
  for d in ${{(s.:.)${{(P)1}}}}; do
    for f in $d/*.(yaml|yml)(N); do
      f=${{f:t}}; print -r -- ${{f:r}}
    done
  done
}}
_envtool_specs() {{
  local -a names
  names=({' '.join(specs)} ${{(f)"$(_envtool_path_names ENVTOOL_SPEC_PATH)"}})
  _describe 'spec' names
}}
_envtool_sites() {{
  local -a names
  names=({' '.join(sites)} ${{(f)"$(_envtool_path_names ENVTOOL_SITE_PATH)"}})
  _describe 'site' names
}}
"""


def completion_parser() -> argparse.ArgumentParser:
    """envtool's full parser with what each argument completes to (shtab's ``complete`` attribute)."""
    import shtab

    from envtool.cli.main import build_parser

    parser = build_parser()
    specs_fn = {"bash": "_envtool_specs", "zsh": "_envtool_specs"}
    sites_fn = {"bash": "_envtool_sites", "zsh": "_envtool_sites"}
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
            elif action.dest in SPEC_DESTS:
                action.complete = specs_fn
            elif action.dest == "site":
                action.complete = sites_fn
            elif action.dest in FILE_DESTS:
                action.complete = shtab.FILE
            elif action.dest in DIR_DESTS:
                action.complete = shtab.DIRECTORY
    return parser


def generate(shell: str) -> str:
    """The completion script for ``shell`` (``bash`` or ``zsh``) as text."""
    import shtab

    from envtool.spec import catalog

    parser = completion_parser()
    specs = sorted(f.stem for f in catalog.bundled_dir("specs").glob("*.yaml"))
    site_names = sorted(f.stem for f in catalog.bundled_dir("sites").glob("*.yaml"))
    return shtab.complete(parser, shell=shell, preamble=_preamble(shell, specs, site_names))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a committed file differs from what is generated")
    args = ap.parse_args()
    stale = []
    for shell, path in OUT.items():
        text = generate(shell)
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print("out of date (run python scripts/gen_completions.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
