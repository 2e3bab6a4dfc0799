"""The one ``mksquashfs`` command envtool writes squashfs images with (``pack --format squashfs``
and ``image``'s squashfs form).

Compression is zstd at level 3: it wrote torch's 447 MB ``lib/`` 14x faster than mksquashfs's
default (gzip level 9) at the same size (2.3 s vs 34 s, 121 vs 122 MB, squashfs-tools 4.5.1, 2
cores; a 240 MB venv: 1.7 s vs 32-59 s, 74 vs 72 MB, docs/staging.md). Readers: the Linux kernel
since 4.14 (https://github.com/torvalds/linux/blob/v4.14/fs/squashfs/zstd_wrapper.c) and
squashfuse 0.1.101 or later built with zstd (https://github.com/vasi/squashfuse; conda-pack's own
note on its zstd images says the same: conda_pack/formats.py, ``SquashFSArchive``); writing
needs squashfs-tools 4.4 or later (https://github.com/plougher/squashfs-tools, CHANGES: 4.4
added zstd). ``tests/test_pack.py`` mounts a packed image with squashfuse.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Union

#: mksquashfs's compressor options (see the module docstring).
COMPRESSION = ("-comp", "zstd", "-Xcompression-level", "3")


def mksquashfs_argv(source: Union[str, Path], image: Union[str, Path], *extra: str) -> List[str]:
    """The ``mksquashfs`` argv that writes directory ``source`` as squashfs ``image``: a new
    file (``-noappend``), no progress bar and no listing (``-no-progress -quiet``: the caller
    shows its own progress), :data:`COMPRESSION`.

    Args:
        source: the directory to pack.
        image: the image file to write.
        extra: more options (``-no-xattrs``: ``pack`` carries no extended attributes).
    Returns:
        the argv (``mksquashfs`` found on ``PATH``).
    """
    return ["mksquashfs", str(source), str(image), "-noappend", "-quiet", "-no-progress", *COMPRESSION, *extra]
