"""Turn spec YAML into :class:`envtool.spec.model.Spec`, with errors that name file, line and field.

Steps: each file is checked on its own (unknown keys, types, choices — so the error names the
file that holds the mistake), ``extends`` chains are merged (mappings merge key by key, lists
and scalars of the child replace the parent's), then the merged mapping becomes a ``Spec`` and
the cross-field rules of :mod:`envtool.spec.rules` run.
"""
from __future__ import annotations

import builtins
import difflib
import os
import re
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from envtool.core.errors import SpecError
from envtool.spec import model as m
from envtool.spec import names
from envtool.spec.yamlload import LineDict, load_yaml

#: Fields of each section; anything else is an unknown key (with a "did you mean").
TOP_KEYS = ("name", "summary", "distribution", "extends", "abstract", "sources", "platforms", "engine", "python",
            "cuda", "site", "channels", "packages", "horovod", "expect", "env", "notes", "venv",
            "status")
#: Keys a child never inherits from its parent (``abstract: true`` marks a parent-only spec).
NOT_INHERITED = ("extends", "name", "abstract")
SITE_KEYS = ("name", "modules", "base_env", "launcher", "scheduler", "gpus_per_node", "env", "libraries")
PACKAGES_KEYS = ("conda", "pip")
HOROVOD_KEYS = ("version", "install", "source", "frameworks", "controllers", "gpu_operations", "gpu_ops",
                "cpu_operations", "nccl_link", "allow_mixed_gpu_impl", "cuda_home", "nccl_home",
                "cuda_cc_list", "extra_env", "build_packages")
EXPECT_KEYS = ("check_build", "dataloader_start_method", "import_warnings")
VENV_KEYS = ("system_site_packages",)
CHECK_BUILD_KEYS = ("frameworks", "controllers", "tensor_operations")
PIN_KEYS = ("spec", "value", "mark", "source", "note", "index")
DISTRIBUTION_KEYS = ("name", "version")
STATUS_KEYS = ("value", "since", "source", "note")
#: Fields that hold prose (any text, shown only); every other string is checked for control characters.
FREE_TEXT_KEYS = ("summary", "notes", "note")
#: Mappings of environment variables (keys must be shell names).
ENV_MAP_KEYS = ("env", "extra_env")


class _Reader:
    """Typed access to one mapping of one file; every error names file, line and dotted field."""

    def __init__(self, path: str, data: Any, where: str, line: Optional[int] = None):
        self.path = path
        self.where = where
        if data is None:
            data = LineDict()
        if not isinstance(data, dict):
            raise SpecError(path, where or "(top level)", "a mapping", got=data, line=line)
        self.data = data
        self.line = getattr(data, "line", None) or line

    def field(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def line_of(self, key: str) -> Optional[int]:
        if isinstance(self.data, LineDict):
            return self.data.line_of(key)
        return self.line

    def error(self, key: str, expected: str, got: object = None, hint: str = "") -> SpecError:
        return SpecError(self.path, self.field(key), expected, got=got, line=self.line_of(key), hint=hint)

    def check_keys(self, allowed: Sequence[str]) -> None:
        for key in self.data:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean {close[0]!r}?" if close else "allowed: " + ", ".join(allowed)
                raise SpecError(self.path, self.field(str(key)), "a known field", got=key,
                                line=self.line_of(key), hint=f"unknown key; {hint}")

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str, default=None):
        return self.data.get(key, default)

    def str(self, key: builtins.str, default: Optional[builtins.str] = None,
            optional: bool = True) -> Optional[builtins.str]:
        value = self.data.get(key, default)
        if value is None:
            if not optional:
                raise self.error(key, "a string")
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise self.error(key, "a string", got=value)
        if key not in FREE_TEXT_KEYS:  # names, paths, launchers: no control characters
            names.check_no_control(str(value), self.path, self.field(key), self.line_of(key))
        return str(value)

    def choice(self, key: builtins.str, choices: Sequence[builtins.str], default: Optional[builtins.str] = None,
               nullable: bool = True) -> Optional[builtins.str]:
        value = self.data.get(key, default)
        if value is None and nullable:
            return None
        if isinstance(value, str) and value.lower() in choices:
            return value.lower()
        raise self.error(key, "one of " + ", ".join(choices) + (" or null" if nullable else ""), got=value)

    def one_of(self, key: builtins.str, choices: Sequence[builtins.str],
               default: Optional[builtins.str] = None) -> builtins.str:
        """:meth:`choice` for a field that must have a value (``nullable=False``).

        Raises:
            SpecError: the value (or, when absent, ``default``) is not one of ``choices``.
        """
        value = self.choice(key, choices, default=default, nullable=False)
        if value is None:  # choice() raises before this when nullable is False
            raise self.error(key, "one of " + ", ".join(choices))
        return value

    def choices(self, key: builtins.str, choices: Sequence[builtins.str]) -> Tuple[builtins.str, ...]:
        values = self.data.get(key) or []
        if not isinstance(values, list):
            raise self.error(key, "a list drawn from " + ", ".join(choices), got=values)
        out = []
        for v in values:
            if not isinstance(v, str) or v.lower() not in choices:
                raise self.error(key, "a list drawn from " + ", ".join(choices), got=v)
            if v.lower() not in out:
                out.append(v.lower())
        return tuple(out)

    def str_list(self, key: builtins.str) -> Tuple[builtins.str, ...]:
        values = self.data.get(key) or []
        if not isinstance(values, list) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                                   for v in values):
            raise self.error(key, "a list of strings", got=values)
        out = tuple(str(v) for v in values)
        for v in out:
            if key == "modules":
                names.check_module_name(v, self.path, self.field(key), self.line_of(key))
            else:
                names.check_no_control(v, self.path, self.field(key), self.line_of(key))
        return out

    def str_map(self, key: builtins.str) -> Tuple[Tuple[builtins.str, builtins.str], ...]:
        values = self.data.get(key) or {}
        if not isinstance(values, dict):
            raise self.error(key, "a mapping of names to strings", got=values)
        return self._pairs(key, values)

    def _pairs(self, key: builtins.str, values: Dict[Any, Any]) -> Tuple[Tuple[builtins.str, builtins.str], ...]:
        out = []
        env = key in ENV_MAP_KEYS
        for k, v in values.items():
            if not isinstance(k, str) or not k:
                raise self.error(key, "variable names as keys", got=k)
            if env:
                names.check_env_key(k, self.path, self.field(key), line=self.line_of(key))
            if isinstance(v, bool):
                v = "1" if v else "0"
            if not isinstance(v, (str, int, float)):
                raise SpecError(self.path, f"{self.field(key)}.{k}", "a string value", got=v,
                                line=self.line_of(key))
            names.check_no_control(str(v), self.path, f"{self.field(key)}.{k}", self.line_of(key), allow_tab=env)
            out.append((k, str(v)))
        return tuple(out)

    def env_map(self, key: builtins.str, paths: bool = True) -> Tuple[Tuple[Tuple[builtins.str, builtins.str], ...],
                                                                      Tuple[Tuple[builtins.str, builtins.str,
                                                                                  builtins.str], ...]]:
        """An ``env`` mapping that sets variables: ``(plain, edits)``.

        ``plain`` holds ``(VAR, value)``; ``edits`` holds ``(VAR, op, entry)`` for the reversible
        form ``VAR: {prepend: DIR or [DIR, …], append: …}``, in the order they are to be applied
        one after the other (a prepended list is stored last entry first, so that the list ends up
        in front in the order written). Search-path variables may only take that form and hooks
        no form (:func:`envtool.spec.names.check_env_setting`).

        Args:
            key: the field (``env``, ``extra_env``).
            paths: whether the ``{prepend|append}`` form is allowed here.
        Raises:
            SpecError: naming the file, line and ``<key>.<VAR>``.
        """
        values = self.data.get(key) or {}
        if not isinstance(values, dict):
            raise self.error(key, "a mapping of variable names to values", got=values)
        edits: List[Tuple[str, str, str]] = []
        plain: Dict[str, object] = {}
        line = self.line_of(key)
        for k, v in values.items():
            names.check_env_key(k, self.path, self.field(key), line=line)
            where = f"{self.field(key)}.{k}"
            line = values.line_of(k) if isinstance(values, LineDict) else self.line_of(key)
            if isinstance(v, dict):
                if not paths:
                    raise SpecError(self.path, where, "a string value (build variables take no prepend/append)",
                                    got=v, line=line)
                names.check_env_setting(k, self.path, where, line, edit=True)
                bad = [op for op in v if op not in names.PATH_EDIT_OPS]
                if bad or not v:
                    raise SpecError(self.path, where, "{prepend: DIR} and/or {append: DIR} (a list for several)",
                                    got=bad[0] if bad else v, line=line)
                for op in names.PATH_EDIT_OPS:
                    if op not in v:
                        continue
                    entries = v[op] if isinstance(v[op], list) else [v[op]]
                    if not entries:
                        raise SpecError(self.path, f"{where}.{op}", "a directory or a non-empty list of them",
                                        got=v[op], line=line)
                    for e in entries:
                        if isinstance(e, bool) or not isinstance(e, (str, int, float)) or not str(e) \
                                or ":" in str(e) or names.has_control(str(e)):
                            raise SpecError(self.path, f"{where}.{op}", "one path entry each (no ':', no control "
                                            "characters; a list for several)", got=e, line=line)
                    seq = [str(e) for e in entries]
                    edits += [(k, op, e) for e in (reversed(seq) if op == "prepend" else seq)]
                continue
            names.check_env_setting(k, self.path, where, line)
            plain[k] = v
        return self._pairs(key, plain), tuple(edits)

    def bool(self, key: builtins.str, default: bool = False) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, "true or false", got=value)
        return value

    def int(self, key: builtins.str, default: int = 0) -> int:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.error(key, "a non-negative integer", got=value)
        return value

    def sub(self, key: builtins.str) -> "_Reader":
        return _Reader(self.path, self.data.get(key), self.field(key), line=self.line_of(key))


def _kept_match_spec(text: str) -> Any:
    """py-rattler's ``MatchSpec`` for ``text``; also makes ``MatchSpec`` objects copyable.

    py-rattler 0.28's ``MatchSpec`` can be neither pickled nor deep-copied, and
    ``dataclasses.asdict`` deep-copies what a :class:`~envtool.spec.model.Pin` keeps
    (``envtool.lock.spec_hash`` applies it to the Horovod section). ``copyreg.pickle`` (the standard
    library's way to teach pickle and ``copy`` an extension type) registers a reduction that
    parses the match spec's text again.

    Raises:
        Exception: py-rattler's ``InvalidMatchSpecError`` when ``text`` is not a match spec.
    """
    import copyreg

    from rattler import MatchSpec  # lazy: py-rattler is heavy

    copyreg.pickle(MatchSpec, _reduce_match_spec)
    return MatchSpec(text)


def _reduce_match_spec(ms: Any) -> Tuple[Any, Tuple[str]]:
    from rattler import MatchSpec

    return MatchSpec, (str(ms),)


def check_pin_value(path: str, value: str, field: str, line: Optional[int], kind: Optional[str]) -> Dict[str, Any]:
    """Parse a pinned value once: ``conda`` with py-rattler's ``MatchSpec``, ``pip`` with
    ``packaging``'s ``Requirement``, ``version`` with ``packaging``'s ``Version`` (a leading ``=``
    and a trailing ``.*`` are allowed: ``=3.8``, ``10.2.*``) or, for a range (``>=3.8,<3.11``),
    py-rattler's ``VersionSpec``. ``kind`` None parses nothing.

    Returns:
        the parsed fields of :class:`~envtool.spec.model.Pin`: ``kind``, ``name``, ``version``,
        ``wildcard``, and the parsed objects it keeps: ``requirement`` (pip), ``match_spec``
        (conda), ``parsed_version`` (``packaging.version.Version`` of ``version`` when it is PEP 440).
    Raises:
        SpecError: the value does not parse (names file, line, field and the parser's reason).
    """
    if kind == "conda":
        try:
            ms = _kept_match_spec(value)
        except Exception as exc:  # rattler raises its own InvalidMatchSpecError
            raise SpecError(path, field, "a conda match spec such as 'pytorch-base 1.7.1.*'", got=value,
                            line=line, hint=str(exc)) from None
        version, wildcard = m.one_version(str(ms.version) if ms.version is not None else None, fuzzy_equals=True)
        return {"kind": kind, "name": ms.name.normalized if ms.name else None, "version": version,
                "wildcard": wildcard, "match_spec": ms, "parsed_version": m.parse_version(version)}
    if kind == "pip":
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.utils import canonicalize_name

        try:
            req = Requirement(value)
        except InvalidRequirement as exc:
            raise SpecError(path, field, "a pip requirement such as 'torch==2.13.0'", got=value, line=line,
                            hint=str(exc).splitlines()[0]) from None
        specs = list(req.specifier)
        version, wildcard = (None, False)
        if len(specs) == 1 and specs[0].operator in ("==", "==="):
            version, wildcard = m.one_version(specs[0].version)
        return {"kind": kind, "name": str(canonicalize_name(req.name)), "version": version, "wildcard": wildcard,
                "requirement": req, "parsed_version": m.parse_version(version)}
    if kind == "version":
        from packaging.version import InvalidVersion, Version

        if value.strip()[:1] in "<>!~" or any(c in value for c in ",|"):
            from rattler import VersionSpec  # a range such as ">=3.8,<3.11": conda's rules

            try:
                VersionSpec(value.strip())
            except Exception as exc:
                raise SpecError(path, field, "a version or a conda version range such as '>=3.8,<3.11'",
                                got=value, line=line, hint=str(exc)) from None
            return {"kind": kind, "name": None, "version": None, "wildcard": False}
        text = value.strip().lstrip("=").strip()
        text = text[:-2] if text.endswith(".*") else text
        try:
            Version(text)
        except InvalidVersion:
            raise SpecError(path, field, "a version such as 3.8 or 10.2.89", got=value, line=line) from None
        version, wildcard = m.one_version(value, fuzzy_equals=False)
        return {"kind": kind, "name": None, "version": version, "wildcard": wildcard,
                "parsed_version": m.parse_version(version)}
    return {}


def _pin(path: str, raw: Any, field: str, line: Optional[int], source_ids: Sequence[str],
         kind: Optional[str] = None) -> m.Pin:
    """One pin: a scalar, or ``{spec|value: …, mark: V|V2|I, source: id, note: …}``; its value is
    checked with :func:`check_pin_value` for ``kind``."""
    if isinstance(raw, dict):
        r = _Reader(path, raw, field, line)
        r.check_keys(PIN_KEYS)
        if r.has("spec") and r.has("value"):
            raise r.error("spec", "either 'spec' or 'value', not both")
        value = r.str("spec") if r.has("spec") else r.str("value")
        if value is None:
            raise r.error("spec", "the pinned value ('spec' or 'value')")
        mark = r.get("mark")
        if mark is not None and mark not in m.MARKS:
            raise r.error("mark", "one of " + ", ".join(m.MARKS), got=mark)
        source = r.str("source")
        if source is not None and source_ids and source not in source_ids:
            raise r.error("source", "the id of an entry of 'sources' (" + ", ".join(source_ids) + ")", got=source)
        parsed = check_pin_value(path, value, field, r.line_of("spec" if r.has("spec") else "value"), kind)
        index = r.str("index")
        if index is not None:
            _check_index(r, index, kind)
        return m.Pin(value=value, mark=mark, source=source, note=r.str("note"), index=index, **parsed)
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise SpecError(path, field, "a version string or {spec:, mark:, source:}", got=raw, line=line)
    parsed = check_pin_value(path, str(raw), field, line, kind)
    return m.Pin(value=str(raw), **parsed)


def _check_index(r: "_Reader", index: str, kind: Optional[str]) -> None:
    """``index`` of a pip pin: the public simple index (PEP 503) that serves the package, an
    ``https://`` URL without credentials, query or fragment (a lock records the URLs of its files;
    a mirror of it is configured per machine: ``index_mirrors``)."""
    from urllib.parse import urlsplit

    if kind != "pip":
        raise r.error("index", "no 'index' here: only a pip package names its package index", got=index)
    try:
        parts = urlsplit(index)
    except ValueError:
        parts = None
    if (parts is None or parts.scheme != "https" or not parts.hostname or parts.username or parts.password
            or parts.query or parts.fragment or any(c.isspace() for c in index)):
        raise r.error("index", "the https:// URL of a public package index (PEP 503 simple API), without "
                      "credentials, query or fragment, e.g. https://download.pytorch.org/whl/cpu", got=index)


def _pin_list(r: _Reader, key: str, source_ids, kind: Optional[str] = None) -> Tuple[m.Pin, ...]:
    values = r.get(key) or []
    if not isinstance(values, list):
        raise r.error(key, "a list of package pins", got=values)
    return tuple(_pin(r.path, v, f"{r.field(key)}[{i}]", getattr(v, "line", None) or r.line_of(key), source_ids,
                      kind=kind)
                 for i, v in enumerate(values))


_LIBRARY_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


def _libraries(s: "_Reader", source_ids) -> Tuple[Tuple[str, m.Pin], ...]:
    """``site.libraries``: ``{name: version pin}`` for libraries a site's modules provide."""
    raw = s.get("libraries")
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise s.error("libraries", "a mapping of library name to version pin ({cudnn: {value: …, mark: …}})",
                      got=raw)
    out = []
    for name, value in raw.items():
        if not isinstance(name, str) or not _LIBRARY_NAME.match(name):
            raise s.error("libraries", "library names of lower-case letters, digits, '.', '_' and '-'", got=name)
        out.append((name, _pin(s.path, value, s.field(f"libraries.{name}"), s.line_of("libraries"), source_ids,
                               kind="version")))
    return tuple(out)


def _sources(r: _Reader) -> Tuple[Tuple[str, str], ...]:
    raw = r.get("sources")
    if raw is None:
        return ()
    if isinstance(raw, list):
        out = []
        for i, v in enumerate(raw):
            if not isinstance(v, str):
                raise r.error("sources", "a list of URLs or a mapping id: URL", got=v)
            out.append((f"s{i + 1}", v))
        return tuple(out)
    return r.str_map("sources")


def check_file(path: str, raw: LineDict) -> None:
    """Check one file's own keys and value types (before ``extends`` merging).

    Raises:
        SpecError: naming ``path``, the line and the field.
    """
    raw_name = raw.get("name")
    if raw_name is not None:
        names.check_spec_name(raw_name if isinstance(raw_name, str) else repr(raw_name), path, raw.line_of("name"))
    build_spec(path, raw, name=str(raw.get("name") or Path(path).stem), partial=True)


def build_spec(path: str, raw: Dict[str, Any], name: str, partial: bool = False) -> m.Spec:
    """Build a :class:`Spec` from a merged mapping.

    Args:
        path: the file shown in errors.
        raw: the mapping (``extends`` already merged unless ``partial``).
        name: the spec's name.
        partial: only check types (a file that extends another may omit required parts).
    Returns:
        the spec (meaningless when ``partial``).
    Raises:
        SpecError: a field is unknown, of the wrong type or out of its choices.
    """
    r = _Reader(path, raw, "")
    r.check_keys(TOP_KEYS)
    if not partial:
        names.check_spec_name(name, path, r.line_of("name"))
    sources = _sources(r)
    source_ids = [k for k, _ in sources]
    if partial:
        source_ids = []  # ids may be defined in the parent

    dist_raw = r.get("distribution")
    if isinstance(dist_raw, str):
        dist = m.Distribution(name=dist_raw)
    else:
        d = r.sub("distribution")
        d.check_keys(DISTRIBUTION_KEYS)
        dist = m.Distribution(name=d.str("name") or "custom", version=d.str("version"))

    platforms = r.str_list("platforms") or ("linux-64",)
    for p in platforms:
        if p not in m.PLATFORMS:
            raise r.error("platforms", "conda platforms drawn from " + ", ".join(m.PLATFORMS), got=p)

    s = r.sub("site")
    s.check_keys(SITE_KEYS)
    site_env, site_env_paths = s.env_map("env")
    site = m.Site(name=s.str("name") or "local", modules=s.str_list("modules"), base_env=s.str("base_env"),
                  launcher=s.str("launcher"), scheduler=s.str("scheduler"),
                  gpus_per_node=s.int("gpus_per_node", 0), env=site_env, env_paths=site_env_paths,
                  libraries=_libraries(s, source_ids))

    pk = r.sub("packages")
    pk.check_keys(PACKAGES_KEYS)
    packages = m.Packages(conda=_pin_list(pk, "conda", source_ids, kind="conda"),
                          pip=_pin_list(pk, "pip", source_ids, kind="pip"))

    h = r.sub("horovod")
    h.check_keys(HOROVOD_KEYS)
    version = _pin(path, h.get("version"), h.field("version"), h.line_of("version"), source_ids, kind="version") \
        if h.get("version") is not None else None
    gpu_ops_raw = h.sub("gpu_ops")
    gpu_ops_raw.check_keys(tuple(m.GPU_OP_CHOICES))
    gpu_ops = tuple((op, gpu_ops_raw.one_of(op, m.GPU_OP_CHOICES[op]))
                    for op in m.GPU_OP_CHOICES if gpu_ops_raw.get(op) is not None)
    horovod = m.HorovodSpec(
        version=version,
        install=h.one_of("install", m.HOROVOD_INSTALLS, default="pip-build" if version else "none"),
        source=h.str("source"),
        frameworks=h.choices("frameworks", m.FRAMEWORKS),
        controllers=h.choices("controllers", m.CONTROLLERS),
        gpu_operations=h.choice("gpu_operations", m.GPU_OPERATION_CHOICES),
        gpu_ops=gpu_ops,
        cpu_operations=h.choice("cpu_operations", m.CPU_OPERATION_CHOICES),
        nccl_link=h.choice("nccl_link", m.NCCL_LINKS),
        allow_mixed_gpu_impl=h.bool("allow_mixed_gpu_impl"),
        cuda_home=h.str("cuda_home"), nccl_home=h.str("nccl_home"), cuda_cc_list=h.str("cuda_cc_list"),
        extra_env=h.env_map("extra_env", paths=False)[0],
        build_packages=_pin_list(h, "build_packages", source_ids, kind="conda"),
    )

    e = r.sub("expect")
    e.check_keys(EXPECT_KEYS)
    check_build = None
    if e.get("check_build") is not None:
        c = e.sub("check_build")
        c.check_keys(CHECK_BUILD_KEYS)
        check_build = m.CheckBuildExpectation(
            frameworks=_names(c, "frameworks", m.CHECK_BUILD_FRAMEWORKS),
            controllers=_names(c, "controllers", m.CHECK_BUILD_CONTROLLERS),
            tensor_operations=_names(c, "tensor_operations", m.CHECK_BUILD_TENSOR_OPERATIONS))
    import_warnings = e.str_list("import_warnings")
    for i, pattern in enumerate(import_warnings):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise e.error(f"import_warnings[{i}]", f"a Python regular expression ({exc})", got=pattern) from None
    expect = m.Expect(check_build=check_build,
                      dataloader_start_method=e.choice("dataloader_start_method", m.START_METHODS),
                      import_warnings=tuple(import_warnings))

    v = r.sub("venv")
    v.check_keys(VENV_KEYS)
    venv = m.VenvOptions(system_site_packages=v.bool("system_site_packages"))

    python = _pin(path, r.get("python"), "python", r.line_of("python"), source_ids, kind="version") \
        if r.get("python") is not None else None
    cuda = _pin(path, r.get("cuda"), "cuda", r.line_of("cuda"), source_ids, kind="version") \
        if r.get("cuda") is not None else None
    if r.get("abstract") is not None and not isinstance(r.get("abstract"), bool):
        raise r.error("abstract", "true or false", got=r.get("abstract"))

    status = _status(r, source_ids, partial)
    env, env_paths = r.env_map("env")

    return m.Spec(
        name=name, path=path, summary=r.str("summary") or "", distribution=dist, sources=sources,
        platforms=platforms, engine=r.one_of("engine", m.ENGINES, default="venv"),
        python=python, cuda=cuda, site=site, channels=r.str_list("channels"), packages=packages,
        horovod=horovod, expect=expect, env=env, notes=r.str("notes") or "",
        extends=r.str("extends"), venv=venv, status=status, env_paths=env_paths,
    )


def _status(r: _Reader, source_ids: Sequence[str], partial: bool) -> m.Status:
    """The ``status`` field: a word of :data:`~envtool.spec.model.STATUSES`, or a mapping
    ``{value, since: YYYY-MM-DD, source: <source id>, note}``."""
    import datetime

    raw = r.get("status")
    if raw is None:
        return m.Status()
    if isinstance(raw, str):
        return m.Status(value=r.one_of("status", m.STATUSES))
    s = r.sub("status")
    s.check_keys(STATUS_KEYS)
    value = s.one_of("value", m.STATUSES)
    since = s.get("since")
    if isinstance(since, datetime.date):  # YAML reads an unquoted 2020-11-10 as a date
        since = since.isoformat()
    if since is not None:
        try:
            datetime.date.fromisoformat(str(since))
        except ValueError:
            raise s.error("since", "a date YYYY-MM-DD", got=since) from None
    source = s.str("source")
    if source is not None and not partial and source not in source_ids:
        raise s.error("source", "the id of an entry of sources (" + ", ".join(source_ids) + ")", got=source)
    return m.Status(value=value, since=str(since) if since is not None else None, source=source,
                    note=s.str("note"))


def _names(r: _Reader, key: str, allowed: Sequence[str]) -> Tuple[str, ...]:
    """Capability names, matched case-insensitively and returned as Horovod prints them."""
    lookup = {a.lower(): a for a in allowed}
    values = r.get(key) or []
    if not isinstance(values, list):
        raise r.error(key, "a list drawn from " + ", ".join(allowed), got=values)
    out = []
    for v in values:
        if not isinstance(v, str) or v.lower() not in lookup:
            raise r.error(key, "a list drawn from " + ", ".join(allowed), got=v)
        out.append(lookup[v.lower()])
    return tuple(out)


def merge(parent: Dict[str, Any], child: Dict[str, Any], top: bool = True) -> LineDict:
    """Merge two raw spec mappings: mappings merge key by key, anything else in ``child`` wins.

    The top level's ``extends``, ``name`` and ``abstract`` are never inherited (a nested ``name``,
    such as ``site.name``, is). Line numbers of the child's keys are kept.
    """
    out = LineDict()
    out.line = getattr(child, "line", None)
    for key, value in parent.items():
        if top and key in NOT_INHERITED:
            continue
        out[key] = value
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            merged = merge(out[key], value, top=False)
            out[key] = merged
        else:
            out[key] = value
        if isinstance(child, LineDict) and key in child.lines:
            out.lines[key] = child.lines[key]
    return out


#: Every field name a spec may hold (for :func:`_quiet_parent_error`: a field path made only of
#: these is envtool's own wording, not a piece of the file).
_KNOWN_FIELDS = frozenset(TOP_KEYS + SITE_KEYS + PACKAGES_KEYS + HOROVOD_KEYS + EXPECT_KEYS + VENV_KEYS
                          + CHECK_BUILD_KEYS + PIN_KEYS + DISTRIBUTION_KEYS + STATUS_KEYS
                          + ("(yaml)", "(file)", "(top level)"))


def _quiet_parent_error(exc: SpecError, child: Path, line: Optional[int]) -> SpecError:
    """``exc`` (raised reading a parent named by ``extends``) without anything taken from the
    parent's contents: the parent file, its line and a field made of known field names only,
    never the offending value, key or YAML excerpt (``extends: /etc/shadow`` used to print the
    file's first line)."""
    parts = [re.sub(r"\[\d+\]$", "", p) for p in exc.field.split(".")]
    known = all(p in _KNOWN_FIELDS for p in parts)
    return SpecError(exc.path, exc.field if known else "(file)",
                     exc.expected if known and exc.got is None else "a spec file (this one does not validate "
                     "as a spec; its contents are not shown here)", line=exc.line,
                     hint=f"the parent named by 'extends' in {child}" + (f":{line}" if line else ""))


def parent_path(child: Path, value: object, line: Optional[int], find: Callable[[str], Path]) -> Path:
    """The file ``extends: value`` in spec file ``child`` names.

    A spec name (:data:`names.SPEC_NAME_RE`, no ``.yaml`` suffix) is looked up with ``find``
    (the catalog: ``$ENVTOOL_SPEC_PATH``, then the bundled specs), then as ``NAME.yaml`` beside
    ``child``. A file name (``base.yaml``, ``./base.yml``) is a file in ``child``'s own
    directory: no ``/`` (other than a leading ``./``), no ``..``, and its resolved path (symbolic
    links followed) must still lie in that directory. Absolute paths and anything else are refused
    without being opened.

    Raises:
        SpecError: naming ``child``, its line and ``extends`` (exit 2).
    """
    expected = ("the name of a known spec, or a spec file in the same directory as this one "
                "(NAME.yaml; no '/', no '..')")
    if not isinstance(value, str) or not value:
        raise SpecError(child, "extends", expected, got=value, line=line)
    here = Path(os.path.abspath(child)).parent
    if names.SPEC_NAME_RE.fullmatch(value) and not value.endswith((".yaml", ".yml")):
        try:
            return find(value)
        except SpecError as exc:
            for suffix in (".yaml", ".yml"):
                beside = here / (value + suffix)
                if beside.is_file() and os.path.realpath(beside).startswith(os.path.realpath(here) + os.sep):
                    return beside
            raise SpecError(child, "extends", expected, got=value, line=line, hint=exc.hint) from None
    text = value[2:] if value.startswith("./") else value
    if "/" in text or text in (".", "..") or not text.endswith((".yaml", ".yml")) \
            or not names.SPEC_NAME_RE.fullmatch(text):
        raise SpecError(child, "extends", expected, got=value, line=line)
    candidate = here / text
    real = os.path.realpath(candidate)
    if os.path.dirname(real) != os.path.realpath(here):
        raise SpecError(child, "extends", expected, got=value, line=line,
                        hint="it is a symbolic link to a file outside this directory")
    if not os.path.isfile(real):
        raise SpecError(child, "extends", expected, got=value, line=line, hint=f"no file {candidate}")
    return candidate


def resolve_raw(path: Path, find: Callable[[str], Path], _seen: Optional[List[str]] = None,
                _child: Optional[Tuple[Path, Optional[int]]] = None) -> LineDict:
    """Read ``path`` and merge its ``extends`` chain (parents found with :func:`parent_path`).

    Errors in a parent name the parent file and line but never echo its contents.

    Raises:
        SpecError: a file fails its own checks, a parent is missing or not allowed, or
            ``extends`` loops (the message lists the cycle).
    """
    seen = list(_seen or [])
    try:
        raw = load_yaml(path)
    except SpecError as exc:
        raise (_quiet_parent_error(exc, *_child) if _child else exc) from None
    name = str(raw.get("name") or Path(path).stem)
    if name in seen:
        raise SpecError(path, "extends", "a chain without cycles", line=raw.line_of("extends"),
                        hint="cycle: " + " -> ".join(seen + [name]))
    seen.append(name)
    try:
        check_file(str(path), raw)
    except SpecError as exc:
        raise (_quiet_parent_error(exc, *_child) if _child else exc) from None
    parent_name = raw.get("extends")
    if not parent_name:
        return raw
    line = raw.line_of("extends")
    parent = resolve_raw(parent_path(Path(path), parent_name, line, find), find, seen, (Path(path), line))
    return merge(parent, raw)
