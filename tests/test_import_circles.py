"""No import circle anywhere in the package (issue 28).

The import graph is grimp's (the library import-linter builds its graph with): every
``import``/``from ... import`` in ``envtool``, those inside functions included, those under
``if TYPE_CHECKING:`` left out (they never run). A circle is a strongly connected component of
more than one module (Tarjan, https://doi.org/10.1137/0201010); each is listed with the import
lines that close it. grimp: https://grimp.readthedocs.io/en/stable/usage.html
"""
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers.speed import scaled

REPO = Path(__file__).resolve().parent.parent

# Runs in a child interpreter so the graph is built from the tree given (the repo, or a copy).
_CIRCLES = textwrap.dedent('''
    import grimp

    graph = grimp.build_graph("envtool", exclude_type_checking_imports=True, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index, low, stack, on_stack, circles = {}, {}, [], set(), []
    for root in edges:                       # Tarjan's algorithm, iterative
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    print(f"{len(circles)} circle(s)")
    for component in circles:
        print("circle: " + ", ".join(component))
        for a in component:
            for b in edges[a]:
                if b in component:
                    for d in graph.get_import_details(importer=a, imported=b):
                        print(f"  {a}:{d['line_number']} imports {b}: {d['line_contents']}")
''')


def _circles(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _CIRCLES], cwd=root, capture_output=True, text=True, timeout=scaled(300),
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_no_import_circle():
    proc = _circles(REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    circles = int(proc.stdout.split()[0])
    assert circles == 0, "\n" + proc.stdout


def test_a_circle_is_reported(tmp_path):
    """The check can fail: two modules of one folder importing each other, one of them only
    inside a function, are one circle."""
    pkg = tmp_path / "envtool"
    shutil.copytree(REPO / "envtool", pkg, ignore=shutil.ignore_patterns("__pycache__", "_bundled"))
    (pkg / "core" / "ring_a.py").write_text("from envtool.core import ring_b  # noqa: F401\n")
    (pkg / "core" / "ring_b.py").write_text("def f():\n    from envtool.core import ring_a  # noqa: F401\n")
    proc = _circles(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "circle: envtool.core.ring_a, envtool.core.ring_b" in proc.stdout, proc.stdout
    assert "envtool.core.ring_b:2 imports envtool.core.ring_a" in proc.stdout, proc.stdout
