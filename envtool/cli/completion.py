"""``envtool completion bash|zsh``: print the shell completion script.

The scripts are generated ahead of time with shtab (``scripts/gen_completions.py``) and shipped
inside the package (``envtool/_bundled/completions`` in a wheel, ``completions/`` in a
checkout), so completion costs envtool nothing at start-up and works from any install (the
README's Install section; tests/test_user_install.py runs its lines)::

    mkdir -p ~/.local/share/bash-completion/completions
    envtool completion bash > ~/.local/share/bash-completion/completions/envtool
    echo 'source ~/.local/share/bash-completion/completions/envtool' >> ~/.bashrc
    mkdir -p ~/.zfunc && envtool completion zsh > ~/.zfunc/_envtool   # fpath+=(~/.zfunc) before compinit

The bash script (shtab's) is self-contained: it needs none of the ``bash-completion`` package's
functions, which only add loading on first use from that folder
(https://github.com/scop/bash-completion#faq).

``--json`` prints ``{"shell", "path", "script"}``.
"""
from __future__ import annotations

from envtool.cli.common import add_json, print_json

#: Shell → the file name of its script (bash-completion's and zsh's conventions).
FILES = {"bash": "envtool.bash", "zsh": "_envtool"}


def register(sub) -> None:
    p = sub.add_parser("completion", help="print the shell completion script (bash or zsh)",
                       description="Print envtool's completion script for SHELL on stdout. bash: save it "
                                   "(e.g. to ~/.local/share/bash-completion/completions/envtool, which the "
                                   "bash-completion package loads by itself) and source that file from ~/.bashrc "
                                   "(no package needed); zsh: save it as _envtool in a folder added to fpath before "
                                   "compinit (e.g. ~/.zfunc). The README's Install section has the lines.")
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
