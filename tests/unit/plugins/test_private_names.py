# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""No plugin uses another file's private names: ``from ..._x import _name`` and ``_x._name``
across files. A leading underscore keeps a name to its own file (PEP 8, "Descriptive: Naming
Styles"); what other files need is public there (``_process.Guard``, not ``_perftest._Guard``).
Modules named with an underscore (``_perftest``) are private to the collection, not to one
file, and may be imported by any plugin."""

from __future__ import annotations

import ast
import os

import pytest

PLUGINS = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..', '..', 'plugins'))
PACKAGE = 'ansible_collections.hpc.gpu_fabric.plugins'


def _sources():
    for folder, _dirs, files in os.walk(PLUGINS):
        for name in sorted(files):
            if name.endswith('.py'):
                yield os.path.join(folder, name)


def _private(name):
    return name.startswith('_') and not (name.startswith('__') and name.endswith('__'))


def _module_path(dotted):
    """Path of a module or package of the collection, or None when ``dotted`` is not one."""
    if dotted != PACKAGE and not dotted.startswith(PACKAGE + '.'):
        return None
    base = os.path.join(PLUGINS, *dotted[len(PACKAGE) + 1:].split('.')) if dotted != PACKAGE else PLUGINS
    for candidate in (base + '.py', os.path.join(base, '__init__.py')):
        if os.path.exists(candidate):
            return candidate
    return None


def _absolute(path, node):
    """The dotted module an ImportFrom names, relative imports resolved against ``path``."""
    if not node.level:
        return node.module or ''
    parts = os.path.relpath(os.path.dirname(path), PLUGINS).split(os.sep)
    parts = [] if parts == ['.'] else parts
    parts = parts[:len(parts) - (node.level - 1)]
    return '.'.join([PACKAGE] + parts + ([node.module] if node.module else []))


def violations(path, source=None):
    """['line: text'] of every use of another collection file's private name in ``path``."""
    tree = ast.parse(source if source is not None else open(path).read(), path)
    modules = {}  # local name -> file of the collection module it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            origin = _absolute(path, node)
            for alias in node.names:
                target = _module_path('%s.%s' % (origin, alias.name))
                if target is not None:  # a module: `from ...module_utils import _perftest`
                    modules[alias.asname or alias.name] = target
                elif _module_path(origin) not in (None, path) and _private(alias.name):
                    found.append('%d: from %s import %s' % (node.lineno, origin, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                target = _module_path(alias.name)
                if target is not None and alias.asname:
                    modules[alias.asname] = target
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and modules[node.value.id] != path and _private(node.attr)):
            found.append('%d: %s.%s' % (node.lineno, node.value.id, node.attr))
    return sorted(found)


@pytest.mark.parametrize('path', list(_sources()), ids=lambda path: os.path.relpath(path, PLUGINS))
def test_no_private_name_of_another_file(path):
    assert violations(path) == []


def test_the_check_finds_both_forms():
    """The check itself can fail: both forms, relative and absolute, are reported."""
    path = os.path.join(PLUGINS, 'modules', 'collective_bench.py')
    source = ('from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _process\n'
              'from ..module_utils._process import _die_with, Guard\n'
              'from ansible_collections.hpc.gpu_fabric.plugins.module_utils._process import _LIVE\n'
              'with _process._Guard():\n    _process.run([], 1, name=_process.__name__)\n')
    assert violations(path, source) == [
        '2: from ansible_collections.hpc.gpu_fabric.plugins.module_utils._process import _die_with',
        '3: from ansible_collections.hpc.gpu_fabric.plugins.module_utils._process import _LIVE',
        '4: _process._Guard',
    ]
