# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Shared helpers: fixture files and simulated node roots."""

from __future__ import annotations

import copy
import os

import pytest

from tests.sim import faults, render

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures')


def fixture_path(*parts):
    return os.path.join(FIXTURES, *parts)


def fixture_text(*parts):
    """Fixture content without its '## source' / '## note' header lines."""
    with open(fixture_path(*parts)) as handle:
        return ''.join(line for line in handle if not line.startswith('## '))


def sysfs_ib_tree(name, root):
    """Materialise a sysfs_ib fixture ('<path under /sys/class/infiniband>: <content>') below root.

    A blank line adds a newline to the file before it: the fixtures mark captured
    files that ended with extra blank lines that way.
    """
    last = None
    for line in fixture_text('public', 'sysfs_ib', name).splitlines():
        if not line.strip():
            if last:
                with open(last, 'a') as handle:
                    handle.write('\n')
            continue
        rel, _sep, content = line.partition(': ')
        last = os.path.join(root, 'sys/class/infiniband', rel)
        os.makedirs(os.path.dirname(last), exist_ok=True)
        with open(last, 'w') as handle:
            handle.write(content + '\n')
    return root


@pytest.fixture(scope='session')
def sim_root(tmp_path_factory):
    """render(profile_name, *fault names) -> (root path, fault contexts); cached per combination."""
    cache = {}

    def make(profile_name, *fault_names):
        key = (profile_name,) + fault_names
        if key not in cache:
            profile = copy.deepcopy(render.load_profile(profile_name))
            contexts = [faults.apply(profile, name) for name in fault_names]
            root = str(tmp_path_factory.mktemp('-'.join(key)))
            render.render(profile, root)
            cache[key] = (root, contexts)
        return cache[key]

    return make
