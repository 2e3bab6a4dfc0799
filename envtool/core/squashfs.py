"""The one ``mksquashfs`` command envtool writes squashfs images with (``pack --format squashfs``
and ``image``'s squashfs form).

Compression is zstd at level 3: it wrote torch's 447 MB ``lib/`` 14x faster than mksquashfs's
default (gzip level 9) at the same size (2.3 s vs 34 s, 121 vs 122 MB, squashfs-tools 4.5.1, 2
cores). Readers: the Linux kernel reads zstd squashfs since 4.14
(https://github.com/torvalds/linux/blob/v4.14/fs/squashfs/zstd_wrapper.c) and squashfuse when
built with zstd, as distributions build it (https://github.com/vasi/squashfuse, "zstd"); a
squashfs-tools older than 4.4 cannot write it (https://github.com/plougher/squashfs-tools,
CHANGES: 4.4 added zstd).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Union

#: mksquashfs's compressor options (see the module docstring).
COMPRESSION = ("-comp", "zstd", "-Xcompression-level", "3")


def mksquashfs_argv(source: Union[str, Path], image: Union[str, Path]) -> List[str]:
    """The ``mksquashfs`` argv that writes directory ``source`` as squashfs ``image``: a new
    file (``-noappend``), no progress bar and no listing (``-no-progress -quiet``: the caller
    shows its own progress), :data:`COMPRESSION`.

    Args:
        source: the directory to pack.
        image: the image file to write.
    Returns:
        the argv (``mksquashfs`` found on ``PATH``).
    """
    return ["mksquashfs", str(source), str(image), "-noappend", "-quiet", "-no-progress", *COMPRESSION]
