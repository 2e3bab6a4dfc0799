"""``envtool completion bash|zsh``: print the shell completion script.

The scripts are generated ahead of time with shtab (``scripts/gen_completions.py``) and shipped
inside the package (``envtool/_bundled/completions`` in a wheel, ``completions/`` in a
checkout), so completion costs envtool nothing at start-up and works from a ``pipx`` or
``pip install --user`` install::

    envtool completion bash > ~/.local/share/bash-completion/completions/envtool
    envtool completion zsh > ~/.zfunc/_envtool      # with fpath+=(~/.zfunc) before compinit

``--json`` prints ``{"shell", "path", "script"}``.
"""
from __future__ import annotations

from envtool.cli.common import add_json, print_json

#: Shell → the file name of its script (bash-completion's and zsh's conventions).
FILES = {"bash": "envtool.bash", "zsh": "_envtool"}


def register(sub) -> None:
    p = sub.add_parser("completion", help="print the shell completion script (bash or zsh)",
                       description="Print envtool's completion script for SHELL on stdout. bash: "
                                   "'envtool completion bash > ~/.local/share/bash-completion/completions/envtool'; "
                                   "zsh: 'envtool completion zsh > ~/.zfunc/_envtool' with fpath+=(~/.zfunc) before "
                                   "compinit.")
    p.add_argument("shell", choices=sorted(FILES), help="the shell")
    add_json(p)
    p.set_defaults(func=run)


def script_path(shell: str):
    """The completion script for ``shell``: the wheel's bundled copy, else the checkout's.

    Returns:
        a ``Path`` (it may not exist in a broken install; :func:`run` says so).
    """
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent
    bundled = package / "_bundled" / "completions" / FILES[shell]
    return bundled if bundled.is_file() else package.parent / "completions" / FILES[shell]


def run(args) -> int:
    import sys

    from envtool.core.errors import UsageError

    path = script_path(args.shell)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"the {args.shell} completion script {path} cannot be read ({exc.strerror}); "
                         "reinstall envtool") from None
    if args.json:
        print_json({"shell": args.shell, "path": str(path), "script": text})
    else:
        sys.stdout.write(text)
    return 0
