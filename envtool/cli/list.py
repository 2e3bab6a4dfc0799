"""``envtool list``: the environments envtool made or published, with spec, size, date and status."""
from __future__ import annotations

from envtool.cli.common import add_no_size, print_json


def register(sub) -> None:
    p = sub.add_parser("list", help="list the environments envtool made or published (spec, size, date, status)",
                       description="The environments envtool made or published for you: those recorded under "
                                   "$XDG_STATE_HOME/envtool/environments (~/.local/state/envtool/environments) by "
                                   "create and publish, and those under ./envs/. Each is checked against its own "
                                   ".envtool/create.json: 'missing' when it is gone, \"not envtool's\" when "
                                   "something else is there now. Sizes count hard-linked files once.")
    add_no_size(p, "the environments")
    p.set_defaults(func=run)


def run(args) -> int:
    import time

    from envtool.core.registry import registry_dir
    from envtool.core.term import table_width
    from envtool.core.sizes import human
    from envtool.steps.lifecycle.remove import list_environments

    rows = list_environments(sizes=not args.no_size)
    if args.json:
        print_json({"registry": str(registry_dir()), "environments": rows,
                    "total_bytes": sum(r["size"] or 0 for r in rows)})
        return 0
    if not rows:
        import textwrap

        text = f"no environments made by envtool found (registry {registry_dir()}; ./envs)"
        width = table_width()
        print("\n".join(textwrap.wrap(text, width, break_long_words=False)) if width else text)
        return 0
    table = [("PREFIX", "SPEC", "SIZE", "CREATED", "STATUS")]
    for r in rows:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"])) \
            if isinstance(r["created"], (int, float)) else "-"
        status = str(r["status"]) + (f" ({r['module']})" if r.get("module") and r["status"] == "published" else "")
        table.append((str(r["prefix"]), str(r["spec"] or "-"), human(r["size"]) if r["size"] is not None else "-",
                      created, status))
    for line in layout(table, table_width()):
        print(line)
    present = sum(r["size"] or 0 for r in rows)
    print(f"{len(rows)} environment(s), {human(present)}" + ("" if not args.no_size else " (not measured)"))
    return 0


def layout(table, width=None):
    """The lines of ``list``'s table: one row per environment when every line fits ``width``
    columns (or there is no limit: None), else one block per environment, its prefix on a line of
    its own and the other fields indented below it, wrapped at spaces to ``width``. A prefix is
    never cut (it is what ``envtool remove --prefix`` is given): one longer than ``width`` stays
    whole on its line.

    Args:
        table: rows of ``(PREFIX, SPEC, SIZE, CREATED, STATUS)`` strings, the header first.
        width: the columns available (:func:`envtool.core.term.table_width`), or None.
    Returns:
        the lines, without newlines.
    """
    import textwrap

    widths = [max(len(row[i]) for row in table) for i in range(4)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4] for row in table]
    if width is None or all(len(line) <= width for line in lines):
        return lines
    out = []
    for prefix, spec, size, created, status in table[1:]:
        out.append(prefix)
        details = f"spec {spec}, {size}, created {created}, {status}"
        out += textwrap.wrap(details, width, initial_indent="  ", subsequent_indent="    ",
                             break_on_hyphens=False) or ["  -"]
    return out
