"""What ``publish`` and ``retire`` report (:mod:`envtool.steps.publish`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional

if TYPE_CHECKING:
    from envtool.steps.publish.retire import RetirePlan
    from envtool.steps.publish.workflow import PublishPlan

#: The marker of a published environment, inside it.
MARKER = ".envtool/publish.json"


@dataclass
class Published:
    """What :func:`publish` did with one spec.

    Attributes:
        spec: spec name.
        module: ``NAME/VERSION``.
        prefix: the environment.
        modulefile: the modulefile path.
        sbom: the SBOM path.
        action: ``published`` (new), ``replaced`` (``force``) or ``unchanged``.
        log: the build log, or None when nothing was built.
        seconds: wall time of this spec (seconds).
        lock: ``{"file": lock or None, "reason": …}``: where the packages came from (None when
            nothing was built).
        steps: ``"id: title"`` of each step ``create`` ran (or, for a dry run, would run).
        horovod: a dry run's look-ahead at the Horovod build: from a wheel cache or compiled
            (:func:`envtool.steps.create.horovod_build.forecast`), or None (no build, or not a dry run).
    """

    spec: str
    module: str
    prefix: Path
    modulefile: Path
    sbom: Path
    action: str
    log: Optional[Path] = None
    seconds: float = 0.0
    lock: Optional[Dict[str, object]] = None
    steps: List[str] = field(default_factory=list)
    horovod: Optional[Dict[str, object]] = None

    def to_dict(self) -> Dict[str, object]:
        """JSON-ready form."""
        return {"spec": self.spec, "module": self.module, "prefix": str(self.prefix),
                "modulefile": str(self.modulefile), "sbom": str(self.sbom), "action": self.action,
                "log": str(self.log) if self.log else None, "seconds": round(self.seconds, 1),
                "lock": self.lock, "steps": self.steps, "horovod": self.horovod}


@dataclass
class PublishResult:
    """Every spec's :class:`Published`, and the spider caches refreshed.

    Attributes:
        stacks: one per spec.
        spider_caches: Lmod spider caches refreshed (a dry run: that would be).
        dry_run: nothing was changed; ``changes`` says what would be.
        changes: for a dry run, ``{"path", "change" (create, replace, write, keep), "kind",
            "mode" (``ls -l`` form), "group", "note"}`` per path publish would touch or leave alone.
        plan: for a dry run, the plan that would run (:class:`PublishPlan
            <envtool.steps.publish.workflow.PublishPlan>`).
        log: the publish's own build log (each stack's create log is in its :class:`Published`).
        timings: seconds each step took, by step id.
    """

    stacks: List[Published] = field(default_factory=list)
    spider_caches: List[str] = field(default_factory=list)
    dry_run: bool = False
    changes: List[Dict[str, object]] = field(default_factory=list)
    plan: Optional["PublishPlan"] = None
    log: Optional[Path] = None
    timings: Dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, object]:
        """JSON-ready form: ``plan`` (the steps) on a dry run, ``log`` and ``timings`` after a run."""
        data: Dict[str, object] = {"ok": True, "stacks": [s.to_dict() for s in self.stacks],
                                   "spider_caches": self.spider_caches, "dry_run": self.dry_run}
        if self.dry_run:
            data["changes"] = self.changes
            data["plan"] = self.plan.to_dict() if self.plan else None
        else:
            data["log"] = str(self.log) if self.log else None
            data["timings"] = {k: round(v, 3) for k, v in self.timings.items()}
        return data


#: What a retire renames a path to while it removes it: ``.<name>.envtool-retire-<pid>`` beside it
#: (hidden: Lmod and Environment Modules skip dot-files that are not ``.version``/``.modulerc``).
RETIRE_TAG = ".envtool-retire-"


@dataclass
class RetireResult:
    """What :func:`retire` removed (or, for a dry run, would remove).

    Attributes:
        module: ``NAME/VERSION``.
        removed: the paths removed (environment, SBOM, modulefile, default marker).
        default: the default marker that named this version (``--force-default``), or None.
        dry_run: nothing was changed.
        spider_caches: Lmod spider caches refreshed.
        plan: for a dry run, the plan that would run (:class:`~envtool.steps.publish.retire.RetirePlan`);
            log: the retire's build log.
    """

    module: str
    removed: List[str] = field(default_factory=list)
    default: Optional[str] = None
    dry_run: bool = False
    spider_caches: List[str] = field(default_factory=list)
    plan: Optional["RetirePlan"] = None
    log: Optional[Path] = None

    def to_dict(self) -> Dict[str, object]:
        """JSON-ready form (with the ``plan`` on a dry run, the ``log`` after a run)."""
        data: Dict[str, object] = {"ok": True, "module": self.module, "removed": self.removed,
                                   "default": self.default, "dry_run": self.dry_run,
                                   "spider_caches": self.spider_caches}
        if self.dry_run:
            data["plan"] = self.plan.to_dict() if self.plan else None
        else:
            data["log"] = str(self.log) if self.log else None
        return data
