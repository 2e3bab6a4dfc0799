"""Channel names as conda means them: ``defaults`` is Anaconda's ``pkgs/main`` and ``pkgs/r``.

A spec's ``channels`` may name ``defaults`` (16 bundled specs do, after their Open-CE channel).
conda reads that name as its default channels, ``https://repo.anaconda.com/pkgs/main`` and
``https://repo.anaconda.com/pkgs/r`` on Linux and macOS (``DEFAULT_CHANNELS_UNIX``,
conda/conda@26.7.1:conda/base/constants.py#L122-L125); py-rattler has no such notion and would read
it as a channel called ``defaults`` on anaconda.org. :func:`expand` replaces the name with the URLs
before anything reaches py-rattler. As conda's ``default_channels`` setting does, the variable
``ENVTOOL_DEFAULT_CHANNELS`` (channels separated by spaces or commas) replaces the list, e.g. with
a mirror. Nothing here does network I/O.
"""
from __future__ import annotations

import os
import re
from typing import Iterable, List, Optional, Tuple

#: conda's default channels on Linux and macOS (conda/conda@26.7.1:conda/base/constants.py#L122-L125).
DEFAULT_CHANNELS: Tuple[str, ...] = ("https://repo.anaconda.com/pkgs/main", "https://repo.anaconda.com/pkgs/r")
#: The variable that replaces :data:`DEFAULT_CHANNELS` (like conda's ``default_channels`` setting).
ENV_VAR = "ENVTOOL_DEFAULT_CHANNELS"
DEFAULTS_NAME = "defaults"


def default_channels() -> Tuple[str, ...]:
    """What ``defaults`` stands for: ``$ENVTOOL_DEFAULT_CHANNELS`` when set and not empty, else
    :data:`DEFAULT_CHANNELS`.

    Returns:
        channel URLs or names, highest priority first.
    """
    override = os.environ.get(ENV_VAR, "")
    items = tuple(c for c in re.split(r"[\s,]+", override) if c)
    return items or DEFAULT_CHANNELS


def expand(channels: Iterable[str], platform: Optional[str] = None) -> List[str]:
    """The channels with ``defaults`` replaced by :func:`default_channels` (order kept, no duplicates).

    Args:
        channels: channel names or URLs, highest priority first.
        platform: the target platform (unused today: Windows' extra ``msys2`` channel is not a
            platform envtool builds for); kept so callers state what they solve for.
    Returns:
        the list handed to py-rattler.
    """
    out: List[str] = []
    for ch in channels:
        for item in (default_channels() if ch.strip() == DEFAULTS_NAME else (ch,)):
            if item not in out:
                out.append(item)
    return out
