"""A site file's ``detect`` list: how a machine is recognised as the site's (:class:`DetectRule`)."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from envtool.spec import load
from envtool.spec.sites.reader import check_source, list_section

DETECT_KEYS = ("env", "hostname", "source")


@dataclass(frozen=True)
class DetectRule:
    """One rule of a site file's ``detect`` list: the site is this machine's when any rule matches.

    Attributes:
        env: ``(VAR, glob)`` pairs that must all match (``fnmatch`` on the variable's value; an
            unset variable never matches), or empty.
        hostname: a glob the host name (``socket.gethostname()``) must match, or None.
        source: id in the site file's ``sources`` the rule comes from, or None.
    """

    env: Tuple[Tuple[str, str], ...] = ()
    hostname: Optional[str] = None
    source: Optional[str] = None

    def matches(self, environ: Mapping[str, str], hostname: str) -> Optional[str]:
        """What matched (``NERSC_HOST=perlmutter``, ``hostname login2.summit``), or None.

        Args:
            environ: the environment to read (``os.environ``).
            hostname: this machine's host name.
        """
        for var, pattern in self.env:
            value = environ.get(var)
            if value is None or not fnmatch.fnmatchcase(value, pattern):
                return None
        if self.hostname is not None and not fnmatch.fnmatchcase(hostname.lower(), self.hostname.lower()):
            return None
        said = [f"{var}={environ.get(var, '')}" for var, _ in self.env]
        if self.hostname is not None:
            said.append(f"host name {hostname}")
        return " and ".join(said)


def parse_detect(spath: str, raw, source_ids) -> Tuple[DetectRule, ...]:
    """Parse the ``detect`` list (SpecError naming ``detect[i].<field>`` on a bad rule)."""
    items, line = list_section(spath, raw, "detect", "a list of rules, each with env: {VAR: glob} and/or hostname: glob",
                               "a mapping with env: {VAR: glob} and/or hostname: glob")
    rules_out = []
    for i, item in items:
        d = load._Reader(spath, item, f"detect[{i}]", line=line)
        d.check_keys(DETECT_KEYS)
        env = d.str_map("env")
        hostname = d.str("hostname")
        if not env and not hostname:
            raise d.error("env", "at least one of env: {VAR: glob} or hostname: glob in each rule")
        source = d.str("source")
        check_source(d, "source", source, source_ids)
        rules_out.append(DetectRule(env=env, hostname=hostname, source=source))
    return tuple(rules_out)
