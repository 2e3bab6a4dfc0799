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
    from envtool.core.sizes import human
    from envtool.steps.lifecycle import list_environments

    rows = list_environments(sizes=not args.no_size)
    if args.json:
        print_json({"registry": str(registry_dir()), "environments": rows,
                    "total_bytes": sum(r["size"] or 0 for r in rows)})
        return 0
    if not rows:
        print(f"no environments made by envtool found (registry {registry_dir()}; ./envs)")
        return 0
    table = [("PREFIX", "SPEC", "SIZE", "CREATED", "STATUS")]
    for r in rows:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"])) \
            if isinstance(r["created"], (int, float)) else "-"
        status = str(r["status"]) + (f" ({r['module']})" if r.get("module") and r["status"] == "published" else "")
        table.append((str(r["prefix"]), str(r["spec"] or "-"), human(r["size"]) if r["size"] is not None else "-",
                      created, status))
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    for row in table:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4])
    present = sum(r["size"] or 0 for r in rows)
    print(f"{len(rows)} environment(s), {human(present)}" + ("" if not args.no_size else " (not measured)"))
    return 0
