# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The molecule netns scenario keeps its lab (rendered roots, SSH keys, the nodes' sshd logs) in
GF_MOLECULE_NETNS_DIR, which scripts/test.sh points into its own temp directory and destroy removes:
the test command leaves nothing behind (issue 23)."""

from __future__ import annotations

import os
import re

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = '${GF_MOLECULE_NETNS_DIR:-/tmp/gf-molecule-netns}'


def _read(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return handle.read()


def _strings(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


def test_every_lab_path_of_the_scenario_comes_from_the_variable():
    scenario = yaml.safe_load(_read('molecule', 'netns', 'molecule.yml'))
    inventory = scenario['provisioner']['inventory']
    assert inventory['group_vars']['all']['gf_molecule_netns_dir'] == LAB
    # Only the variable's own default names the fixed directory.
    assert all(s.count('/tmp/') == s.count(LAB) for s in _strings(scenario))
    paths = [s for s in _strings(inventory) if s.startswith(('/', '$')) and 'MOLECULE_PROJECT_DIRECTORY' not in s]
    assert len(paths) == 11 and all(p == '/usr/bin/python3' or p == LAB or p.startswith(LAB + '/') for p in paths), paths


def test_create_and_destroy_use_the_variable_and_destroy_removes_it_whole():
    for name in ('create_netns.yml', 'destroy_netns.yml'):
        assert '/tmp/' not in _read('molecule', 'shared', name), name
    tasks = yaml.safe_load(_read('molecule', 'shared', 'destroy_netns.yml'))[0]['tasks']
    removed = [t['ansible.builtin.file']['path'] for t in tasks if t.get('ansible.builtin.file', {}).get('state') == 'absent']
    assert removed == ['{{ gf_molecule_netns_dir }}']
    # The guard runs before anything is stopped or removed.
    assert 'ansible.builtin.assert' in tasks[0]


def test_the_test_command_puts_the_lab_and_ansible_home_in_its_temp_dir():
    script = _read('scripts', 'test.sh')
    assert re.search(r'^export ANSIBLE_HOME=\$base/', script, re.M)
    assert re.search(r'GF_MOLECULE_NETNS_DIR=\$lab molecule test', script) and 'lab=$base/' in script
    assert re.search(r"^trap 'rm -rf \"\$base\"' EXIT$", script, re.M)
