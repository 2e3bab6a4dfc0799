"""The image's SBOM must list what the environment's lists (name, version, hashes)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Sequence, Tuple


def _sbom_components(prefix: Path) -> Dict[str, Tuple[str, Tuple[str, ...]]]:
    """name → (version, sorted ``alg:hash``) of the SBOM of ``prefix``."""
    from envtool.sbom import build_bom, render

    data = json.loads(render(build_bom(prefix)))
    return {c["name"]: (c.get("version", ""), tuple(sorted(f"{h['alg']}:{h['content']}" for h in c.get("hashes", []))))
            for c in data.get("components", [])}


def compare_sbom(env: Path, image_env: Path, rebuilt: Sequence[str] = ()) -> List[str]:
    """Differences between the SBOM components of two environment prefixes (name, version,
    hashes), in words; empty when they are the same.

    Args:
        env, image_env: the two prefixes.
        rebuilt: components compiled anew for the image (``horovod``): only their versions must agree.
    """
    a, b = _sbom_components(env), _sbom_components(image_env)
    for name in rebuilt:
        if name in a and name in b and a[name][0] == b[name][0]:
            del a[name], b[name]
    said = []
    for name in sorted(set(a) | set(b)):
        if name not in b:
            said.append(f"{name} {a[name][0]} missing in the image")
        elif name not in a:
            said.append(f"{name} {b[name][0]} in the image only")
        elif a[name] != b[name]:
            said.append(f"{name}: environment {a[name]}, image {b[name]}")
    return said
