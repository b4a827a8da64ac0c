"""The grading engine's import graph: which of its modules import which, and in how many layers.

    python tools/import_graph.py [--package grader] [--dot]

Read from the sources with `ast` (nothing is imported). A module's layer is 0 when it
imports no other module of the package, else one more than the highest layer it imports;
a cycle is reported instead. Imports inside functions count too: they are seams as real
as the ones at the top of a file.

It also checks the floors of grader/ (PARTS, from the bottom): a module may import its own
part and the parts below it, never one above. Exit 1, with every such arrow named, when one
runs up or when there is a cycle; `make test` runs it.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# grader/'s parts from the bottom floor up (README, "How the grader is built"). A part is a
# subpackage, or a group of top-level modules: the core that every part uses, the command line
# that uses every part.
PARTS = [
    ("core", {"grader", "grader.assignment", "grader.bytecode", "grader.files"}),
    ("sandbox", {"grader.sandbox"}),
    ("gpu", {"grader.gpu"}),
    ("warm", {"grader.warm"}),
    ("grading", {"grader.grading"}),
    ("validate", {"grader.validate"}),
    ("course", {"grader.course"}),
    ("service", {"grader.service"}),
    ("summary", {"grader.summary"}),
    ("command line", {"grader.cli", "grader.__main__"}),
]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str, modules: set[str]) -> set[str]:
    """The package's modules that `path` (module `name`) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from . import vmm` imports the module vmm; `from .vmm import x` the module vmm
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:     # `from .sandbox.confine import x` -> grader.sandbox.confine
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph(package: Path) -> dict[str, set[str]]:
    files = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    return {name: imports_of(path, name, set(files)) for name, path in files.items()}


def layers(edges: dict[str, set[str]]) -> dict[str, int]:
    depth: dict[str, int] = {}
    visiting: list[str] = []

    def visit(name: str) -> int:
        if name in depth:
            return depth[name]
        if name in visiting:
            cycle = visiting[visiting.index(name):] + [name]
            raise ValueError("import cycle: " + " -> ".join(cycle))
        visiting.append(name)
        depth[name] = 1 + max((visit(t) for t in edges[name]), default=-1)
        visiting.pop()
        return depth[name]

    for name in edges:
        visit(name)
    return depth


def part_of(name: str, parts=PARTS) -> int | None:
    """The floor of a module: the part that holds it or the subpackage above it."""
    for floor, (_, members) in enumerate(parts):
        if any(name == m or name.startswith(m + ".") and m != "grader" for m in members):
            return floor
    return None


def arrows_up(edges: dict[str, set[str]], parts=PARTS) -> list[str]:
    """Every import that runs from a part to one above it, and every module in no part."""
    wrong = []
    for name in sorted(edges):
        floor = part_of(name, parts)
        if floor is None:
            wrong.append(f"{name} is in no part of PARTS (tools/import_graph.py): give it a floor")
            continue
        for target in sorted(edges[name]):
            up = part_of(target, parts)
            if up is not None and up > floor:
                wrong.append(f"{name} ({parts[floor][0]}) imports {target} ({parts[up][0]}), a floor above it")
    return wrong


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--package", default="grader", help="package folder, relative to the repository")
    ap.add_argument("--dot", action="store_true", help="print Graphviz DOT instead of the table")
    args = ap.parse_args(argv)
    edges = graph(REPO / args.package)
    try:
        depth = layers(edges)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    wrong = arrows_up(edges) if args.package == "grader" else []
    for line in wrong:
        print(f"import runs up: {line}", file=sys.stderr)
    if args.dot:
        print("digraph imports {\n  rankdir=BT;")
        for name in sorted(edges):
            for target in sorted(edges[name]):
                print(f'  "{name}" -> "{target}";')
        print("}")
        return 0
    arrows = sum(len(t) for t in edges.values())
    print(f"{len(edges)} modules, {max(depth.values()) + 1} layers, {arrows} arrows")
    for level in range(max(depth.values()) + 1):
        for name in sorted(n for n, d in depth.items() if d == level):
            short = sorted(t.removeprefix(args.package + ".") for t in edges[name])
            print(f"  {level}  {name.removeprefix(args.package + '.') or args.package:<28} -> {', '.join(short) or '-'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
