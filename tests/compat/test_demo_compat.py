# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The promise of meta/runtime.yml, kept: the demo on the oldest and the newest ansible-core.

scripts/test.sh (step compat) makes one virtualenv per ansible-core to test (gf_venv_compat in
scripts/lib.sh: the oldest release that requires_ansible allows, and the newest on the newest
Python found) and names them in GF_COMPAT_VENVS (':'-separated; default: the venv running
pytest). For each: every playbook and every role's task and handler file parses (a task file
that is only included at run time is not read by --syntax-check of the playbooks: that is how
loop_control.break_when, new in 2.18, reached 2.17 users), then scripts/demo.sh runs the whole
validate_fabric.yml on the demo cluster and its report is checked as the functional test checks
it, and for values that templates before 2.19 turned into text ('8' for 8), with
ansible-playbook's own version read from the head of the log.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.functional.test_demo_report import check_demo

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENVS = [path for path in os.environ.get('GF_COMPAT_VENVS', sys.prefix).split(':') if path]
# Two demos may run at once (pytest -n 2): each has its own perftest and beacon ports (the
# simulated nodes share 127.0.1.N), apart from those of the functional tests (18514-20515).
PORTS = 21514


def venv_versions(venv):
    """(ansible-core version, Python version) installed in venv."""
    out = subprocess.run([os.path.join(venv, 'bin', 'python'), '-c',
                          'import platform; from ansible.release import __version__; print(__version__, platform.python_version())'],
                         capture_output=True, text=True, check=True).stdout.split()
    return out[0], out[1]


def minimum_ansible():
    """The (major, minor) of requires_ansible in meta/runtime.yml, e.g. (2, 16) for '>=2.16.0'."""
    with open(os.path.join(REPO, 'meta', 'runtime.yml')) as handle:
        spec = yaml.safe_load(handle)['requires_ansible']
    match = re.match(r'\s*>=\s*(\d+)\.(\d+)', spec)
    assert match, 'requires_ansible %r does not start with >=X.Y' % spec
    return int(match.group(1)), int(match.group(2))


def version_tuple(version):
    return tuple(int(part) for part in re.findall(r'\d+', version)[:2])


@pytest.mark.parametrize('index', range(len(VENVS)), ids=[os.path.basename(venv) for venv in VENVS])
def test_demo_on_this_ansible_core(index, tmp_path):
    venv = VENVS[index]
    ansible_version, python_version = venv_versions(venv)
    assert version_tuple(ansible_version) >= minimum_ansible()
    # The first is the oldest that meta/runtime.yml promises. (One test per venv and nothing
    # else: pytest-xdist holds a worker's last test until every test is handed out, so a third
    # test would keep one demo waiting for the other.)
    if index == 0 and 'GF_COMPAT_VENVS' in os.environ:
        assert version_tuple(ansible_version) == minimum_ansible(), (venv, ansible_version, 'meta/runtime.yml promises %d.%d' % minimum_ansible())
    env = dict(os.environ, GF_VENV=venv, GF_DEMO_DIR=str(tmp_path / 'demo'), ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0',
               PATH=os.path.join(venv, 'bin') + os.pathsep + os.environ['PATH'])
    env.pop('VIRTUAL_ENV', None)
    check_parses(env, tmp_path)

    ports = ['-e', 'fabric_bench_beacon_port=%d' % (PORTS + 100 * index), '-e', 'fabric_bench_base_port=%d' % (PORTS + 100 * index + 1)]
    result = subprocess.run(['bash', os.path.join(REPO, 'scripts', 'demo.sh'), 'demo'] + ports, cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    check_demo(env['GF_DEMO_DIR'], result)
    with open(os.path.join(env['GF_DEMO_DIR'], 'report', 'report.json')) as handle:
        texts = list(typed_as_text(json.load(handle)))
    assert not texts, texts
    # The run was this venv's ansible-playbook on this venv's Python.
    with open(os.path.join(env['GF_DEMO_DIR'], 'ansible.log')) as handle:
        head = handle.read(4000)
    assert head.startswith('ansible-playbook [core %s]' % ansible_version), head[:200]
    match = re.search(r'^\s*python version = (\S+) .*\((\S+)\)$', head, re.M)
    assert match and match.group(1) == python_version and match.group(2).startswith(os.path.join(venv, 'bin') + os.sep), head
    print('ansible-core %s on Python %s: demo report as expected' % (ansible_version, python_version))


# What a template rendered to text before ansible-core 2.19 (no native types) looks like: a
# number, null or boolean as a string ('8', 'None'), which a consumer of report.json would misread.
AS_TEXT = re.compile(r'-?\d+(\.\d+)?|None|True|False')


def typed_as_text(value, path=''):
    """Paths of string values in a report that read as another JSON type; command lines excepted."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key != 'cmd':
                yield from typed_as_text(item, '%s.%s' % (path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from typed_as_text(item, '%s[%d]' % (path, index))
    elif isinstance(value, str) and AS_TEXT.fullmatch(value):
        yield '%s = %r' % (path, value)


def check_parses(env, tmp_path):
    """--syntax-check of every playbook, and of one that imports every role's task and handler
    file (imported, so that they are read; the roles include most of them at run time)."""
    tasks = sorted(glob.glob(os.path.join(REPO, 'roles', '*', 'tasks', '*.yml')))
    handlers = sorted(glob.glob(os.path.join(REPO, 'roles', '*', 'handlers', '*.yml')))
    every_file = tmp_path / 'every_task_file.yml'
    every_file.write_text(yaml.safe_dump([{
        'name': 'Every task and handler file of the roles', 'hosts': 'localhost', 'gather_facts': False,
        'tasks': [{'ansible.builtin.import_tasks': path} for path in tasks],
        'handlers': [{'ansible.builtin.import_tasks': path} for path in handlers]}]))
    playbooks = sorted(glob.glob(os.path.join(REPO, 'playbooks', '*.yml'))) + [str(every_file)]
    result = subprocess.run(['ansible-playbook', '-i', 'localhost,', '--syntax-check'] + playbooks, cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0 and tasks, result.stdout + result.stderr
