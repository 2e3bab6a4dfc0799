#!/usr/bin/env python3
"""Benchmark: precision and recall of ``envtool doctor --script`` on real projects and own scripts.

Issue 26 asks for precision >= 0.95 (debatable findings counted as false) and recall >= 0.9 at
``warn`` level. This script measures both, per level, on two sets:

* the *corpus* (``benchmarks/scan_corpus.yaml``): public training projects recorded as
  repository, full commit and file paths. Nothing of them is stored here: each project is
  materialised with ``git show COMMIT:PATH`` from a local mirror of its repository
  (``MIRROR/owner+name/repo``, a bare or normal git directory; the tool library's ``fetch``
  makes them) into a temporary directory, paths relative to the project's ``root``. Projects
  whose mirror or commit is missing are listed as *missing* and left out of the numbers.
* the *own* scripts (``tests/data/scan_own/``, expectations in ``expected.yaml``): each
  script is scanned alone.

Each project (or script) is scanned with ``python3 -m envtool doctor --only script --script
DIR --json`` from this checkout. Findings are matched to the judged risks of
``benchmarks/scan_truth.yaml`` (or ``expected.yaml``): same rule id, same file (relative to
the project), and line within ``--tolerance`` lines of the judged line (or of any line of a
list of acceptable lines; ``line: null`` matches any line of the file); each risk matches at most one finding and each finding at most one risk.

Two levels are scored:

* ``warn``: ``warn`` findings against risks judged ``warn``. A ``warn`` finding matching a
  risk judged only ``info`` (a judgement call, e.g. Adam-family learning-rate scaling) counts
  as a false positive, marked ``over-severe``.
* ``warn+info``: every finding against every judged risk.

Printed per set and in total: TP, FP, FN, precision, recall, then each FP and FN (project,
file:line, rule, message or reason) so that they can be judged. Exit status 0 (a benchmark,
not a test); 2 on bad arguments or an unreadable YAML file.

Issue 42 adds a second corpus (``benchmarks/scan_corpus2.yaml`` with ``scan_truth2.yaml``)
whose projects carry ``split: dev|heldout``. ``--corpus2`` selects those two files (``--corpus``
and ``--truth`` name any pair); ``--split dev|heldout`` scores one part only (exit status 2 if the
corpus has no ``split`` field). For each set the report gives, per rule and level, TP/FP/FN,
precision and recall; at ``warn`` level it also gives the precision with the ``over-severe``
findings (a ``warn`` on a risk judged ``info``, a judgement call) counted as true.

Usage: python3 benchmarks/score_scan.py [--mirror DIR] [--tolerance 3] [--only ID ...]
       [--corpus FILE --truth FILE | --corpus2] [--split dev|heldout]
       [--rules RULE ...] [--alias FOUND=TRUTH ...] [--no-own] [--no-corpus] [--json] [--keep DIR]
  --alias maps a rule id the scanner reports onto the id used in the truth file (e.g. when
  the scanner names a rule differently), repeatable.
  --mirror defaults to $ENVTOOL_SCAN_MIRROR, else /work/.mirror.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import yaml

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "benchmarks" / "scan_corpus.yaml"
TRUTH = REPO / "benchmarks" / "scan_truth.yaml"
CORPUS2 = REPO / "benchmarks" / "scan_corpus2.yaml"
TRUTH2 = REPO / "benchmarks" / "scan_truth2.yaml"
SPLITS = ("dev", "heldout")
OWN = REPO / "tests" / "data" / "scan_own"
LEVELS = ("warn", "info")
#: rule id -> [TP, FP, FN] at warn level, over every set scored.
RULE_COUNTS: Dict[str, List[int]] = {}
#: (set, level) -> rule id -> [TP, FP, FN, over-severe FP]: the per-rule figures of each set.
RULE_SETS: Dict[Tuple[str, str], Dict[str, List[int]]] = {}
#: launches of the first truth file, plus those scan_truth2.yaml adds (srun-ddp: DDP started by srun
#: without MPI; deepspeed: the deepspeed launcher; tf-mwms: MultiWorkerMirroredStrategy workers).
LAUNCHES = {"horovod", "mpi-ddp", "torchrun-ddp", "mp.spawn", "lightning", "single-node", "mixed",
            "srun-ddp", "deepspeed", "tf-mwms"}
#: rule ids the truth files may use: the scan's current ones, the ones issue 26 item 1 adds (named in
#: the header of scan_truth.yaml) and the classes issue 42 names (header of scan_truth2.yaml).
RULES = {"dataloader-workers", "dead-supports-context", "fork-start-method", "no-main-guard", "lr-not-scaled",
         "no-broadcast", "checkpoint-all-ranks", "syntax", "hvd-init-missing", "hvd-init-late", "no-gpu-pinning",
         "optimizer-not-wrapped", "data-not-sharded", "checkpoint-local-rank",
         "sampler-no-set-epoch", "unseeded-split", "log-all-ranks", "download-all-ranks"}


def corpus_errors(corpus: dict) -> list:
    """Problems in a parsed scan_corpus.yaml, one string per problem naming the project and field."""
    errors, seen = [], set()
    projects = corpus.get("projects") if isinstance(corpus, dict) else None
    if not isinstance(projects, list) or not projects:
        return ["projects: expected a non-empty list"]
    for i, p in enumerate(projects):
        if not isinstance(p, dict):
            errors.append(f"projects[{i}]: expected a mapping (id, repo, commit, root, files)")
            continue
        pid = p.get("id")
        where = f"projects[{i}] ({pid})"
        if not isinstance(pid, str) or not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", pid):
            errors.append(f"{where}: id: expected lower-case letters, digits, '.', '-'")
        if pid in seen:
            errors.append(f"{where}: id: duplicate")
        seen.add(pid)
        if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", str(p.get("repo", ""))):
            errors.append(f"{where}: repo: expected owner/name")
        if not re.fullmatch(r"[0-9a-f]{40}", str(p.get("commit", ""))):
            errors.append(f"{where}: commit: expected 40 hex digits")
        root = p.get("root", "")
        if not isinstance(root, str) or root.startswith("/") or ".." in root.split("/"):
            errors.append(f"{where}: root: expected a relative path inside the repository")
            continue
        if "split" in p and p["split"] not in SPLITS:
            errors.append(f"{where}: split: {p['split']!r} is not one of {list(SPLITS)}")
        files = p.get("files")
        if not isinstance(files, list) or not files:
            errors.append(f"{where}: files: expected a non-empty list")
            continue
        for f in files:
            if not isinstance(f, str) or not f.endswith(".py") or f.startswith("/") or ".." in f.split("/") \
                    or (root and not f.startswith(root + "/")):
                errors.append(f"{where}: files: {f!r} is not a .py path under root {root!r}")
    return errors


def truth_errors(truth: dict, corpus: dict) -> list:
    """Problems in a parsed scan_truth.yaml checked against the corpus (projects, files, rule ids)."""
    errors = []
    projects = truth.get("projects") if isinstance(truth, dict) else None
    if not isinstance(projects, dict):
        return ["projects: expected a mapping of project id to judgement"]
    by_id = {p["id"]: p for p in corpus.get("projects") or [] if isinstance(p, dict) and "id" in p}
    for pid in sorted(set(by_id) - set(projects)):
        errors.append(f"{pid}: no judgement in the truth file")
    for pid, t in projects.items():
        if pid not in by_id:
            errors.append(f"{pid}: not a project of the corpus")
            continue
        if not isinstance(t, dict):
            errors.append(f"{pid}: expected a mapping")
            continue
        if t.get("launch") not in LAUNCHES:
            errors.append(f"{pid}: launch: {t.get('launch')!r} is not one of {sorted(LAUNCHES)}")
        if not str(t.get("judgement", "")).strip():
            errors.append(f"{pid}: judgement: empty")
        if "split" in t and t["split"] != by_id[pid].get("split"):
            errors.append(f"{pid}: split: {t['split']!r} differs from the corpus's {by_id[pid].get('split')!r}")
        root = by_id[pid].get("root") or ""
        files = {f[len(root) + 1:] if root else f for f in by_id[pid]["files"]}
        risks = t.get("risks")
        if not isinstance(risks, list):
            errors.append(f"{pid}: risks: expected a list")
            continue
        for j, r in enumerate(risks):
            where = f"{pid}: risks[{j}]"
            if not isinstance(r, dict):
                errors.append(f"{where}: expected a mapping (rule, file, line, level, reason)")
                continue
            if r.get("rule") not in RULES:
                errors.append(f"{where}: rule: {r.get('rule')!r} is not a known rule id")
            if r.get("file") not in files:
                errors.append(f"{where}: file: {r.get('file')!r} is not one of the project's files")
            line = r.get("line")
            lines = line if isinstance(line, list) else [line]
            if line is not None and not all(isinstance(n, int) and n > 0 for n in lines):
                errors.append(f"{where}: line: expected a positive int, a list of them, or null")
            if r.get("level") not in ("warn", "info"):
                errors.append(f"{where}: level: expected warn or info")
            if not str(r.get("reason", "")).strip():
                errors.append(f"{where}: reason: empty")
    return errors


def load_yaml(path: Path) -> dict:
    """The mapping in ``path``; SystemExit(2) with the file named when it cannot be read."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        print(f"score_scan: {path}: cannot read it ({exc})", file=sys.stderr)
        raise SystemExit(2) from None
    if not isinstance(data, dict):
        print(f"score_scan: {path}: expected a mapping at the top", file=sys.stderr)
        raise SystemExit(2)
    return data


def mirror_dir(mirror: Path, repo: str) -> Optional[Path]:
    """The git directory holding ``repo`` (``owner/name``) under ``mirror``, or None."""
    for cand in (mirror / repo.replace("/", "+") / "repo", mirror / repo.replace("/", "+")):
        if cand.is_dir() and subprocess.run(["git", "-C", str(cand), "rev-parse", "--git-dir"],
                                            capture_output=True).returncode == 0:
            return cand
    return None


def materialise(project: dict, mirror: Path, into: Path) -> Optional[str]:
    """Write the project's files into ``into`` (paths relative to its root); None, or why not."""
    git = mirror_dir(mirror, project["repo"])
    if git is None:
        return f"no mirror of {project['repo']} under {mirror} (fetch github:{project['repo']})"
    root = project.get("root") or ""
    for path in project["files"]:
        got = subprocess.run(["git", "-C", str(git), "show", f"{project['commit']}:{path}"], capture_output=True)
        if got.returncode != 0:
            return f"{project['repo']}@{project['commit'][:12]}:{path}: {got.stderr.decode(errors='replace').strip()}"
        rel = path[len(root) + 1:] if root and path.startswith(root + "/") else path
        dest = into / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(got.stdout)
    return None


def scan(target: Path) -> Tuple[List[dict], Optional[str]]:
    """Findings of ``doctor --script target`` as dicts (path relative to target, line, rule, level, message).

    The adapter reads every doctor finding whose ``details.issues`` is a list, so that it keeps
    working when the scan's check id or its extra fields change.
    """
    cmd = [sys.executable, "-m", "envtool", "doctor", "--only", "script", "--script", str(target), "--json"]
    got = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    try:
        report = json.loads(got.stdout)
    except ValueError:
        return [], f"doctor exit {got.returncode}, no JSON: {got.stderr.strip()[-300:]}"
    out = []
    base = target if target.is_dir() else target.parent
    for f in report.get("findings") or []:
        issues = (f.get("details") or {}).get("issues")
        if not isinstance(issues, list):
            continue
        for i in issues:
            path = str(i.get("path") or i.get("file") or "")
            try:
                path = str(Path(path).resolve().relative_to(base.resolve()))
            except ValueError:
                pass
            out.append({"file": path, "line": i.get("line"), "rule": i.get("rule") or i.get("id"),
                        "level": i.get("level") or i.get("severity") or "warn", "message": i.get("message", "")})
    if not out and report.get("error"):
        return [], f"doctor error: {report.get('error')}"
    return out, None


def match(findings: List[dict], risks: List[dict], tol: int) -> Tuple[List[Tuple[dict, dict]], List[dict], List[dict]]:
    """Pairs (finding, risk), unmatched findings, unmatched risks; closest lines are paired first."""
    cands = []
    for fi, f in enumerate(findings):
        for ri, r in enumerate(risks):
            if f["rule"] != r["rule"] or f["file"] != r["file"]:
                continue
            lines = r.get("line")
            if lines is None:
                cands.append((tol + 1, fi, ri))
                continue
            lines = lines if isinstance(lines, list) else [lines]
            dist = min(abs(f["line"] - n) for n in lines) if isinstance(f["line"], int) else tol + 1
            if dist <= tol:
                cands.append((dist, fi, ri))
    used_f, used_r, pairs = set(), set(), []
    for _, fi, ri in sorted(cands):
        if fi in used_f or ri in used_r:
            continue
        used_f.add(fi)
        used_r.add(ri)
        pairs.append((findings[fi], risks[ri]))
    return (pairs, [f for i, f in enumerate(findings) if i not in used_f],
            [r for i, r in enumerate(risks) if i not in used_r])


class Tally:
    """TP/FP/FN counts and the FP/FN lists of one set at one level."""

    def __init__(self) -> None:
        self.tp = 0
        self.over = 0  # false positives that are warn findings on risks judged info
        self.fp: List[str] = []
        self.fn: List[str] = []

    def line(self, name: str) -> str:
        fp, fn = len(self.fp), len(self.fn)
        prec = self.tp / (self.tp + fp) if self.tp + fp else 1.0
        rec = self.tp / (self.tp + fn) if self.tp + fn else 1.0
        text = (f"{name:<22} TP {self.tp:>3}  FP {fp:>3}  FN {fn:>3}  precision {prec:.2f} "
                f"({self.tp}/{self.tp + fp})  recall {rec:.2f} ({self.tp}/{self.tp + fn})")
        if self.over:
            lenient = (self.tp + self.over) / (self.tp + fp)
            text += f"  precision with over-severe as true {lenient:.2f}"
        return text

    def as_dict(self) -> dict:
        fp, fn = len(self.fp), len(self.fn)
        return {"tp": self.tp, "fp": fp, "fn": fn, "over_severe": self.over,
                "precision": round(self.tp / (self.tp + fp), 3) if self.tp + fp else 1.0,
                "precision_over_severe_true": round((self.tp + self.over) / (self.tp + fp), 3) if self.tp + fp else 1.0,
                "recall": round(self.tp / (self.tp + fn), 3) if self.tp + fn else 1.0,
                "false_positives": self.fp, "false_negatives": self.fn}


def rule_table(counts: Dict[str, List[int]]) -> Dict[str, dict]:
    """Per-rule ``{tp, fp, fn, over_severe, precision, recall}`` from ``[TP, FP, FN, over]`` lists.

    Precision and recall are None where undefined (no finding, or no judged risk, of that rule).
    """
    out = {}
    for rule, (tp, fp, fn, over) in sorted(counts.items()):
        out[rule] = {"tp": tp, "fp": fp, "fn": fn, "over_severe": over,
                     "precision": round(tp / (tp + fp), 3) if tp + fp else None,
                     "recall": round(tp / (tp + fn), 3) if tp + fn else None}
    return out


def _rule_add(set_name: str, level: str, rule: str, col: int) -> None:
    RULE_SETS.setdefault((set_name, level), {}).setdefault(rule, [0, 0, 0, 0])[col] += 1


def score(pid: str, findings: List[dict], risks: List[dict], tol: int, tallies: Dict[str, Tally],
          set_name: str = "corpus") -> None:
    """Add one project's findings and judged risks to the ``warn`` and ``warn+info`` tallies.

    The per-rule counts go to ``RULE_COUNTS`` (``warn`` level, all sets) and to ``RULE_SETS``
    under ``(set_name, level)``.
    """
    def show_f(f, note=""):
        return f"{pid}: {f['file']}:{f['line']} [{f['rule']}] ({f['level']}){note} {f['message'][:140]}"

    def show_r(r):
        return f"{pid}: {r['file']}:{r.get('line')} [{r['rule']}] ({r.get('level', 'warn')}) {r.get('reason', '')}"

    warn_f = [f for f in findings if f["level"] == "warn"]
    warn_r = [r for r in risks if r.get("level", "warn") == "warn"]
    info_r = [r for r in risks if r.get("level", "warn") != "warn"]
    pairs, fps, fns = match(warn_f, warn_r, tol)
    for f, _ in pairs:
        RULE_COUNTS.setdefault(f["rule"], [0, 0, 0])[0] += 1
    for f in fps:
        RULE_COUNTS.setdefault(f["rule"], [0, 0, 0])[1] += 1
    for r in fns:
        RULE_COUNTS.setdefault(r["rule"], [0, 0, 0])[2] += 1
    t = tallies["warn"]
    t.tp += len(pairs)
    over, _, _ = match(fps, info_r, tol)
    over_ids = {id(f) for f, _ in over}
    t.over += len(over_ids)
    t.fp += [show_f(f, " over-severe" if id(f) in over_ids else "") for f in fps]
    t.fn += [show_r(r) for r in fns]
    for f, _ in pairs:
        _rule_add(set_name, "warn", f["rule"], 0)
    for f in fps:
        _rule_add(set_name, "warn", f["rule"], 1)
        if id(f) in over_ids:
            _rule_add(set_name, "warn", f["rule"], 3)
    for r in fns:
        _rule_add(set_name, "warn", r["rule"], 2)
    pairs, fps, fns = match(findings, risks, tol)
    t = tallies["warn+info"]
    t.tp += len(pairs)
    t.fp += [show_f(f) for f in fps]
    t.fn += [show_r(r) for r in fns]
    for f, _ in pairs:
        _rule_add(set_name, "warn+info", f["rule"], 0)
    for f in fps:
        _rule_add(set_name, "warn+info", f["rule"], 1)
    for r in fns:
        _rule_add(set_name, "warn+info", r["rule"], 2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", type=Path, default=Path(os.environ.get("ENVTOOL_SCAN_MIRROR", "/work/.mirror")))
    ap.add_argument("--corpus", type=Path, default=None, help="corpus file (default benchmarks/scan_corpus.yaml)")
    ap.add_argument("--truth", type=Path, default=None, help="truth file (default benchmarks/scan_truth.yaml)")
    ap.add_argument("--corpus2", action="store_true",
                    help="score the second corpus: benchmarks/scan_corpus2.yaml with scan_truth2.yaml")
    ap.add_argument("--split", choices=SPLITS,
                    help="score only the projects of this split (the corpus must have split fields)")
    ap.add_argument("--own", type=Path, default=OWN)
    ap.add_argument("--tolerance", type=int, default=3, help="lines a finding may be off a judged line (3)")
    ap.add_argument("--only", nargs="+", default=[], metavar="ID", help="score only these project ids / own files")
    ap.add_argument("--alias", action="append", default=[], metavar="FOUND=TRUTH")
    ap.add_argument("--rules", nargs="+", default=[], metavar="RULE",
                    help="score only these rule ids (findings and judged risks of other rules are ignored)")
    ap.add_argument("--no-own", action="store_true")
    ap.add_argument("--no-corpus", action="store_true")
    ap.add_argument("--keep", type=Path, help="materialise projects into this directory and keep them")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = ap.parse_args(argv)
    if args.corpus2 and (args.corpus or args.truth):
        ap.error("--corpus2 names both files; give it without --corpus/--truth")
    args.corpus = args.corpus or (CORPUS2 if args.corpus2 else CORPUS)
    args.truth = args.truth or (TRUTH2 if args.corpus2 else TRUTH)
    alias = {}
    for a in args.alias:
        if "=" not in a:
            ap.error(f"--alias {a}: expected FOUND=TRUTH")
        k, v = a.split("=", 1)
        alias[k] = v
    sets: Dict[str, Dict[str, Tally]] = {}
    missing, errors, per_project = [], [], {}

    def run_one(set_name, pid, target, risks):
        found, err = scan(target)
        if err:
            errors.append(f"{pid}: {err}")
        for f in found:
            f["rule"] = alias.get(f["rule"], f["rule"])
        if args.rules:
            found = [f for f in found if f["rule"] in args.rules]
            risks = [r for r in risks if r["rule"] in args.rules]
        tallies = sets.setdefault(set_name, {"warn": Tally(), "warn+info": Tally()})
        score(pid, found, risks, args.tolerance, tallies, set_name)
        per_project[pid] = {"findings": len(found), "warn": sum(f["level"] == "warn" for f in found),
                            "risks": len(risks)}

    work = args.keep or Path(tempfile.mkdtemp(prefix="score_scan."))
    try:
        if not args.no_corpus:
            corpus_doc, truth_doc = load_yaml(args.corpus), load_yaml(args.truth)
            bad = corpus_errors(corpus_doc)
            bad = bad or truth_errors(truth_doc, corpus_doc)
            if bad:
                print(f"score_scan: {args.corpus.name} / {args.truth.name}:\n  " + "\n  ".join(bad), file=sys.stderr)
                raise SystemExit(2)
            corpus, truth = corpus_doc["projects"], truth_doc["projects"]
            if args.split and not all("split" in p for p in corpus):
                print(f"score_scan: {args.corpus}: --split {args.split}: its projects have no 'split' field "
                      f"(expected split: dev|heldout on every project)", file=sys.stderr)
                raise SystemExit(2)
            set_name = f"corpus:{args.split}" if args.split else "corpus"
            for p in corpus:
                if args.only and p["id"] not in args.only:
                    continue
                if args.split and p["split"] != args.split:
                    continue
                if p["id"] not in truth:
                    missing.append(f"{p['id']}: no entry in {args.truth.name}")
                    continue
                into = work / p["id"]
                shutil.rmtree(into, ignore_errors=True)
                into.mkdir(parents=True)
                why = materialise(p, args.mirror, into)
                if why:
                    missing.append(f"{p['id']}: {why}")
                    continue
                run_one(set_name, p["id"], into, truth[p["id"]].get("risks") or [])
        if not args.no_own and (args.own / "expected.yaml").is_file():
            expected = load_yaml(args.own / "expected.yaml").get("scripts") or {}
            for name, exp in sorted(expected.items()):
                if args.only and name not in args.only:
                    continue
                risks = [dict(r, file=name, reason=exp.get("summary", "")) for r in (exp.get("risks") or [])]
                run_one("own", name, args.own / name, risks)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    total = {"warn": Tally(), "warn+info": Tally()}
    for tallies in sets.values():
        for lvl, t in tallies.items():
            total[lvl].tp += t.tp
            total[lvl].fp += t.fp
            total[lvl].fn += t.fn
    for tallies in sets.values():
        total["warn"].over += tallies["warn"].over
    per_rule = {s: {lvl: rule_table(RULE_SETS.get((s, lvl), {})) for lvl in ("warn", "warn+info")} for s in sets}
    if args.json:
        print(json.dumps({"sets": {s: {l: t.as_dict() for l, t in ts.items()} for s, ts in sets.items()},
                          "total": {l: t.as_dict() for l, t in total.items()}, "missing": missing,
                          "errors": errors, "projects": per_project, "tolerance": args.tolerance,
                          "corpus": str(args.corpus), "truth": str(args.truth), "split": args.split,
                          "per_rule": per_rule,
                          "per_rule_warn": {r: dict(zip(("tp", "fp", "fn"), c)) for r, c in sorted(RULE_COUNTS.items())}},
                         indent=1))
        return 0
    print(f"scored {len(per_project)} project(s)/script(s); line tolerance {args.tolerance}")
    if not args.no_corpus:
        print(f"corpus {args.corpus.name}, truth {args.truth.name}" + (f", split {args.split}" if args.split else ""))
    for lvl in ("warn", "warn+info"):
        print(f"\n== level {lvl}")
        for s, ts in sets.items():
            print(ts[lvl].line(s))
        print(total[lvl].line("total"))
    for s in sets:
        for lvl in ("warn", "warn+info"):
            print(f"\n== per rule, set {s}, level {lvl}")
            for rule, c in per_rule[s][lvl].items():
                prec = "-" if c["precision"] is None else f"{c['precision']:.2f}"
                rec = "-" if c["recall"] is None else f"{c['recall']:.2f}"
                over = f"  (over-severe {c['over_severe']})" if c["over_severe"] else ""
                print(f"{rule:<24} TP {c['tp']:>3}  FP {c['fp']:>3}  FN {c['fn']:>3}  precision {prec:>4}  "
                      f"recall {rec:>4}{over}")
    for lvl in ("warn", "warn+info"):
        for s, ts in sets.items():
            if ts[lvl].fp:
                print(f"\n-- {s} false positives at {lvl}:")
                print("\n".join("  " + x for x in ts[lvl].fp))
            if ts[lvl].fn:
                print(f"\n-- {s} false negatives at {lvl}:")
                print("\n".join("  " + x for x in ts[lvl].fn))
    if missing:
        print("\nMISSING (not scored):")
        print("\n".join("  " + m for m in missing))
    if errors:
        print("\nERRORS:")
        print("\n".join("  " + e for e in errors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
