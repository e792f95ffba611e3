# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The shape of plugins/, checked on every run of the test command (scripts/test.sh units):

- **Types**: mypy with mypy.ini over the whole plugins/ tree has no error. mypy.ini's base is
  mypy's default mode for every file; its ``[mypy-...]`` sections are the packages declared
  strict (every flag of ``--strict`` that mypy allows per module), which must also be fully
  annotated (ANNOTATED below says 1.0 for them).
- **Size of a function**: in each folder of LIMITS, no function (a method is one; a nested
  function counts in the one around it, as radon counts it) above its cyclomatic complexity
  (radon's ``cc_visit``) or its number of lines. EXEMPT names the functions above the limit
  today with their figures: one may shrink, never grow, and an entry that is gone or no longer
  above the limit fails the test until it is removed, so the list only gets shorter.
- **Annotated share**: in each folder of ANNOTATED, at least that share of its functions has
  every parameter and the return annotated (``__init__``'s return may be left out).
"""

from __future__ import annotations

import ast
import configparser
import os
import shutil
import subprocess
import sys

import pytest
from radon.complexity import cc_visit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MYPY_INI = os.path.join(REPO, 'mypy.ini')
PACKAGE = 'ansible_collections.hpc.gpu_fabric'

# folder: (most cyclomatic complexity, most lines) of one function.
LIMITS = {
    'plugins/plugin_utils/diagnosis': (25, 80),
    'plugins/plugin_utils/bench': (25, 80),
    'plugins/plugin_utils/report': (25, 80),
    'plugins/plugin_utils/fleet': (25, 80),
    'plugins/plugin_utils': (25, 80),
    'plugins/module_utils': (25, 80),
    'plugins/modules': (25, 80),
    'plugins/action': (25, 80),
    'plugins/filter': (25, 80),
}

# 'path:function': (complexity, lines) measured when it was listed; to be split, not to grow.
EXEMPT = {
    'plugins/action/culprit_search.py:ActionModule.run': (40, 64),
    'plugins/action/perftest_collect.py:ActionModule.run': (24, 82),
    'plugins/module_utils/_collective.py:judge_nodes': (33, 73),
    'plugins/module_utils/_ibdiag.py:parse_iblinkinfo': (30, 65),
    'plugins/module_utils/_ibdiag.py:parse_ibnetdiscover': (28, 60),
    'plugins/module_utils/_ibdiag.py:parse_perfquery': (27, 59),
    'plugins/module_utils/_ibdiag.py:topology': (40, 71),
    'plugins/module_utils/_nccl.py:_transport': (36, 102),
    'plugins/module_utils/_nccl.py:gpu_evidence': (55, 76),
    'plugins/module_utils/_nccl.py:parse_text': (38, 101),
    'plugins/module_utils/_perftest.py:parse_output': (40, 92),
    'plugins/module_utils/_rails.py:roles': (32, 50),
    'plugins/module_utils/_roce.py:parse_mlnx_qos': (33, 63),
    'plugins/module_utils/_roce.py:read_roce': (27, 45),
    'plugins/module_utils/_sequence.py:_step_tick': (31, 58),
    'plugins/modules/perftest_run.py:validate': (43, 58),
    'plugins/modules/roce_qos.py:main': (33, 58),
}

# folder (or file): the least share of its functions that is fully annotated.
ANNOTATED = {
    'plugins/module_utils': 0.3,
    'plugins/plugin_utils/report': 1.0,
    'plugins/plugin_utils/bench': 1.0,
    'plugins/plugin_utils/diagnosis/_findings.py': 1.0,
    'plugins/plugin_utils/diagnosis/_rule.py': 1.0,
    'plugins/plugin_utils/diagnosis/_search_findings.py': 1.0,
    'plugins/plugin_utils/diagnosis/_diagnose.py': 1.0,
    'plugins/plugin_utils/diagnosis/rules/_run.py': 1.0,
    'plugins/plugin_utils/diagnosis/_engine.py': 1.0,
    'plugins/plugin_utils/diagnosis/_linker.py': 1.0,
    'plugins/plugin_utils/diagnosis/_profile.py': 1.0,
    'plugins/plugin_utils/diagnosis/rules/_differential.py': 1.0,
    'plugins/plugin_utils/diagnosis/_pcie_rules.py': 1.0,
    'plugins/plugin_utils/diagnosis/rules/_bench.py': 1.0,
    'plugins/plugin_utils/diagnosis/rules/_collective.py': 1.0,
    'plugins/plugin_utils/diagnosis/rules/_window.py': 1.0,
    'plugins/plugin_utils/fleet': 1.0,
    'plugins/plugin_utils/_controller_watch.py': 1.0,
    'plugins/plugin_utils/_boot_script.py': 1.0,
    'plugins/filter/report.py': 1.0,
    'plugins/filter/fabric_summary.py': 1.0,
    'plugins/filter/offline_bench.py': 1.0,
    'plugins/filter/role_variables.py': 1.0,
    'plugins/filter/boot_script.py': 1.0,
    'plugins/filter/nccl_settings.py': 1.0,
    'plugins/action/fabric_report_write.py': 1.0,
    'plugins/action/fabric_output.py': 1.0,
    'plugins/action/fabric_console.py': 1.0,
}

# mypy's --strict, flag by flag (mypy --help), less the two that are global only
# (warn_unused_configs, warn_redundant_casts: mypy.ini's [mypy] sets them).
STRICT_FLAGS = ('disallow_any_generics', 'disallow_subclassing_any', 'disallow_untyped_calls', 'disallow_untyped_defs',
                'disallow_incomplete_defs', 'check_untyped_defs', 'disallow_untyped_decorators', 'warn_unused_ignores',
                'warn_return_any', 'no_implicit_reexport', 'strict_equality', 'extra_checks')


# -- the checkers --------------------------------------------------------------------------------

def sources(root, folder):
    """{path relative to root: text} of the .py files of ``folder`` (a folder or one file)."""
    top = os.path.join(root, folder)
    if os.path.isfile(top):
        paths = [top]
    else:
        paths = [os.path.join(where, name) for where, _dirs, names in os.walk(top) for name in names if name.endswith('.py')]
    found = {}
    for path in sorted(paths):
        with open(path, encoding='utf-8') as handle:
            found[os.path.relpath(path, root).replace(os.sep, '/')] = handle.read()
    return found


def measured(texts):
    """{'path:function': (complexity, lines)} of every function and method of ``texts`` {path: text}."""
    found = {}
    for path, text in texts.items():
        for block in cc_visit(text):
            if hasattr(block, 'methods'):   # a class: its methods come as functions of their own
                continue
            found['%s:%s' % (path, block.fullname)] = (block.complexity, block.endline - block.lineno + 1)
    return found


def over(figures, limit):
    """The entries of ``figures`` above ``limit`` (complexity, lines) in either."""
    return dict((name, (cc, lines)) for name, (cc, lines) in figures.items() if cc > limit[0] or lines > limit[1])


def limit_of(name, limits):
    """The limit of the deepest folder of ``limits`` that holds ``name`` ('path:function'), or None."""
    path = name.split(':', 1)[0]
    folders = [folder for folder in limits if path.startswith(folder.rstrip('/') + '/')]
    return limits[max(folders, key=len)] if folders else None


def shape_problems(figures, limits, exempt):
    """What breaks the limits, as messages: a function above its folder's limit and not exempt,
    an exempt one that grew, an exempt entry that is gone or no longer above the limit."""
    problems = []
    for name, figure in sorted(figures.items()):
        limit = limit_of(name, limits)
        if limit is None or not over({name: figure}, limit):
            continue
        if name not in exempt:
            problems.append('%s: complexity %d, %d lines; the limit is %d, %d lines' % ((name,) + figure + limit))
        elif figure[0] > exempt[name][0] or figure[1] > exempt[name][1]:
            problems.append('%s: complexity %d, %d lines; it was exempt at %d, %d and may not grow' % ((name,) + figure + exempt[name]))
    for name, figure in sorted(exempt.items()):
        limit = limit_of(name, limits)
        if name not in figures:
            problems.append('%s is exempt but no longer exists: remove it from EXEMPT' % name)
        elif limit is None or not over({name: figures[name]}, limit):
            problems.append('%s is exempt but within the limit now: remove it from EXEMPT' % name)
    return problems


def _fully_annotated(function, method):
    arguments = function.args.posonlyargs + function.args.args
    static = any(isinstance(d, ast.Name) and d.id == 'staticmethod' for d in function.decorator_list)
    if method and not static and arguments:
        arguments = arguments[1:]   # self or cls
    arguments = arguments + function.args.kwonlyargs + [a for a in (function.args.vararg, function.args.kwarg) if a]
    if any(argument.annotation is None for argument in arguments):
        return False
    return function.returns is not None or (function.name == '__init__' and bool(arguments))


def annotations(text):
    """(fully annotated, all) functions of ``text``, nested ones and methods included."""
    counts = [0, 0]

    def visit(node, in_class):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                counts[0] += _fully_annotated(child, in_class)
                counts[1] += 1
            visit(child, isinstance(child, ast.ClassDef))
    visit(ast.parse(text), False)
    return tuple(counts)


def annotated_share(texts):
    done = total = 0
    for text in texts.values():
        counts = annotations(text)
        done, total = done + counts[0], total + counts[1]
    return done / total if total else 1.0


def strict_sections(path):
    """{mypy module pattern: the strict flags its section lacks} of every [mypy-...] section."""
    config = configparser.ConfigParser()
    config.read(path)
    found = {}
    for section in config.sections():
        if section.startswith('mypy-'):
            for pattern in section[len('mypy-'):].split(','):
                found[pattern.strip()] = [flag for flag in STRICT_FLAGS if config.get(section, flag, fallback='False') != 'True']
    return found


def folder_of(pattern):
    """'ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report.*' -> 'plugins/plugin_utils/report';
    a module's pattern -> its file."""
    assert pattern.startswith(PACKAGE + '.'), pattern
    dotted = pattern[len(PACKAGE) + 1:]
    if dotted.endswith('.*'):
        return dotted[:-2].replace('.', '/')
    return dotted.replace('.', '/') + '.py'


def run_mypy(repo, config, scratch):
    """mypy over ``repo``'s plugins as the package ansible_collections.hpc.gpu_fabric.plugins ->
    (return code, output), through a link to ``repo`` in ``scratch``."""
    # mypy looks in its working directory first: the one above the test command's tree holds
    # ANSIBLE_HOME, a folder named ansible that would stand for ansible-core.
    base = os.path.join(scratch, 'tree')
    link = os.path.join(base, 'ansible_collections', 'hpc', 'gpu_fabric')
    if not os.path.lexists(link):
        os.makedirs(os.path.dirname(link))
        os.symlink(os.path.abspath(repo), link)
    command = [sys.executable, '-m', 'mypy', '--config-file', config, '--cache-dir', os.path.join(scratch, 'mypy-cache'),
               '--no-error-summary', '--hide-error-context', '-p', PACKAGE + '.plugins']
    out = subprocess.run(command, cwd=base, capture_output=True, text=True, check=False)
    return out.returncode, (out.stdout + out.stderr).strip()


# -- the tree ------------------------------------------------------------------------------------

def test_mypy_finds_no_error_in_plugins(tmp_path):
    if shutil.which('mypy') is None and subprocess.run([sys.executable, '-m', 'mypy', '--version'], capture_output=True, check=False).returncode:
        pytest.fail('mypy is not installed in %s: pip install -r requirements-dev.txt' % sys.prefix)
    code, output = run_mypy(REPO, MYPY_INI, str(tmp_path))
    assert code == 0 and 'error' not in output, output


def test_no_function_above_its_folders_limit():
    figures = {}
    for folder in LIMITS:
        figures.update(measured(sources(REPO, folder)))
    assert len(figures) > 500
    problems = shape_problems(figures, LIMITS, EXEMPT)
    assert problems == [], '\n'.join(problems)


def test_annotated_share_per_folder():
    low = {}
    for folder, floor in ANNOTATED.items():
        share = annotated_share(sources(REPO, folder))
        if share < floor:
            low[folder] = '%.2f, the floor is %.2f' % (share, floor)
    assert low == {}


def test_the_strict_packages_have_every_strict_flag_and_are_fully_annotated():
    sections = strict_sections(MYPY_INI)
    assert sections, 'mypy.ini declares no strict package'
    for pattern, missing in sections.items():
        assert missing == [], '%s lacks %s' % (pattern, ', '.join(missing))
        folder = folder_of(pattern)
        assert os.path.exists(os.path.join(REPO, folder)), pattern
        assert ANNOTATED.get(folder) == 1.0, '%s is strict in mypy.ini: ANNOTATED must say 1.0 for it' % folder


# -- the checkers on small sources: each fails when it should --------------------------------------

BRANCHY = '''
def branchy(x):
    if x == 1:
        return 1
    if x == 2:
        return 2
    for y in x:
        if y:
            return y
    return 0


class Thing:
    def small(self, a: int) -> int:
        return a
'''


def test_the_limits_checker_names_a_function_above_the_limit_an_exempt_one_that_grew_and_a_stale_entry():
    figures = measured({'pkg/a.py': BRANCHY})
    assert figures == {'pkg/a.py:branchy': (5, 9), 'pkg/a.py:Thing.small': (1, 2)}
    assert shape_problems(figures, {'pkg': (5, 9)}, {}) == []
    assert shape_problems(figures, {'pkg': (4, 80)}, {}) == ['pkg/a.py:branchy: complexity 5, 9 lines; the limit is 4, 80 lines']
    assert shape_problems(figures, {'pkg': (25, 8)}, {}) == ['pkg/a.py:branchy: complexity 5, 9 lines; the limit is 25, 8 lines']
    assert shape_problems(figures, {'pkg': (4, 80)}, {'pkg/a.py:branchy': (5, 9)}) == []
    assert shape_problems(figures, {'pkg': (4, 80)}, {'pkg/a.py:branchy': (4, 9)}) == [
        'pkg/a.py:branchy: complexity 5, 9 lines; it was exempt at 4, 9 and may not grow']
    assert shape_problems(figures, {'pkg': (25, 80)}, {'pkg/a.py:branchy': (5, 9), 'pkg/a.py:gone': (30, 9)}) == [
        'pkg/a.py:branchy is exempt but within the limit now: remove it from EXEMPT',
        'pkg/a.py:gone is exempt but no longer exists: remove it from EXEMPT']
    # The deepest folder's limit applies; a file outside every folder is not checked.
    assert limit_of('pkg/sub/a.py:f', {'pkg': (25, 80), 'pkg/sub': (10, 40)}) == (10, 40)
    assert limit_of('pkgs/a.py:f', {'pkg': (25, 80)}) is None


def test_the_annotation_count_wants_every_parameter_and_the_return():
    text = '''
def bare(a, b): pass
def half(a: int, b) -> None: pass
def no_return(a: int): pass
def full(a: int, *rest: str, key: bool = False, **more: int) -> None:
    def inner(): pass
class Thing:
    def __init__(self, a: int): pass
    def method(self) -> int: return 1
    @staticmethod
    def static(a) -> int: return a
    @classmethod
    def make(cls) -> 'Thing': return cls(1)
'''
    # full, __init__, method, make of 9 (inner, bare, half, no_return, static are not).
    assert annotations(text) == (4, 9)
    assert annotated_share({'a': text, 'b': 'def f() -> None: pass\n'}) == 0.5


def test_mypy_fails_on_an_unannotated_function_of_a_strict_package(tmp_path):
    repo = tmp_path / 'checkout'
    strict = repo / 'plugins' / 'plugin_utils' / 'report'
    strict.mkdir(parents=True)
    (strict / '_ok.py').write_text('from __future__ import annotations\n\n\ndef fine(a: int) -> int:\n    return a\n')
    (repo / 'plugins' / 'plugin_utils' / '_loose.py').write_text('def loose(a):\n    return a\n')
    config = repo / 'mypy.ini'
    config.write_text('[mypy]\nnamespace_packages = True\nexplicit_package_bases = True\n\n[mypy-%s.plugins.plugin_utils.report.*]\n%s\n'
                      % (PACKAGE, '\n'.join('%s = True' % flag for flag in STRICT_FLAGS)))
    assert strict_sections(str(config)) == {PACKAGE + '.plugins.plugin_utils.report.*': []}
    assert folder_of(PACKAGE + '.plugins.plugin_utils.report.*') == 'plugins/plugin_utils/report'
    assert folder_of(PACKAGE + '.plugins.plugin_utils._boot_script') == 'plugins/plugin_utils/_boot_script.py'
    code, output = run_mypy(str(repo), str(config), str(tmp_path / 'scratch'))
    assert code == 0, output
    (strict / '_bad.py').write_text('def bad(a):\n    return a\n')
    code, output = run_mypy(str(repo), str(config), str(tmp_path / 'scratch'))
    assert code == 1 and '_bad.py:1: error: Function is missing a type annotation' in output, output
    assert '_loose.py' not in output
