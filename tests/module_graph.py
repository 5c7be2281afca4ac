#!/usr/bin/env python3
"""The crate's module graph from its `crate::` paths (docs/layout.md).

Prints every import circle between modules (a module is a top-level module of `src/`,
or for `dhcp` and `dhcp6` one level deeper: `dhcp::shell`, `dhcp::engine`, ...) and
fails when there is one: modules in a circle can only be understood, tested and changed
together. It fails too when `config` imports anything but the leaves it may use: the
configuration is read by every protocol module, so it must not depend on one (a circle
through `config` makes every protocol change a config change). Test code (files named
`*tests.rs`, and a file's `#[cfg(test)]` module) is left out.

    tests/module_graph.py [SRC]      # SRC defaults to the crate's src/
"""

import os
import re
import sys

# What `config` may import: leaves that hold no protocol state.
CONFIG_MAY_USE = {"config", "options", "client_class", "mac", "ipxe", "confine", "limits"}
# Modules split one level deeper, where the circles used to be.
SPLIT = {"dhcp", "dhcp6"}

PATH = re.compile(r"\bcrate::([a-z_0-9]+)(?:::([a-z_0-9]+))?")
# `use crate::{a, b::c}` at the top of a file.
GROUP = re.compile(r"\buse crate::\{([^;]*)\};", re.S)


def node_of(parts):
    top = parts[0]
    if top in SPLIT and len(parts) > 1 and parts[1] not in ("mod",):
        return f"{top}::{parts[1]}"
    return top


def file_node(src, path):
    rel = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return None
    return node_of(rel)


def non_test_text(path):
    text = open(path, encoding="utf-8").read()
    cut = re.search(r"^#\[cfg\(test\)\]\s*\n\s*(pub(\(\w+\))? )?mod \w+", text, re.M)
    return text[: cut.start()] if cut else text


def edges(src):
    graph = {}
    for root, _dirs, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs") or name.endswith("tests.rs"):
                continue
            path = os.path.join(root, name)
            me = file_node(src, path)
            if me is None:
                continue
            text = non_test_text(path)
            targets = set()
            for m in PATH.finditer(text):
                parts = [p for p in m.groups() if p]
                targets.add(node_of(parts))
            for g in GROUP.finditer(text):
                for item in g.group(1).split(","):
                    parts = [p for p in re.split(r"::|\{|\s", item) if p][:2]
                    if parts and re.fullmatch(r"[a-z_0-9]+", parts[0]):
                        targets.add(node_of(parts))
            # A sub-module naming its own parent (`dhcp::shell` using `crate::dhcp::X`
            # where X is an item) is not an edge out.
            targets = {t for t in targets if t != me and not me.startswith(t + "::")}
            graph.setdefault(me, set()).update(targets)
    return graph


def circles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
    graph = edges(src)
    found = circles(graph)
    print(f"module graph: {len(graph)} modules, {sum(len(t) for t in graph.values())} edges, "
          f"{len(found)} import circle(s)")
    status = 0
    for comp in found:
        print("  circle: " + " <-> ".join(comp))
    if found:
        print("module graph: import circles are not allowed; move what both sides need "
              "to a module of its own (docs/layout.md)", file=sys.stderr)
        status = 1
    bad = sorted(t for t in graph.get("config", ()) if t not in CONFIG_MAY_USE)
    if bad:
        print(f"module graph: config imports {', '.join(bad)}; it may use only "
              f"{', '.join(sorted(CONFIG_MAY_USE - {'config'}))}", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
