# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Every numeric and boolean role variable works in its string form (`-e name=value` gives a string).

Role argument validation (meta/argument_specs.yml) checks that '30' could be an int, but the variable
stays the string '30': Jinja arithmetic on it fails (`'int' + str`), a comparison compares text, and a
bare string in `when` is not a boolean. So every use in a Jinja expression goes through `| int`,
`| float` or `| bool`, unless it is the whole value of a module option or task keyword whose declared
type converts it (AnsibleModule converts by the option's type; async/retries/delay are int fields).
"""

from __future__ import annotations

import ast
import glob
import os
import re

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONVERTS = {'int': ('int', 'float'), 'float': ('float',), 'bool': ('bool',)}
# Keys whose value is a bare Jinja expression.
CONDITIONALS = ('when', 'that', 'failed_when', 'changed_when', 'until', 'break_when')
# Task keywords Ansible converts to int (FieldAttribute isa='int').
INT_KEYWORDS = ('async', 'retries', 'delay', 'poll', 'throttle')
BLOCK = re.compile(r'\{\{(.*?)\}\}|\{%(.*?)%\}', re.S)


def typed_variables():
    """{name: 'int'|'float'|'bool'} of every role's argument_specs."""
    out = {}
    for path in glob.glob(os.path.join(REPO, 'roles', '*', 'meta', 'argument_specs.yml')):
        with open(path) as handle:
            specs = yaml.safe_load(handle)['argument_specs']
        for spec in specs.values():
            for name, option in (spec.get('options') or {}).items():
                if option.get('type') in CONVERTS:
                    out[name] = option['type']
    return out


_MODULE_TYPES = {}


def module_option_types(fqcn):
    """{option: type} of the module ``fqcn`` (hpc.gpu_fabric.<name>) from its DOCUMENTATION."""
    if fqcn not in _MODULE_TYPES:
        with open(os.path.join(REPO, 'plugins', 'modules', fqcn.split('.')[-1] + '.py')) as handle:
            tree = ast.parse(handle.read())
        docs = [node.value.value for node in tree.body
                if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == 'DOCUMENTATION' for t in node.targets)]
        options = yaml.safe_load(docs[0]).get('options') or {}
        _MODULE_TYPES[fqcn] = dict((name, option.get('type', 'str')) for name, option in options.items())
    return _MODULE_TYPES[fqcn]


TYPED = typed_variables()
USE = re.compile(r'\b(%s)\b' % '|'.join(sorted(TYPED, key=len, reverse=True)))
CONVERTED = re.compile(r'\s*(?:\|\s*default\([^()]*\)\s*)?\|\s*(int|float|bool)\b|\s+is\s+(?:not\s+)?(?:none|defined|undefined)\b')
WHOLE = re.compile(r'^\s*\{\{\s*(\w+)(?:\s*\|\s*default\(\s*omit\s*(?:,\s*true\s*)?\))?\s*\}\}\s*$')


# Uses outside the roles that hand the value to a filter of ours that converts it (tested below).
FILTER_CONVERTS = {
    ('playbooks/benchmark.yml', 'fabric_bench_bw_ratio'), ('playbooks/benchmark.yml', 'fabric_bench_gpu_ratio'),
    ('playbooks/benchmark.yml', 'fabric_bench_lat_max_us'),   # fabric_bench_judge: float() (raw arguments)
    ('playbooks/offline.yml', 'fabric_bench_bw_ratio'), ('playbooks/offline.yml', 'fabric_bench_gpu_ratio'),
    ('playbooks/offline.yml', 'fabric_bench_lat_max_us'),   # fabric_bench_judge: float() (raw arguments)
    ('playbooks/offline.yml', 'fabric_collective_healthy_ratio'), ('playbooks/offline.yml', 'fabric_collective_warn_ratio'),   # offline_collective: float()
    ('roles/fabric_bench/tasks/main.yml', 'fabric_bench_bw_ratio'), ('roles/fabric_bench/tasks/main.yml', 'fabric_bench_gpu_ratio'),
    ('roles/fabric_bench/tasks/main.yml', 'fabric_bench_lat_max_us'),   # bench_threshold_errors: _bench.threshold, float()
    ('roles/fabric_collective/tasks/main.yml', 'fabric_collective_expected_busbw_gbs'),
    ('roles/fabric_collective/tasks/main.yml', 'fabric_collective_ranks_per_node'),   # collective_fleet: _tasks._number, float() / int()
    ('roles/fabric_collective/tasks/main.yml', 'fabric_collective_healthy_ratio'),
    ('roles/fabric_collective/tasks/main.yml', 'fabric_collective_warn_ratio'),   # collective_thresholds: _collective.thresholds, float()
}


def unconverted(expression, convertible=None):
    """The typed variables used in ``expression`` without a conversion -> [(name, excerpt)]."""
    bad = []
    # A name inside a string literal (a message) is text, not a use.
    expression = re.sub(r"'[^']*'|\"[^\"]*\"", "''", expression)
    for match in USE.finditer(expression):
        name = match.group(1)
        rest = expression[match.end():]
        found = CONVERTED.match(rest)
        if found and (found.group(1) is None or found.group(1) in CONVERTS[TYPED[name]]):
            continue
        if convertible and name == convertible:
            continue
        bad.append((name, expression[max(0, match.start() - 40):match.end() + 40].strip()))
    return bad


def _walk(node, where, module=None, key=None):
    """Yield (expression, convertible variable or None, where) for every Jinja use in a YAML tree."""
    if isinstance(node, dict):
        modules = [k for k in node if isinstance(k, str) and k.startswith('hpc.gpu_fabric.')]
        for name, value in node.items():
            if name == 'module_defaults' and isinstance(value, dict):
                for mod, args in value.items():
                    yield from _walk(args, where, mod, None)
            elif name in modules:
                yield from _walk(value, where, name, None)
            else:
                yield from _walk(value, where, module, name)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value, where, module, key)
    elif isinstance(node, str):
        if key in CONDITIONALS:
            yield node, None, where
            return
        whole = WHOLE.match(node)
        convertible = None
        if whole and whole.group(1) in TYPED:
            want = TYPED[whole.group(1)]
            declared = module_option_types(module).get(key) if module else ('int' if key in INT_KEYWORDS else None)
            if declared and (declared == want or (want == 'int' and declared == 'float')):
                convertible = whole.group(1)
        for block in BLOCK.finditer(node):
            yield block.group(1) or block.group(2), convertible, where


def uses():
    for path in sorted(glob.glob(os.path.join(REPO, 'roles', '*', '*', '*')) + glob.glob(os.path.join(REPO, 'playbooks', '*.yml'))
                       + glob.glob(os.path.join(REPO, '*.yml'))):
        rel = os.path.relpath(path, REPO)
        if '/defaults/' in rel or '/meta/' in rel or not os.path.isfile(path):
            continue
        with open(path) as handle:
            text = handle.read()
        if path.endswith('.yml'):
            yield from _walk(yaml.safe_load(text), rel)
        else:
            for block in BLOCK.finditer(text):
                yield block.group(1) or block.group(2), None, rel


def test_the_typed_variables_are_known():
    # What the test covers: a role that adds a number or a switch without a type in its argument_specs escapes it.
    assert {'fabric_bench_dead_after', 'fabric_bench_timeout', 'fabric_bench_all_sizes', 'memlock_systemd', 'roce_qos_priority',
            'fabric_collective_expected_busbw_gbs', 'ofed_peermem_rebuild_timeout'} <= set(TYPED)
    for path in glob.glob(os.path.join(REPO, 'roles', '*', 'defaults', 'main.yml')):
        with open(path) as handle:
            defaults = yaml.safe_load(handle) or {}
        for name, value in defaults.items():
            if isinstance(value, (bool, int, float)):
                assert name in TYPED or name == 'fabric_bench_seed', '%s: %s has no int/float/bool type in argument_specs' % (path, name)
    assert module_option_types('hpc.gpu_fabric.perftest_run')['dead_after'] == 'int'


def test_every_use_of_a_typed_variable_converts_its_string_form():
    bad = []
    count = 0
    for expression, convertible, where in uses():
        count += 1
        bad.extend('%s: %s in %r' % (where, name, excerpt) for name, excerpt in unconverted(expression, convertible)
                   if (where, name) not in FILTER_CONVERTS)
    assert count > 100
    assert not bad, '\n'.join(bad)


@pytest.mark.parametrize('expression, bad', [
    ('fabric_bench_timeout + 30', ['fabric_bench_timeout']),
    ('fabric_bench_timeout | int + 30', []),
    ('fabric_bench_iterations | default(omit, true)', ['fabric_bench_iterations']),
    ('memlock_systemd | bool', []),
    ('memlock_systemd | int', ['memlock_systemd']),
    ('fabric_collective_expected_busbw_gbs | float', []),
    ('fabric_collective_expected_busbw_gbs | int', ['fabric_collective_expected_busbw_gbs']),
    ('fabric_bench_bw_ratio is not none', []),
])
def test_the_check_itself(expression, bad):
    assert [name for name, _excerpt in unconverted(expression)] == bad


def test_the_filters_that_get_them_raw_convert_strings(monkeypatch):
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _offline
    from ansible_collections.hpc.gpu_fabric.plugins.filter import offline_bench
    assert _bench.thresholds({'bw_ratio': '0.5', 'gpu_ratio': '0.7', 'lat_max_us': '12'}) == {'bw_ratio': 0.5, 'gpu_ratio': 0.7, 'lat_max_us': 12.0}
    calls = []
    monkeypatch.setattr(_offline, 'collective_result', lambda results, nodes_ib, healthy, warn, refused: calls.append((healthy, warn)))
    offline_bench.offline_collective([], {}, [], '0.8', '0.6')
    assert calls == [(0.8, 0.6)]
