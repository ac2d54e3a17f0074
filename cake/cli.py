"""The `cake` command: thin wrappers that print results and map CakeError to one line + exit 1."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import env
from .errors import CakeError, StaleTree, VerifyFailed
from .spec import Arch
from .tree import Tree, default_tree


def _tree(args: argparse.Namespace) -> Tree:
    return Tree(Path(args.tree).resolve()) if args.tree else default_tree()


def cmd_render(args: argparse.Namespace) -> int:
    from .render import render

    return _report_changes(
        render(_tree(args), args.package or None, check=args.check), args.check, "render"
    )


def cmd_migrate(args: argparse.Namespace) -> int:
    from .render import migrate

    return _report_changes(migrate(_tree(args), check=args.check), args.check, "migrate")


def _report_changes(changes: list, check: bool, verb: str) -> int:
    for c in changes:
        print(
            f"{'stale' if check else 'wrote'}: {c.path}"
            if c.action == "write"
            else f"{'would delete' if check else 'deleted'}: {c.path}"
        )
    if check and changes:
        raise StaleTree(
            f"{len(changes)} file(s) are out of date",
            fix=f"run `cake {verb}` and commit the result",
        )
    if not changes:
        print(f"cake {verb}: up to date")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from .verify import verify

    violations = verify(_tree(args))
    for v in violations:
        print(v)
    if violations:
        raise VerifyFailed(violations)
    print("cake verify: ok")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from .build import build, report

    archs = [Arch(a) for a in args.arch] if args.arch else list(Arch)
    start = time.perf_counter()
    built = build(
        _tree(args), archs, args.package or None, Path(args.out) if args.out else None, args.jobs
    )
    print(report(built))
    compiled = sum(b.how == "compiled" for b in built)
    where = f"bundle {args.out}" if args.out else f"cache {env.cache_dir()}"
    print(
        f"cake build: {len(built)} programs ({compiled} compiled) into {where} in {time.perf_counter() - start:.1f} s"
    )
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import doctor

    return doctor(_tree(args))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cake", description="ahead-of-time kernel package manager")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--tree", help="repository tree (default: CAKE_TREE or the package's checkout)")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render", help="render templates into artifacts/ and build.json")
    r.add_argument("--package", action="append", help="only this package (repeatable)")
    r.add_argument("--check", action="store_true", help="write nothing; fail if anything is stale")
    r.set_defaults(func=cmd_render)
    m = sub.add_parser("migrate", help="refresh the programs packages copy from each other")
    m.add_argument("--check", action="store_true", help="write nothing; fail if any copy is stale")
    m.set_defaults(func=cmd_migrate)
    sub.add_parser(
        "verify", help="recompute digests and identities; report violations"
    ).set_defaults(func=cmd_verify)
    b = sub.add_parser("build", help="compile programs ahead of time into the cache or a bundle")
    b.add_argument(
        "--arch", action="append", choices=[a.value for a in Arch], help="repeatable; default all"
    )
    b.add_argument("--package", action="append", help="only this package (repeatable)")
    b.add_argument("--out", help="write a relocatable bundle here (use it with CAKE_BUNDLE_DIR)")
    b.add_argument(
        "--jobs", type=int, default=0, help="parallel compiles (default CAKE_JOBS or #cores)"
    )
    b.set_defaults(func=cmd_build)
    sub.add_parser(
        "doctor", help="what this machine is, and what each record would select"
    ).set_defaults(func=cmd_doctor)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CakeError as exc:
        if args.debug:
            raise
        print(f"cake: error: {exc.one_line()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
