"""Per-file facts: one iterative pass over a module's syntax tree records what the resolver and
the rules ask about (imports and their aliases, functions, call sites with the rank tests around
them, assignments, dict items, ``# envtool: ignore[...]`` comments). Nothing is executed."""
from __future__ import annotations

import ast
import io
import linecache
import re
import tokenize
from sys import intern
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple, Union

from envtool.checks.scan.astutil import (MULTINODE_WORDS, const_str, early_return_index, has_dead_guard,
                                         is_main_guard, last_name, rank_kind, stronger)
from envtool.checks.scan.model import ScanIssue

#: Horovod framework bindings: importing one makes a component a Horovod program
#: (https://horovod.readthedocs.io/en/v0.28.1/api.html).
HVD_BINDINGS = ("horovod.torch", "horovod.tensorflow", "horovod.keras", "horovod.mxnet", "horovod.spark",
                "horovod.ray")
#: top-level packages of PyTorch Lightning.
LIGHTNING = ("pytorch_lightning", "lightning")


#: a function's node: a def, an async def or a lambda.
FuncNode = Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda]
#: per module (:meth:`envtool.checks.scan.program.Program.dict_index`): ``(id(scope), name)`` → the
#: values assigned to that plain name, and → the ``name.update(...)`` calls.
DictIndex = Tuple[Dict[Tuple[int, str], List[ast.AST]], Dict[Tuple[int, str], List["CallSite"]]]


class FuncFacts:
    """A function (def, async def or lambda) of a module (a record with ``__slots__``: one is kept
    per function of every module read).

    Attributes:
        node: its syntax node; ``name`` its name (``<lambda>``); ``module`` the module holding it;
        cls: the class it is defined in (a method), or None.
        params: parameter names (positional-only, positional, keyword-only); ``defaults`` their
            default value nodes.
        returns: the values it returns; ``sites`` the call sites that reach it in the program
            being judged; ``loops``: it has a for/while loop; ``parent``: the enclosing function.
    """

    __slots__ = ("node", "name", "module", "cls", "params", "defaults", "returns", "sites", "loops", "parent")

    def __init__(self, node: FuncNode, name: str, module: "ModuleFacts", cls: Optional[str], params: List[str],
                 defaults: Dict[str, ast.AST], returns: Optional[List[ast.AST]] = None,
                 sites: Optional[List["CallSite"]] = None, loops: bool = False,
                 parent: Optional["FuncFacts"] = None):
        self.node = node
        self.name = name
        self.module = module
        self.cls = cls
        self.params = params
        self.defaults = defaults
        self.returns: List[ast.AST] = [] if returns is None else returns
        self.sites: List["CallSite"] = [] if sites is None else sites
        self.loops = loops
        self.parent = parent

    def __repr__(self) -> str:
        return f"FuncFacts({self.name!r}, line {getattr(self.node, 'lineno', 0)}, cls={self.cls!r})"


class CallSite:
    """A call and where it is: module, enclosing function, the rank test around it and the dead
    ``_supports_context`` guard around it (a record with ``__slots__``: one is kept per call of
    every module read).

    Attributes:
        node: the call; ``module``: the module holding it; ``func``: the enclosing function (None:
            module level); ``guarded``: under a rank test, ``"global"``/``"local"`` (if, conditional
            or early return), else None; ``dead_if``: the innermost enclosing ``if`` whose test is
            the dead guard; ``dist_guard``: every rank test around it reads torch.distributed's rank only.
    """

    __slots__ = ("node", "module", "func", "guarded", "dead_if", "dist_guard")

    def __init__(self, node: ast.Call, module: "ModuleFacts", func: Optional[FuncFacts], guarded: Optional[str],
                 dead_if: Optional[ast.AST], dist_guard: bool = False):
        self.node = node
        self.module = module
        self.func = func
        self.guarded = guarded
        self.dead_if = dead_if
        self.dist_guard = dist_guard

    def __repr__(self) -> str:
        return f"CallSite(line {self.node.lineno}, guarded={self.guarded!r})"


@dataclass(eq=False)
class ModuleFacts:
    """What one pass over a module's syntax tree found (``tree`` None: it does not parse, the
    ``syntax`` issue says why). The comment beside each field says what it holds."""

    path: Path
    shown: str
    tree: Optional[ast.Module]
    syntax: Optional[ScanIssue] = None
    hvd_aliases: Set[str] = field(default_factory=set)     # names bound to a horovod framework module
    hvd_names: Dict[str, str] = field(default_factory=dict)  # from horovod.x import y as z: z -> y
    hvd_binding: bool = False
    hvd_framework: str = "torch"
    hvd_import_line: Optional[int] = None
    from_imports: Dict[str, str] = field(default_factory=dict)  # local name -> "module.attr"
    module_aliases: Dict[str, str] = field(default_factory=dict)  # local name -> module
    local_imports: Set[Path] = field(default_factory=set)
    project_aliases: Set[str] = field(default_factory=set)  # names bound to project modules
    funcs: List[FuncFacts] = field(default_factory=list)
    calls: List[CallSite] = field(default_factory=list)
    assigns: List[Tuple[Optional[FuncFacts], ast.AST, ast.AST, Optional[ast.AST]]] = field(default_factory=list)
    dict_items: Dict[Tuple[int, str], List[Tuple[str, ast.AST, Optional[ast.AST]]]] = field(default_factory=dict)
    dead_ifs: List[ast.AST] = field(default_factory=list)
    main_guard: bool = False
    first_toplevel_call: Optional[int] = None
    hvd_binding_name: str = ""
    refs: Dict[int, Set[str]] = field(default_factory=dict)   # id(scope) -> names read there
    class_consts: Dict[Tuple[str, str], ast.AST] = field(default_factory=dict)  # (class, attr) -> value
    ignores: Dict[int, Set[str]] = field(default_factory=dict)  # line -> rules ("*": all) suppressed
    cuda_visible: bool = False   # CUDA_VISIBLE_DEVICES / visible_device_list set somewhere
    rank_aliases: Dict[str, str] = field(default_factory=dict)  # name -> "global"/"local"
    multinode: bool = False      # the code names nodes (nnodes, node_rank, ngpus_per_node, SLURM_PROCID ...)
    rank_slices: bool = False    # a subscript indexed or sliced by a rank (x[rank::size])
    size_divs: bool = False      # something divided by hvd.size()/world size (steps per rank)
    dist_rank_funcs: Set[str] = field(default_factory=set)  # top-level helpers returning torch.distributed's rank only
    size: int = 0
    _dict_idx: Optional["DictIndex"] = None
    text: Optional[str] = None   # the source, kept only for a module scanned from a string (scan_source)

    def line_text(self, line: int) -> str:
        """The text of 1-based ``line`` without its newline ('' when the file cannot be read again):
        from :attr:`text`, or read again from :attr:`path` (the scan does not keep sources in memory)."""
        if self.text is not None:
            lines = self.text.splitlines()
            return lines[line - 1] if 0 < line <= len(lines) else ""
        return linecache.getline(str(self.path), line).rstrip("\r\n")

    @property
    def lightning(self) -> bool:
        """Whether the module imports PyTorch Lightning."""
        return any(v.split(".")[0] in LIGHTNING for v in list(self.from_imports.values())
                   + list(self.module_aliases.values()))


def collect(mod: ModuleFacts) -> None:
    """One iterative pass over ``mod.tree`` filling the module's facts (linear in its size)."""
    tree = mod.tree
    if tree is None:
        return
    for stmt in tree.body:
        if is_main_guard(stmt):
            mod.main_guard = True
        elif mod.first_toplevel_call is None and not isinstance(
                stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and any(isinstance(n, ast.Call) for n in ast.walk(stmt)):
            mod.first_toplevel_call = stmt.lineno
    # imports, and names (or self.attributes) assigned a rank: gpu_id = int(os.environ["LOCAL_RANK"]); self.rank = rank
    # (statements only: the expressions are walked once, below)
    stmts: List[ast.AST] = list(tree.body)
    while stmts:
        node = stmts.pop()
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], (ast.Name, ast.Attribute)):
            kind = rank_kind(node.value)
            if kind:
                name = last_name(node.targets[0])
                if mod.rank_aliases.get(name) != "global":
                    mod.rank_aliases[name] = kind
        elif isinstance(node, ast.Import):  # imports first: the walk below reads the aliases
            for imp in node.names:
                note_import(mod, imp.name, imp.asname or imp.name.split(".")[0], node.lineno, imp.asname is not None)
        elif isinstance(node, ast.ImportFrom):
            note_from_import(mod, node)
        for attr in ("body", "orelse", "finalbody", "handlers", "cases"):
            more = getattr(node, attr, None)
            if isinstance(more, list):
                stmts.extend(more)
    mod.dist_rank_funcs = _dist_rank_helpers(tree, mod)
    # stack items: (node, enclosing function, guarded, dead_if, class name, dist-only guard)
    stack: List[Tuple[ast.AST, Optional[FuncFacts], Optional[str], Optional[ast.AST], Optional[str], bool]] = [
        (tree, None, None, None, None, False)]
    while stack:
        node, func, guarded, dead_if, cls, dist = stack.pop()
        children: Iterable[ast.AST]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
            pos = a.posonlyargs + a.args
            defaults: Dict[str, ast.AST] = {p.arg: d for p, d in zip(pos[len(pos) - len(a.defaults):], a.defaults)}
            defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
            name = getattr(node, "name", "<lambda>")
            new = FuncFacts(node, name, mod, cls, params, defaults, parent=func)
            mod.funcs.append(new)
            for d in list(a.defaults) + [d for d in a.kw_defaults if d is not None] + \
                    list(getattr(node, "decorator_list", [])):
                stack.append((d, func, guarded, dead_if, cls, dist))
            if isinstance(node, ast.Lambda):
                new.returns.append(node.body)
                stack.append((node.body, new, None, None, None, False))
                continue
            body = node.body
            cut, cut_kind = early_return_index(body, mod.rank_aliases)
            for i, stmt in enumerate(body):
                stack.append((stmt, new, cut_kind if cut is not None and i > cut else None, None, None, False))
            continue
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    mod.class_consts[(node.name, stmt.targets[0].id)] = stmt.value
                stack.append((stmt, func, guarded, dead_if, node.name, dist))
            for d in node.bases + node.decorator_list + [k.value for k in node.keywords]:
                stack.append((d, func, guarded, dead_if, cls, dist))
            continue
        if isinstance(node, (ast.If, ast.IfExp)):
            rank = rank_kind(node.test, mod.rank_aliases)
            dead = has_dead_guard(node.test)
            if dead and isinstance(node, ast.If):
                mod.dead_ifs.append(node)
            inner_dead = node if dead else dead_if
            stack.append((node.test, func, guarded, dead_if, cls, dist))
            inner_dist = dist if rank is None else (dist or guarded is None) and _dist_rank_test(node.test, mod)
            branches: List[ast.AST] = []
            for part in (node.body, node.orelse):
                if isinstance(part, list):
                    branches.extend(part)
                else:
                    branches.append(part)
            for branch in branches:
                stack.append((branch, func, stronger(guarded, rank), inner_dead, cls, inner_dist))
            continue
        if isinstance(node, ast.Call):
            mod.calls.append(CallSite(node, mod, func, guarded, dead_if, dist and guarded is not None))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and func is not None:
            func.loops = True
        if isinstance(node, ast.Return) and func is not None and node.value is not None:
            func.returns.append(node.value)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                mod.assigns.append((func, t, node.value, dead_if))
                key = const_str(t.slice) if isinstance(t, ast.Subscript) else None
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and key:
                    mod.dict_items.setdefault((id(func), t.value.id), []).append((key, node.value, dead_if))
        if isinstance(node, ast.Constant) and node.value in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
            mod.cuda_visible = True
        elif isinstance(node, ast.Attribute) and node.attr == "visible_device_list":
            mod.cuda_visible = True
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) and \
                rank_kind(node.slice) is not None:
            mod.rank_slices = True
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call) and last_name(node.value.func) in (
                "array_split", "tensor_split", "chunk", "split", "partition") and rank_kind(node.slice) == "global":
            mod.rank_slices = True  # np.array_split(data, size)[rank]: this rank's part
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv)) and (
                isinstance(node.right, ast.Call) and last_name(node.right.func) in ("size", "get_world_size")
                or last_name(node.right).lower() in ("world_size", "num_replicas", "num_workers_total")):
            mod.size_divs = True
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            mod.refs.setdefault(id(func), set()).add(node.id)  # names are interned by the parser
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name):
            base = node.value.id
            ref = ("." if base in ("self", "cls") else base + ".") + node.attr
            mod.refs.setdefault(id(func), set()).add(intern(ref))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            mod.refs.setdefault(id(func), set()).add(intern("*." + node.attr))  # Runner().setup(), a.b.setup()
        for child in ast.iter_child_nodes(node):
            stack.append((child, func, guarded, dead_if, cls, dist))
    mod.calls.sort(key=lambda c: (c.node.lineno, c.node.col_offset))


#: a top-level function of at most this many lines may be a rank helper (``get_rank``, ``is_main_process``).
HELPER_LINES = 40


def _dist_rank_helpers(tree: ast.Module, mod: ModuleFacts) -> Set[str]:
    """Names of the module's short top-level functions that return torch.distributed's rank, or a
    test of it, and no other rank (torchvision's and DETR's ``get_rank`` / ``is_main_process``,
    which return 0 when the process group is not initialised: under Horovod, on every rank).
    Each return value is either such a read (through :func:`_dist_rank_test`, helpers included)
    or reads no rank at all (``return 0``); found to a fixpoint (helpers calling helpers)."""
    cands: Dict[str, List[ast.AST]] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                (stmt.end_lineno or stmt.lineno) - stmt.lineno <= HELPER_LINES:
            rets: List[ast.AST] = [n.value for n in ast.walk(stmt) if isinstance(n, ast.Return) and n.value is not None]
            if rets:
                cands[stmt.name] = rets
    out: Set[str] = set()
    mod.dist_rank_funcs = out
    for _ in range(4):
        before = len(out)
        for name, rets in cands.items():
            if name not in out and any(_dist_rank_test(r, mod) for r in rets) and \
                    all(_dist_rank_test(r, mod) or rank_kind(r) is None for r in rets):
                out.add(name)
        if len(out) == before:
            break
    return out


def _dist_rank_test(test: ast.AST, mod: ModuleFacts) -> bool:
    """Whether a rank test reads torch.distributed's rank (``dist.get_rank()``,
    ``torch.distributed.get_rank()``, ``get_rank`` imported from ``torch.distributed``, a helper of
    :attr:`ModuleFacts.dist_rank_funcs`) and no other."""
    seen = False
    for sub in ast.walk(test):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in mod.dist_rank_funcs:
            seen = True
        elif isinstance(sub, ast.Call) and last_name(sub.func) in ("get_rank", "rank", "local_rank", "get_local_rank"):
            f = sub.func
            if isinstance(f, ast.Attribute):
                base = ast.unparse(f.value)
                full = mod.module_aliases.get(base.split(".")[0], base.split(".")[0]) + base[len(base.split(".")[0]):]
                if full != "torch.distributed" and mod.from_imports.get(base, "") != "torch.distributed":
                    return False
            elif not isinstance(f, ast.Name) or not mod.from_imports.get(f.id, "").startswith("torch.distributed."):
                return False
            seen = True
    return seen


def note_import(mod: ModuleFacts, name: str, bound: str, line: int, aliased: bool) -> None:
    """Record ``import name [as bound]`` at ``line``: the alias, and whether it is Horovod (and which binding)."""
    mod.module_aliases[bound] = name if aliased else name.split(".")[0]
    if name == "horovod" or name.startswith("horovod."):
        if mod.hvd_import_line is None or line < mod.hvd_import_line:
            mod.hvd_import_line = line
        if name.startswith(HVD_BINDINGS):
            mod.hvd_binding = True
            mod.hvd_binding_name = mod.hvd_binding_name or name
            if "tensorflow" in name or "keras" in name:
                mod.hvd_framework = "tensorflow"
        mod.hvd_aliases.add(bound if aliased else name)


def note_from_import(mod: ModuleFacts, node: ast.ImportFrom) -> None:
    """Record ``from module import name [as local]``: the local names, and Horovod names and bindings."""
    module = node.module or ""
    for a in node.names:
        local = a.asname or a.name
        mod.from_imports[local] = f"{'.' * node.level}{module}.{a.name}" if module else f"{'.' * node.level}{a.name}"
    if node.level or not (module == "horovod" or module.startswith("horovod.")):
        return
    if mod.hvd_import_line is None or node.lineno < mod.hvd_import_line:
        mod.hvd_import_line = node.lineno
    for a in node.names:
        full = f"{module}.{a.name}"
        if module == "horovod":
            mod.hvd_aliases.add(a.asname or a.name)  # from horovod import torch as hvd
            if full.startswith(HVD_BINDINGS):
                mod.hvd_binding = True
                mod.hvd_binding_name = mod.hvd_binding_name or full
        else:
            mod.hvd_names[a.asname or a.name] = a.name
            if module.startswith(HVD_BINDINGS):
                mod.hvd_binding = True
                mod.hvd_binding_name = mod.hvd_binding_name or module
        if "tensorflow" in full or "keras" in full:
            mod.hvd_framework = "tensorflow"


_MULTINODE_RE = re.compile("|".join(MULTINODE_WORDS), re.IGNORECASE)
_GLOBAL_RANK_RE = re.compile(r"""["']RANK["']|\bglobal_rank\b""")
_LOCAL_RANK_RE = re.compile(r"""["']LOCAL_RANK["']""")
_IGNORE = re.compile(r"envtool:\s*ignore(?:\[([\w\-, ]*)\])?")


def syntax_issue(shown: str, line: int, message: str) -> ScanIssue:
    """The ``syntax`` issue of a file that does not parse (rule :mod:`envtool.checks.scan.rules.syntax`)."""
    return ScanIssue(shown, line, "syntax", message, "fix the syntax error (nothing else was checked)")


#: the size (characters) of the pieces :func:`parse_in_pieces` parses one at a time.
PIECE_CHARS = 64 * 1024
#: a line that may begin a top-level statement of its own (a name, a keyword or a decorator at
#: column 0), but not the rest of a compound statement (else, elif, except, finally).
_TOP_LINE = re.compile(r"^(?!(?:else|elif|except|finally)\b)[A-Za-z_@]", re.MULTILINE)


def parse_in_pieces(text: str, shown: str) -> ast.Module:
    """``ast.parse(text)``, in pieces of about :data:`PIECE_CHARS` cut before top-level statements,
    so that the parser's own working memory (as large again as the tree it returns) is held for one
    piece at a time instead of for the whole file. Each piece is parsed after as many blank lines as
    precede it, so line and column numbers are those of the whole file; the module returned is the
    one ``ast.parse`` gives. A cut that is not a statement boundary (inside a string or brackets,
    after a decorator or a line continuation) makes a piece fail to parse; then, as for a file with a
    ``__future__`` import or a syntax error, the whole text is parsed at once, as before.

    Raises:
        SyntaxError, RecursionError, MemoryError, ValueError: as ``ast.parse(text)`` does.
    """
    if len(text) <= PIECE_CHARS or "__future__" in text or "\r" in text:  # \r: a line end str.count misses
        return ast.parse(text, filename=shown)
    cuts = [0]
    for m in _TOP_LINE.finditer(text, PIECE_CHARS):
        if m.start() - cuts[-1] >= PIECE_CHARS:
            cuts.append(m.start())
    if len(cuts) == 1:
        return ast.parse(text, filename=shown)
    cuts.append(len(text))
    body: List[ast.stmt] = []
    line = 0
    try:
        for a, b in zip(cuts, cuts[1:]):
            piece = text[a:b]
            body.extend(ast.parse("\n" * line + piece, filename=shown).body)
            line += piece.count("\n")
    except Exception:  # a cut inside a statement: parse the whole text, as before
        return ast.parse(text, filename=shown)
    return ast.Module(body=body, type_ignores=[])


def parse_source(text: str, shown: str, path: Path) -> ModuleFacts:
    """Parse ``text`` (reported as ``shown``; ``path`` is the file it came from) and collect its facts.

    Returns:
        the module's facts; for a file that does not parse, facts with ``tree`` None and the
        ``syntax`` issue in ``syntax`` (never raises for bad source).
    """
    try:
        tree = parse_in_pieces(text, shown)
    except SyntaxError as exc:
        return ModuleFacts(path, shown, None, syntax_issue(shown, exc.lineno or 1, f"does not parse: {exc.msg}"))
    except (RecursionError, MemoryError):
        return ModuleFacts(path, shown, None, syntax_issue(shown, 1, "too deeply nested for Python's parser"))
    mod = ModuleFacts(path, shown, tree)
    mod.size = len(text)
    # code that names nodes, or reads both the global and the node-local rank: written for several nodes
    mod.multinode = bool(_MULTINODE_RE.search(text)) or bool(
        _GLOBAL_RANK_RE.search(text) and _LOCAL_RANK_RE.search(text))
    if "envtool:" in text:
        mod.ignores = suppressions(text)
    collect(mod)
    return mod


def suppressions(text: str) -> Dict[int, Set[str]]:
    """line → rules silenced by a ``# envtool: ignore[rule, …]`` comment on it (``ignore`` alone:
    every rule). Comments are found with :mod:`tokenize`, so the text inside a string never counts."""
    out: Dict[int, Set[str]] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type != tokenize.COMMENT:
                continue
            m = _IGNORE.search(tok.string)
            if m:
                rules = {r.strip() for r in (m.group(1) or "*").split(",") if r.strip()} or {"*"}
                out.setdefault(tok.start[0], set()).update(rules)
    except (tokenize.TokenError, SyntaxError):
        pass
    return out
