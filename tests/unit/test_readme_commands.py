# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The commands README.md and docs/ give run as written: every `python -m tests.<bench|sim>.<name>` they
name is found from the checkout's root without PYTHONPATH (tests/bench/__init__.py makes the collection
importable) and answers --help; the simulator's render command runs as given."""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = re.compile(r'python3? -m (tests\.(?:bench|sim)\.\w+)')


def _docs():
    return [os.path.join(REPO, 'README.md')] + sorted(glob.glob(os.path.join(REPO, 'docs', '*.md')))


def documented_modules():
    found = set()
    for path in _docs():
        with open(path, encoding='utf-8') as handle:
            found.update(MODULE.findall(handle.read()))
    return sorted(found)


def _run(args, cwd=REPO):
    # As a user runs them: from the checkout's root, no PYTHONPATH (scripts/test.sh sets one for the tests).
    env = dict((k, v) for k, v in os.environ.items() if k != 'PYTHONPATH')
    return subprocess.run([sys.executable] + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_docs_name_the_measurements():
    # The check below passes trivially if the pattern finds nothing.
    assert {'tests.bench.diagnosis_accuracy', 'tests.bench.culprit_search', 'tests.sim.render', 'tests.sim.cluster'} \
        <= set(documented_modules())


@pytest.mark.parametrize('module', documented_modules())
def test_a_documented_module_runs_from_the_checkout_without_pythonpath(module):
    assert os.path.isfile(os.path.join(REPO, *module.split('.')) + '.py'), module
    result = _run(['-m', module, '--help'])
    assert result.returncode == 0 and 'usage:' in result.stdout, result.stdout + result.stderr


def test_the_render_command_of_the_readme_runs_as_written(tmp_path):
    with open(os.path.join(REPO, 'README.md'), encoding='utf-8') as handle:
        [line] = [text for text in handle.read().splitlines() if re.match(r'\S*python -m tests\.sim\.render ', text)]
    args = shlex.split(line)
    assert args[:3] == ['.venv/bin/python', '-m', 'tests.sim.render'], args
    dest = str(tmp_path / 'node')
    result = _run(['-m', 'tests.sim.render'] + [dest if arg.startswith('/tmp/') else arg for arg in args[3:]])
    assert result.returncode == 0, result.stdout + result.stderr
    # The node's root, with the fault injected.
    assert os.path.isdir(os.path.join(dest, 'sys', 'class', 'infiniband')), os.listdir(dest)


def test_diagnosis_accuracy_takes_a_subset():
    result = _run(['-m', 'tests.bench.diagnosis_accuracy', '--help'])
    assert '--quick' in result.stdout and '--fault' in result.stdout and '--jobs' in result.stdout
