# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""from_log of perftest_run, collective_bench and ib_fabric_facts: regular files only, bounded.

A FIFO blocked the read forever, a device such as /dev/zero or a sparse file of 2 GiB was read
until MemoryError. Every case is made inside the test's own temporary directory.
"""

from __future__ import annotations

import signal

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _paths
from ansible_collections.hpc.gpu_fabric.plugins.modules import collective_bench, ib_fabric_facts, perftest_run
from tests.unit import special_files
from tests.unit.conftest import fixture_path
from tests.unit.plugins.modules.utils import run_module

MODULES = {'perftest_run': perftest_run, 'collective_bench': collective_bench}


@pytest.fixture(autouse=True)
def in_time():
    """A read that blocks (a FIFO) fails the test instead of hanging the suite."""
    def expired(signum, frame):
        raise AssertionError('the module did not return within 30 s: a read blocked')
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _sparse(path, size):
    with open(path, 'wb') as handle:
        handle.truncate(size)
    return path


@pytest.mark.parametrize('name', sorted(MODULES))
@pytest.mark.parametrize('kind', special_files.ALL + ('zero', 'link-zero'))
def test_from_log_that_is_no_regular_file_is_refused(monkeypatch, tmp_path, name, kind):
    device = (1, 5) if kind.endswith('zero') else (1, 3)
    path = special_files.make(tmp_path, kind.replace('zero', 'device'), 'saved.txt', device)
    result, failed = run_module(MODULES[name].main, {'from_log': path}, monkeypatch)
    assert failed is True and result['msg'].startswith('cannot read from_log %s: ' % path)
    why = result['msg'][len('cannot read from_log %s: ' % path):]
    assert why == ('a symlink (not followed): give the file itself' if kind.startswith('link-')
                   else '%s, not a regular file' % {'fifo': 'a FIFO', 'socket': 'a socket', 'directory': 'a directory'}.get(
                       kind, 'a character device'))


@pytest.mark.parametrize('name', sorted(MODULES))
def test_from_log_larger_than_the_cap_is_refused_unread(monkeypatch, tmp_path, name):
    path = _sparse(str(tmp_path / 'saved.txt'), 2 << 30)  # 2 GiB of holes: nothing on disk
    result, failed = run_module(MODULES[name].main, {'from_log': path}, monkeypatch)
    assert failed is True and result['msg'] == 'cannot read from_log %s: larger than 64 MiB' % path


@pytest.mark.parametrize('name, parts', [
    ('perftest_run', ('public', 'perftest', 'seed000_metax_ib_write_bw_maca0_sweep.txt')),
    ('collective_bench', ('real', 'h200x2', 'all_reduce_perf_g2.txt')),
])
def test_from_log_of_exactly_the_cap_is_read(monkeypatch, tmp_path, name, parts):
    source = fixture_path(*parts)
    with open(source, 'rb') as handle:
        data = handle.read()
    monkeypatch.setattr(_paths, 'LOG_LIMIT', len(data))
    result, failed = run_module(MODULES[name].main, {'from_log': source}, monkeypatch)
    assert failed is False, result
    monkeypatch.setattr(_paths, 'LOG_LIMIT', len(data) - 1)
    result, failed = run_module(MODULES[name].main, {'from_log': source}, monkeypatch)
    assert failed is True and 'larger than %d bytes' % (len(data) - 1) in result['msg']


@pytest.mark.parametrize('kind', ['fifo', 'zero', 'link-fifo', 'sparse'])
def test_ib_fabric_facts_from_log_reads_regular_files_only_and_bounded(monkeypatch, tmp_path, sim_root, kind):
    """Already bounded there (ib_fabric_facts.read_log): the same answer as the other modules."""
    logs = tmp_path / 'logs'
    logs.mkdir()
    if kind == 'sparse':
        _sparse(str(logs / 'iblinkinfo.txt'), 2 << 30)
    else:
        special_files.make(logs, kind.replace('zero', 'device'), 'iblinkinfo.txt', (1, 5))
    result, failed = run_module(ib_fabric_facts.main, {'root': sim_root('nvidia_h100_8x_ndr')[0], 'from_log': str(logs),
                                                       'interval': 0}, monkeypatch)
    tools = result['ansible_facts']['gpu_fabric_ib_fabric']['tools']
    assert tools['iblinkinfo'].startswith('not read (iblinkinfo.txt: ')
    assert ('larger than 64 MiB' if kind == 'sparse' else 'not a regular file' if kind != 'link-fifo' else 'a symlink (not followed)') \
        in tools['iblinkinfo']
