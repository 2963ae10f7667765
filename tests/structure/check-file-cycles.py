#!/usr/bin/env python3
"""No circle of files that call or include each other (issue 26, item 1).

Builds a graph of the product code's files (lib/, daemon/, watcher/, hook/,
pcinumactl/, adapters/; never tests/) and reports every circle in it, as a
strongly connected component of more than one file, with the edges that
close it.  Exits 1 when there is one, 0 when there is none.

The graph's nodes are files, a header and its .c being two.  Its edges:

  include  A -> B.h     A (a .c or a .h) has '#include "B.h"' and B.h is a
                        project file.  Nothing leads from a header to its
                        .c, so a .c including its own header is no edge
                        back; a circle of includes is a circle of headers.
  call     A.c -> B.c   A.c's object file needs a symbol that B.c's object
                        defines (nm: undefined in one, defined and global
                        in the other), as the linker joins them.  Objects
                        come from the build directory's compile_commands.json.
                        A symbol that more than one product file defines
                        (main) resolves to the one in the caller's own
                        program, or is left out.

Usage: check-file-cycles.py --source-root DIR --build-root DIR
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys

PRODUCT_DIRS = ('lib', 'daemon', 'watcher', 'hook', 'pcinumactl', 'adapters')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def product_files(src):
    """Every .c and .h of the product folders, relative to src."""
    out = []
    for top in PRODUCT_DIRS:
        for dirpath, _, names in os.walk(os.path.join(src, top)):
            for n in names:
                if n.endswith(('.c', '.h', '.h.in')):
                    out.append(os.path.relpath(os.path.join(dirpath, n), src))
    return sorted(out)


def include_edges(src, files):
    """(A, B, '#include "x"') for each include of a project file; a name
    is looked up beside A, then in every product folder (the build's -I
    paths are these folders)."""
    by_name = collections.defaultdict(list)
    for f in files:
        name = f[:-3] if f.endswith('.h.in') else f
        by_name[os.path.basename(name)].append(f)
    edges = []
    for f in files:
        with open(os.path.join(src, f), encoding='utf-8', errors='replace') as fh:
            text = fh.read()
        for inc in INCLUDE.findall(text):
            beside = os.path.normpath(os.path.join(os.path.dirname(f), inc))
            if beside in files:
                target = beside
            elif beside + '.in' in files:
                target = beside + '.in'
            else:
                cands = by_name.get(os.path.basename(inc), [])
                if len(cands) != 1:
                    continue        # a system header, or not ours
                target = cands[0]
            if target != f:
                edges.append((f, target, '#include "%s"' % inc))
    return edges


def nm(obj, defined):
    args = ['nm', '-P', '-g'] + (['--defined-only'] if defined else ['--undefined-only']) + [obj]
    r = subprocess.run(args, capture_output=True, text=True, check=True)
    return [line.split()[0] for line in r.stdout.splitlines() if line.split()]


def call_edges(src, build):
    """(A.c, B.c, symbol) for each symbol A.c's object needs that B.c's
    defines."""
    with open(os.path.join(build, 'compile_commands.json'), encoding='utf-8') as fh:
        commands = json.load(fh)
    objects = []           # (source, object, target dir)
    for e in commands:
        source = os.path.relpath(os.path.normpath(os.path.join(e['directory'], e['file'])), src)
        if source.split(os.sep)[0] not in PRODUCT_DIRS:
            continue
        obj = os.path.normpath(os.path.join(e['directory'], e['output']))
        if not os.path.exists(obj):
            sys.exit('check-file-cycles: %s is not built (run ninja first)' % obj)
        objects.append((source, obj, os.path.dirname(obj)))
    definers = collections.defaultdict(set)     # symbol -> {(source, target dir)}
    for source, obj, target in objects:
        for sym in nm(obj, True):
            definers[sym].add((source, target))
    edges = set()
    for source, obj, target in objects:
        for sym in nm(obj, False):
            cands = definers.get(sym)
            if not cands:
                continue            # a library's (libc, libvirt...)
            files = {s for s, _ in cands}
            if len(files) > 1:
                files = {s for s, t in cands if t == target}
                if len(files) != 1:
                    continue
            (definer,) = files
            if definer != source:
                edges.add((source, definer, sym))
    return sorted(edges)


def components(nodes, graph):
    """Tarjan's strongly connected components (iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--source-root', required=True)
    ap.add_argument('--build-root', required=True)
    a = ap.parse_args()
    src, build = os.path.abspath(a.source_root), os.path.abspath(a.build_root)

    files = product_files(src)
    edges = include_edges(src, set(files)) + call_edges(src, build)
    graph = collections.defaultdict(set)
    why = collections.defaultdict(list)
    for f, t, w in edges:
        graph[f].add(t)
        why[(f, t)].append(w)
    nodes = set(files) | set(graph)
    for n in nodes:
        graph.setdefault(n, set())

    n_inc = sum(1 for e in edges if e[2].startswith('#include'))
    print('check-file-cycles: %d files, %d include edges, %d call edges'
          % (len(nodes), n_inc, len(edges) - n_inc))
    cycles = [c for c in components(nodes, graph) if len(c) > 1]
    for c in cycles:
        members = set(c)
        print('\ncircle of %d files: %s' % (len(c), ', '.join(c)))
        for f in c:
            for t in sorted(graph[f] & members):
                ws = why[(f, t)]
                shown = ', '.join(ws[:6]) + (', ... (%d in all)' % len(ws) if len(ws) > 6 else '')
                print('  %s -> %s: %s' % (f, t, shown))
    if cycles:
        print('\ncheck-file-cycles: %d circle(s): FAIL' % len(cycles))
        return 1
    print('check-file-cycles: no circle: ok')
    return 0


if __name__ == '__main__':
    sys.exit(main())
