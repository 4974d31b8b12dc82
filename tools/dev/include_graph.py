#!/usr/bin/env python3
"""include_graph.py — the folder-level #include graph of core/, and its cycles.

core/'s folders are layers: a folder may include headers of the folders below it, never of one
above, so each can be read, tested and changed with only what is below it in mind (the order is
in docs/architecture.md, "Layering").  An include of core/A/x.h from a file in core/B/ is an
edge B -> A.  This script finds the strongly connected components of that graph; any component
of more than one folder is a cycle, printed with the includes that make it, and the exit status
is 1.  Debian's python3 only, no other package.

    tools/dev/include_graph.py [ROOT]          # ROOT: the repository (default: this script's ../..)
    tools/dev/include_graph.py --order [ROOT]  # also print the folders bottom-up

Quoted includes are resolved as the build resolves them: next to the including file first, then
from core/ (the core's include path); <...> and include/lmpress/ headers are outside core/ and
not edges.  Exit 0: no cycle; 1: a cycle; 2: usage or an unreadable tree.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(core, path):
    """core/A/x.c -> 'A'; core/x.c -> '.'."""
    rel = os.path.relpath(path, core)
    parts = rel.split(os.sep)
    return parts[0] if len(parts) > 1 else "."


def build_graph(core):
    """{folder: {included folder: [(file, include), ...]}} over every .c/.h under core/."""
    graph = {}
    for dirpath, _dirs, files in os.walk(core):
        for name in sorted(files):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, name)
            src = folder_of(core, path)
            graph.setdefault(src, {})
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            for inc in INCLUDE.findall(text):
                for base in (dirpath, core):
                    target = os.path.normpath(os.path.join(base, inc))
                    if os.path.isfile(target):
                        break
                else:
                    continue  # not a core header (include/lmpress/..., a generated file)
                if os.path.commonpath([target, core]) != core:
                    continue
                dst = folder_of(core, target)
                if dst != src:
                    graph[src].setdefault(dst, []).append((os.path.relpath(path, core), inc))
                graph.setdefault(dst, {})
    return graph


def strongly_connected(graph):
    """Tarjan's algorithm, iterative; returns the components, each a sorted list."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                comps.append(sorted(comp))
    return comps


def bottom_up(graph):
    """The folders in an order where each comes after every folder it includes (acyclic graph)."""
    order, done = [], set()

    def visit(node):
        if node in done:
            return
        done.add(node)
        for child in sorted(graph[node]):
            visit(child)
        order.append(node)

    for node in sorted(graph):
        visit(node)
    return order


def main(argv):
    args = [a for a in argv[1:] if a != "--order"]
    if len(args) > 1 or any(a.startswith("-") for a in args):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    core = os.path.realpath(os.path.join(root, "core"))
    if not os.path.isdir(core):
        print(f"include_graph: {core}: no core/ folder", file=sys.stderr)
        return 2
    graph = build_graph(core)
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    for comp in cycles:
        members = set(comp)
        print(f"include_graph: cycle among core/ folders: {' '.join(comp)}")
        for src in comp:
            for dst in sorted(graph[src]):
                if dst in members:
                    file, inc = graph[src][dst][0]
                    more = len(graph[src][dst]) - 1
                    print(f"  {src} -> {dst}: core/{file} includes \"{inc}\""
                          + (f" (and {more} more)" if more else ""))
    if cycles:
        return 1
    edges = sum(len(d) for d in graph.values())
    print(f"include_graph: {len(graph)} core/ folders, {edges} folder edges, no cycle")
    if "--order" in argv:
        print("bottom-up: " + " < ".join(bottom_up(graph)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
