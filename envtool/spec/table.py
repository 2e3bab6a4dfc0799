"""The release matrix's rows and their text table (:mod:`envtool.spec.matrix` makes the rows).

Kept apart from :mod:`envtool.spec.matrix`, which reads parsed specs (``packaging``, py-rattler's
``MatchSpec``): ``envtool specs`` prints a table it remembered (:mod:`envtool.spec.matrix_cache`)
with this module and the standard library alone.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Iterable, List, Optional, Tuple

#: Column names, in table order (``--sort`` takes any of them).
COLUMNS = ("name", "distribution", "version", "python", "tensorflow", "pytorch", "horovod", "backend",
           "install", "cuda", "platforms", "site", "status")
@dataclass(frozen=True)
class Row:
    """One row of the matrix; every field a display string ('' when the spec has no such part).

    Attributes follow :data:`COLUMNS`; ``summary`` and ``path`` are kept for ``--json``.
    """

    name: str
    distribution: str
    version: str
    python: str
    tensorflow: str
    pytorch: str
    horovod: str
    backend: str
    install: str
    cuda: str
    platforms: str
    site: str
    status: str = "active"
    summary: str = ""
    path: str = ""

    def to_dict(self) -> Dict[str, str]:
        """JSON-ready mapping (the columns plus ``summary`` and ``path``)."""
        return asdict(self)


#: Columns left out first when the table must fit a width (the spec name always stays).
DROP_ORDER = ("install", "platforms", "distribution", "backend", "version", "cuda", "tensorflow", "status",
              "site", "python", "horovod", "pytorch")
_HEADERS = dict(zip(COLUMNS, ("SPEC", "DISTRIBUTION", "VERSION", "PYTHON", "TENSORFLOW", "PYTORCH", "HOROVOD",
                              "BACKEND", "INSTALL", "CUDA", "PLATFORMS", "SITE", "STATUS")))


def fit_columns(rows: List[Row], width: Optional[int]) -> Tuple[str, ...]:
    """The columns of :data:`COLUMNS` that fit in ``width`` characters (None: all), leaving out
    those of :data:`DROP_ORDER` first, in that order."""
    shown = list(COLUMNS)
    if width is None:
        return tuple(shown)
    widths = {c: max([len(_HEADERS[c])] + [len(getattr(r, c) or "-") for r in rows]) for c in COLUMNS}
    for column in DROP_ORDER:
        if sum(widths[c] for c in shown) + 2 * (len(shown) - 1) <= width:
            break
        shown.remove(column)
    return tuple(shown)


def format_table(rows: List[Row], columns: Optional[Iterable[str]] = None) -> str:
    """Aligned text table of ``rows`` ('-' for empty cells).

    Args:
        rows: the rows.
        columns: which of :data:`COLUMNS` to show, in that order (default: all).
    """
    shown = [c for c in COLUMNS if columns is None or c in set(columns)]
    headers = [_HEADERS[c] for c in shown]
    cells = [[getattr(r, c) or "-" for c in shown] for r in rows]
    widths = [max([len(h)] + [len(row_[i]) for row_ in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    for row_ in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row_, widths)).rstrip())
    return "\n".join(lines)
