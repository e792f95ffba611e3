# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""README's tables say everything a user can run and set, and docs/roles.md every role variable.

- README "Content": a row `hpc.gpu_fabric.<name>` of kind module for every plugins/modules/*.py and
  plugins/action/*.py.
- README "Variables": every `gpu_fabric_*` variable the playbooks and roles read with `default(...)`
  or `is defined` (a variable a user may set), and every one a finding's remedy, a report message
  or an `-e name=value` example in the docs tells users to set.
- docs/roles.md "Variables": every role's variables, generated from its meta/argument_specs.yml
  (`PYTHONPATH=.collections python -m tests.unit.test_readme_tables` prints the table to paste).
- README "Content": every filter of plugins/filter; README "The simulator": every fault of tests/sim/faults.py.
- docs/architecture.md says what every file of plugins/module_utils, plugin_utils, action and filter
  is, and names no file that does not exist.
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import re

import yaml

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE_PREFIXES = tuple(sorted(os.path.basename(path) for path in glob.glob(os.path.join(REPO, 'roles', '*'))))
# A variable name: gpu_fabric_* or a role's prefix; not part of a longer name (__gpu_fabric_nodes is internal).
NAME = re.compile(r'(?<![\w.])((?:gpu_fabric|%s)_[a-z0-9_]+)' % '|'.join(ROLE_PREFIXES))
READ = re.compile(r'(?<![\w.])(gpu_fabric_[a-z0-9_]+)\s*(?:\|\s*default\(|is\s+(?:not\s+)?defined)')
# The controller's Python reading a variable from task_vars or hostvars: vars.get('gpu_fabric_x'), vars['gpu_fabric_x'].
READ_PY = re.compile(r"(?:\.get\(|\[)\s*'(gpu_fabric_[a-z0-9_]+)'")
# -e name=value in an example or a message.
SET_ON_COMMAND_LINE = re.compile(r'-e\s+((?:gpu_fabric|%s)_[a-z0-9_]+)=' % '|'.join(ROLE_PREFIXES))
# What the playbooks keep about a run in hostvars (set_fact / add_host / register), read with default() by the
# next stage: never a user's to set. Each must really be assigned in a playbook (checked below).
RUN_STATE = {
    'gpu_fabric_stages': 'the stages a node got through (validate.yml, benchmark.yml)',
    'gpu_fabric_failures': "the rescued tasks' failures of a node",
    'gpu_fabric_bench': "the benchmark judging's result (benchmark.yml, offline.yml: counts, console lines, bench.json's path)",
    'gpu_fabric_report': "the report action's result on localhost (report.yml: summary, what the exit policy matched, not_checked)",
    'gpu_fabric_offline_lost': 'a node offline.yml found in capture.json as not captured',
}


def _read(path):
    with open(path, encoding='utf-8') as handle:
        return handle.read()


def _table(text, heading):
    """The rows (lists of cells) of the first Markdown table after the heading line ``heading``."""
    lines = text.splitlines()
    if heading not in lines:
        return []
    start = lines.index(heading)
    rows, seen = [], False
    for line in lines[start + 1:]:
        if line.startswith('|'):
            seen = True
            cells = [cell.strip() for cell in re.split(r'(?<!\\)\|', line.strip())[1:-1]]
            if not set(''.join(cells)) <= set('-: '):
                rows.append(cells)
        elif seen or line.startswith('#'):
            break
    return rows[1:]    # without the header row


def _names(cell):
    return re.findall(r'`([^`]+)`', cell)


def readme_modules():
    return {name.split('.')[-1]: row[2] for row in _table(_read(os.path.join(REPO, 'README.md')), '## Content')
            if 'module' in row[1] for name in _names(row[0]) if name.startswith('hpc.gpu_fabric.')}


def readme_variables():
    return {name: row for row in _table(_read(os.path.join(REPO, 'README.md')), '### Variables') for name in _names(row[0])}


def roles_md_variables():
    return {name for row in _table(_read(os.path.join(REPO, 'docs', 'roles.md')), '## Variables') for name in _names(row[1])}


def plugin_names():
    return {os.path.splitext(os.path.basename(path))[0] for kind in ('modules', 'action')
            for path in glob.glob(os.path.join(REPO, 'plugins', kind, '**', '*.py'), recursive=True) if not path.endswith('__init__.py')}


def _ansible_files():
    """The playbooks and the roles' YAML and templates: where variables are read."""
    patterns = ['playbooks/*.yml', 'playbooks/vars/*.yml', 'playbooks/tasks/*.yml', 'validate_fabric.yml', 'roles/*/*/*.yml',
                'roles/*/templates/*.j2']
    return sorted(path for pattern in patterns for path in glob.glob(os.path.join(REPO, pattern)))


def read_variables():
    """{gpu_fabric_* name: [files]} the playbooks and roles read with default() or `is defined`, and the
    controller's plugins from task_vars or hostvars."""
    out = {}
    for path in _ansible_files():
        for name in READ.findall(_read(path)):
            out.setdefault(name, []).append(os.path.relpath(path, REPO))
    for path in glob.glob(os.path.join(REPO, 'plugins', '*', '*.py')):
        if os.path.basename(os.path.dirname(path)) in ('action', 'filter', 'plugin_utils'):
            for name in READ_PY.findall(_read(path)):
                out.setdefault(name, []).append(os.path.relpath(path, REPO))
    return out


def facts_keys():
    """The facts keys the modules return (gpu_fabric_ib, ...): results, not settings."""
    return {name for path in glob.glob(os.path.join(REPO, 'plugins', 'modules', '*.py'))
            for name in re.findall(r"ansible_facts=\{'(gpu_fabric_\w+)'", _read(path))}


def role_variables():
    """{role: {variable: option}} from every role's meta/argument_specs.yml, in its order."""
    out = {}
    for role in ROLE_PREFIXES:
        with open(os.path.join(REPO, 'roles', role, 'meta', 'argument_specs.yml')) as handle:
            out[role] = yaml.safe_load(handle)['argument_specs']['main']['options']
    return out


def _markup(text):
    # ansible-doc markup C(x), O(x), V(x), M(x), I(x), RV(x) -> `x`; a table cell holds no '|'.
    return re.sub(r'\b(?:C|O|V|M|I|RV)\(([^)]*)\)', r'`\1`', text).replace('|', '\\|')


def roles_table():
    """The variables table of docs/roles.md, one row per role variable."""
    rows = ['| role | variable | default | meaning |', '|---|---|---|---|']
    for role, options in role_variables().items():
        for name, option in options.items():
            description = option.get('description') or ''
            description = ' '.join(description) if isinstance(description, list) else description
            default = option.get('default')
            default = default if isinstance(default, str) and default else json.dumps(default)    # '' as ""
            rows.append('| `%s` | `%s` | `%s` | %s |' % (role, name, default.replace('|', '\\|'), _markup(' '.join(description.split()))))
    return '\n'.join(rows)


def test_every_module_is_in_the_readme():
    modules = readme_modules()
    missing, stale = sorted(plugin_names() - set(modules)), sorted(set(modules) - plugin_names())
    assert not missing, 'modules missing from README.md "## Content": %s' % ', '.join(missing)
    assert not stale, 'README.md "## Content" names modules that do not exist: %s' % ', '.join(stale)
    assert [name for name, what in modules.items() if len(what) < 20] == [], 'a module row without what it does'


def filter_names():
    """Every filter the collection's filter plugins provide (plugins/filter/*.py)."""
    names = set()
    for path in glob.glob(os.path.join(REPO, 'plugins', 'filter', '*.py')):
        name = os.path.splitext(os.path.basename(path))[0]
        if name != '__init__':
            names.update(importlib.import_module('ansible_collections.hpc.gpu_fabric.plugins.filter.' + name).FilterModule().filters())
    return names


def readme_filters():
    """The filters README.md "## Content" names in its filter rows: a row's `hpc.gpu_fabric.<name>`, and the `names`
    its text gives."""
    names = set()
    for row in _table(_read(os.path.join(REPO, 'README.md')), '## Content'):
        if 'filter' in row[1]:
            names.update(name.split('.')[-1] for cell in (row[0], row[2]) for name in _names(cell))
    return names


def test_every_filter_is_in_the_readme():
    missing = sorted(filter_names() - readme_filters())
    assert not missing, 'filters missing from README.md "## Content": %s' % ', '.join(missing)
    stale = sorted(name.split('.')[-1] for row in _table(_read(os.path.join(REPO, 'README.md')), '## Content')
                   if 'filter' in row[1] for name in _names(row[0])
                   if name.startswith('hpc.gpu_fabric.') and name.split('.')[-1] not in filter_names())
    assert not stale, 'README.md "## Content" names filters that do not exist: %s' % ', '.join(stale)


def catalog_faults():
    """The simulator's fault catalog (tests/sim/faults.py CATALOG), by the keys of its dict literals."""
    text = _read(os.path.join(REPO, 'tests', 'sim', 'faults.py'))
    return set(re.findall(r"^    '(\w+)': _fault\(", text, re.M))


def test_every_simulated_fault_is_in_the_readme():
    text = _read(os.path.join(REPO, 'README.md'))
    section = text[text.index('## The simulator'):text.index('## Tests')]
    listed = set(re.findall(r'`(\w+)`', section))
    missing = sorted(catalog_faults() - listed)
    assert not missing, 'faults of tests/sim/faults.py missing from README.md "## The simulator": %s' % ', '.join(missing)


def test_run_state_is_assigned_by_the_playbooks_not_by_users():
    text = ''.join(_read(path) for path in _ansible_files())
    for name in set(RUN_STATE) & set(read_variables()):
        assert re.search(r'^\s+(?:%s:|register: %s$)' % (name, name), text, re.M), \
            '%s is no longer assigned by a playbook: is it a user variable now?' % name


def test_every_variable_the_playbooks_read_is_in_the_readme():
    documented = set(readme_variables())
    read = read_variables()
    missing = {name: files for name, files in read.items() if name not in documented and name not in RUN_STATE
               and name not in facts_keys()}
    assert not missing, 'gpu_fabric_* variables read with default()/is defined but not in README.md "### Variables": %s' \
        % '; '.join('%s (%s)' % (name, ', '.join(sorted(set(files)))) for name, files in sorted(missing.items()))
    stale = sorted(documented - set(read))
    assert not stale, 'README.md "### Variables" lists variables no playbook reads: %s' % ', '.join(stale)


def test_every_variable_a_user_is_told_to_set_is_documented():
    documented = set(readme_variables()) | roles_md_variables()
    told = {}
    # The findings' remedies and docs (report.md, report.html, the console).
    for code in _findings.REGISTRY.values():
        for text in [code.doc, code.remedy] + list(code.remedies.values()) + list(code.other.values()):
            for name in NAME.findall(str(text)):
                told.setdefault(name, set()).add(code.code)
    # Messages of the controller code: the gpu_fabric_* names in them, less the facts keys, the
    # prom metric names and the groups offline.yml makes.
    metrics = set(re.findall(r'# TYPE (gpu_fabric_\w+)', _read(os.path.join(REPO, 'plugins', 'plugin_utils', 'report', '_report.py'))))
    groups = set(re.findall(r'groups: (gpu_fabric_\w+)', _read(os.path.join(REPO, 'playbooks', 'offline.yml'))))
    for path in glob.glob(os.path.join(REPO, 'plugins', 'plugin_utils', '**', '*.py'), recursive=True):
        for name in set(re.findall(r'(?<![\w.])(gpu_fabric_[a-z0-9_]+)', _read(path))) - metrics - groups - facts_keys() - set(RUN_STATE):
            told.setdefault(name, set()).add(os.path.relpath(path, REPO))
    # -e name=value anywhere a user reads it.
    for path in glob.glob(os.path.join(REPO, 'plugins', '**', '*.py'), recursive=True) + glob.glob(os.path.join(REPO, 'docs', '*.md')) \
            + [os.path.join(REPO, 'README.md')] + _ansible_files():
        for name in SET_ON_COMMAND_LINE.findall(_read(path)):
            told.setdefault(name, set()).add(os.path.relpath(path, REPO))
    missing = {name: sorted(where) for name, where in told.items() if name not in documented and name not in plugin_names()}
    assert not missing, 'variables users are told to set, documented neither in README.md nor in docs/roles.md: %s' \
        % '; '.join('%s (%s)' % (name, ', '.join(where)) for name, where in sorted(missing.items()))


def test_docs_roles_md_lists_every_role_variable():
    lines = _read(os.path.join(REPO, 'docs', 'roles.md')).splitlines()
    expected = roles_table().splitlines()
    start = lines.index(expected[0]) if expected[0] in lines else len(lines)
    end = next((at for at in range(start, len(lines)) if not lines[at].startswith('|')), len(lines))
    # On a difference: paste the output of `python -m tests.unit.test_readme_tables` into docs/roles.md.
    assert lines[start:end] == expected, 'docs/roles.md "## Variables" differs from the roles\' meta/argument_specs.yml'


def test_architecture_md_names_every_plugin_file_and_only_files_that_exist():
    text = _read(os.path.join(REPO, 'docs', 'architecture.md'))
    files = [path for kind in ('module_utils', 'plugin_utils', 'action', 'filter')
             for path in glob.glob(os.path.join(REPO, 'plugins', kind, '**', '*.py'), recursive=True) if not path.endswith('__init__.py')]
    missing = sorted(os.path.relpath(path, REPO) for path in files if '`%s`' % os.path.basename(path) not in text
                     and not re.search(r'`[\w/]*/%s`' % re.escape(os.path.basename(path)), text))
    assert not missing, 'docs/architecture.md does not say what these files are: %s' % ', '.join(missing)
    sources = [os.path.relpath(path, REPO) for top in ('plugins', os.path.join('tests', 'sim'))
               for path in glob.glob(os.path.join(REPO, top, '**', '*.py'), recursive=True)]
    basenames = {os.path.basename(path) for path in sources}
    # A bare name is a file below plugins/ or tests/sim/; a path is relative to the repository, or the end of the
    # path of such a file (rules/_node.py in the diagnosis' row).
    gone = sorted(name for name in set(re.findall(r'`([\w/.]+\.py)`', text))
                  if not (os.path.exists(os.path.join(REPO, name)) or any(path.endswith(os.sep + name) for path in sources)
                          if '/' in name else name in basenames))
    assert not gone, 'docs/architecture.md names files that do not exist: %s' % ', '.join(gone)


def test_the_table_parser_reads_what_it_is_given():
    # The checks above pass trivially if the parser finds no rows.
    assert len(readme_modules()) >= 10 and len(readme_variables()) >= 8 and len(roles_md_variables()) >= 50
    assert {'gpu_fabric_root', 'gpu_fabric_output_dir', 'gpu_fabric_discover_fabric'} <= set(read_variables())
    assert len(filter_names()) >= 40 and {'fabric_summary', 'role_variable_errors'} <= readme_filters()
    assert len(catalog_faults()) >= 28 and {'port_down', 'roce_congestion', 'gpu_link_narrow'} <= catalog_faults()


if __name__ == '__main__':
    print(roles_table())
