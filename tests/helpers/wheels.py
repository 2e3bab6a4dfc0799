"""Minimal real wheels (PEP 427) for tests that ``pip install`` something small, offline."""
import base64
import hashlib
import zipfile
from pathlib import Path
from typing import Dict, Sequence


def make_wheel(dest: Path, name: str, version: str, files: Dict[str, str],
               console_scripts: Sequence[str] = (), requires: Sequence[str] = ()) -> Path:
    """Write ``dest/<name>-<version>-py3-none-any.whl`` and return its path.

    Args:
        dest: an existing directory.
        name, version: the distribution's name and version (METADATA).
        files: archive path → text (the package's modules).
        console_scripts: ``"cmd = module:function"`` entries (entry_points.txt).
        requires: ``Requires-Dist`` lines (``"other>=1.0"``).
    Returns:
        the wheel's path; METADATA, WHEEL and a RECORD with sha256 digests are added.
    """
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    contents = dict(files)
    contents[f"{dist}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                    + "".join(f"Requires-Dist: {r}\n" for r in requires))
    contents[f"{dist}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    if console_scripts:
        contents[f"{dist}/entry_points.txt"] = "[console_scripts]\n" + "\n".join(console_scripts) + "\n"
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    contents[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    wheel = Path(dest) / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in contents.items():
            zf.writestr(path, text)
    return wheel
