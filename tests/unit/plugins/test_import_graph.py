# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The import graph of plugins/: no cycle, no function-local import of a collection module, and
the node side never reaches the controller's code.

- A cycle (``_diagnose`` imports ``_fleet`` which imports ``_diagnose`` back) makes the import
  order decide what exists; a function-local import hides one (it was how ``_fleet`` re-ran
  ``_diagnose``'s rules). Every import of a collection module is at the top of its file.
- What a module imports, AnsiballZ packs and ships to the node (ansible-core
  executor/module_common.py ModuleDepFinder, which walks every import of the module and of the
  module_utils it reaches): the finding registry (plugin_utils/diagnosis/_findings.py) and plugin_utils are
  the controller's, so no module reaches them. Node-side code says what it found (facts, blocker
  kinds such as _gdr.peer_verdict's ``blocker``); the controller names the finding codes.
"""

from __future__ import annotations

import ast
import os

PLUGINS = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..', '..', 'plugins'))
PACKAGE = 'ansible_collections.hpc.gpu_fabric.plugins'
# Controller-only module_utils (docs/architecture.md): no module may import them, directly or
# through the module_utils it imports; nor plugin_utils.
CONTROLLER_ONLY = ('module_utils._rates',)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _modules():
    """{'module_utils._gdr': path} of every .py file below plugins/."""
    found = {}
    for folder, _dirs, files in os.walk(PLUGINS):
        for name in files:
            if name.endswith('.py') and name != '__init__.py':
                path = os.path.join(folder, name)
                found[os.path.relpath(path, PLUGINS)[:-3].replace(os.sep, '.')] = path
    return found


def _targets(node, name, known):
    """The collection modules an Import/ImportFrom of module ``name`` names ('module_utils._x')."""
    def inside(dotted):
        return dotted[len(PACKAGE) + 1:] if dotted.startswith(PACKAGE + '.') and dotted[len(PACKAGE) + 1:] in known else None
    if isinstance(node, ast.Import):
        found = [inside(alias.name) for alias in node.names]
    else:
        if node.level:
            parts = name.split('.')[:-node.level]
            base = '.'.join([PACKAGE] + parts + ([node.module] if node.module else []))
        else:
            base = node.module or ''
        # ``from package import _x`` names module _x; ``from package._x import name`` module _x.
        found = [inside('%s.%s' % (base, alias.name)) or inside(base) for alias in node.names]
    return sorted(set(module for module in found if module))


def graph(sources):
    """({module: set of modules it imports}, [(module, line, imported) of function-local imports])
    for ``sources`` {module name: source text}."""
    edges, local = {}, []

    def visit(name, node, nested):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _targets(child, name, sources):
                    edges.setdefault(name, set()).add(target)
                    if nested:
                        local.append((name, child.lineno, target))
            visit(name, child, nested or isinstance(child, SCOPES))
    for name, text in sorted(sources.items()):
        edges.setdefault(name, set())
        visit(name, ast.parse(text), False)
    return edges, local


def cycles(edges):
    """The strongly connected components of more than one module, or of one importing itself (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def connect(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))
    for node in sorted(edges):
        if node not in index:
            connect(node)
    return sorted(found)


def reached(edges, start):
    seen, todo = set(), [start]
    while todo:
        for other in edges.get(todo.pop(), ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


def _plugins_graph():
    return graph(dict((name, open(path).read()) for name, path in _modules().items()))


def test_no_import_cycle_among_the_plugins():
    edges, _local = _plugins_graph()
    assert len(edges) > 40 and 'plugin_utils.diagnosis._fleet' in edges['plugin_utils.diagnosis._engine']
    assert cycles(edges) == []


def test_no_function_local_import_of_a_collection_module():
    _edges, local = _plugins_graph()
    assert local == [], 'import these at the top of their file: %s' % ', '.join('%s:%d %s' % item for item in local)


def test_no_module_reaches_the_controllers_code():
    edges, _local = _plugins_graph()
    modules = [name for name in edges if name.startswith('modules.')]
    assert len(modules) >= 10
    for name in modules:
        shipped = reached(edges, name)
        assert 'module_utils._gdr' in shipped or name != 'modules.gdr_facts'
        assert not [m for m in shipped if m in CONTROLLER_ONLY or m.startswith('plugin_utils.')], name


def test_the_checks_see_a_cycle_a_local_import_and_a_module_reaching_the_registry():
    sources = {
        'plugin_utils._a': 'from %s.plugin_utils import _b\n' % PACKAGE,
        'plugin_utils._b': 'def rule():\n    from %s.plugin_utils._a import x\n    return x\n' % PACKAGE,
        'plugin_utils._c': 'from . import _a\n',
        'module_utils._x': 'from %s.module_utils import _findings, _y\n' % PACKAGE,
        'module_utils._y': 'from %s.module_utils._findings import finding as f\n' % PACKAGE,
        'module_utils._findings': '',
        'modules.m': 'import %s.module_utils._x\n' % PACKAGE,
    }
    edges, local = graph(sources)
    assert cycles(edges) == [['plugin_utils._a', 'plugin_utils._b']]
    assert local == [('plugin_utils._b', 2, 'plugin_utils._a')]
    assert edges['plugin_utils._c'] == {'plugin_utils._a'}
    assert edges['module_utils._x'] == {'module_utils._findings', 'module_utils._y'}
    assert edges['module_utils._y'] == {'module_utils._findings'}
    assert 'module_utils._findings' in reached(edges, 'modules.m')
