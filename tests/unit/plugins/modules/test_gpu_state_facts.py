# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_state_facts in-process: over the simulator's nvidia-smi stand-in (real processes with a
timeout), without the tool (every part not read, never ok), the idle gate's form, and /dev/kmsg
read without blocking."""

from __future__ import annotations

import os
import shutil
import tarfile

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gpu_state
from ansible_collections.hpc.gpu_fabric.plugins.modules import fabric_capture, gpu_state_facts
from tests.sim import faults, render
from tests.unit.conftest import fixture_text
from tests.unit.plugins.modules.utils import run_module

SIM_BIN = os.path.join(os.path.dirname(render.__file__), 'bin')


@pytest.fixture(scope='module')
def node_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('node'))
    profile = render.load_profile('h200x2_no_rdma')
    for name in ('gpu_busy', 'gpu_xid79'):
        faults.apply(profile, name)
    render.render(profile, root)
    return root


def test_reads_the_simulated_node_through_the_stand_in(monkeypatch, node_root):
    monkeypatch.setenv('PATH', SIM_BIN + os.pathsep + os.environ['PATH'])
    monkeypatch.setenv('GF_SIM_ROOT', node_root)
    result, failed = run_module(gpu_state_facts.main, {'root': node_root, 'monitoring_agents': ['my-agent']}, monkeypatch)
    assert not failed, result
    facts = result['ansible_facts']['gpu_fabric_gpu']
    assert facts['not_read'] == {} and facts['tool'] == 'nvidia-smi' and facts['driver_version'] == '580.159.04'
    assert [(g['bdf'], g['clock_reasons']) for g in facts['gpus']] == [('0000:00:06.0', ['gpu_idle']), ('0000:00:07.0', [])]
    assert [(p['pid'], p['name'], p['user']) for p in facts['processes']] == [(3294, 'python3', 'alice')]
    assert [(x['bdf'], x['xid'], x['severity']) for x in facts['xid']] == [('0000:00:07.0', 79, 'error')]
    # One call each: query-gpu, compute-apps, nvlink -s, nvlink -e.
    assert [t['argv'][1].split('=')[0] for t in result['timings']] == ['--query-gpu', '--query-compute-apps', 'nvlink', 'nvlink']
    assert facts['monitoring_agents'] == ['my-agent'] and result['changed'] is False


def test_the_idle_gate_leaves_the_facts_alone(monkeypatch, node_root):
    monkeypatch.setenv('PATH', SIM_BIN + os.pathsep + os.environ['PATH'])
    monkeypatch.setenv('GF_SIM_ROOT', node_root)
    result, failed = run_module(gpu_state_facts.main, {'root': node_root, 'parts': ['processes'], 'as_facts': False}, monkeypatch)
    assert not failed and 'ansible_facts' not in result
    assert [p['pid'] for p in result['gpu_fabric_gpu']['processes']] == [3294]
    assert [t['argv'][1].split('=')[0] for t in result['timings']] == ['--query-compute-apps']


def test_without_the_tool_every_part_is_not_read(monkeypatch, tmp_path, node_root):
    monkeypatch.setenv('PATH', str(tmp_path))
    result, failed = run_module(gpu_state_facts.main, {'root': node_root}, monkeypatch)
    assert not failed
    facts = result['ansible_facts']['gpu_fabric_gpu']
    assert facts['tool'] is None and facts['gpus'] == [] and facts['processes'] == []
    assert sorted(facts['not_read']) == ['gpus', 'nvlink', 'processes']
    assert facts['not_read']['gpus'] == 'nvidia-smi not found on the PATH'
    # The kernel log below the root is still read.
    assert [x['xid'] for x in facts['xid']] == [79]


def test_another_vendor_tool_is_said_not_read(monkeypatch, tmp_path):
    tool = tmp_path / 'rocm-smi'
    tool.write_text('#!/bin/sh\nexit 0\n')
    tool.chmod(0o755)
    monkeypatch.setenv('PATH', str(tmp_path))
    result, failed = run_module(gpu_state_facts.main, {'root': str(tmp_path)}, monkeypatch)
    facts = result['ansible_facts']['gpu_fabric_gpu']
    assert not failed and facts['tool'] == 'rocm-smi'
    assert facts['not_read']['gpus'] == 'not read: parser for rocm-smi not available'
    assert facts['not_read']['xid'].startswith('no kernel log below')


def test_a_tool_that_hangs_is_killed_at_the_timeout(monkeypatch, tmp_path):
    tool = tmp_path / 'nvidia-smi'
    tool.write_text('#!/bin/sh\nexec %s 30\n' % shutil.which('sleep'))
    tool.chmod(0o755)
    monkeypatch.setenv('PATH', str(tmp_path))
    result, failed = run_module(gpu_state_facts.main, {'root': str(tmp_path), 'timeout': 1, 'parts': ['gpus']}, monkeypatch)
    facts = result['ansible_facts']['gpu_fabric_gpu']
    assert not failed and facts['not_read']['gpus'] == 'nvidia-smi --query-gpu: timed out after 1s'
    assert result['elapsed_ms'] < 10000


def test_bad_arguments_fail(monkeypatch, tmp_path):
    result, failed = run_module(gpu_state_facts.main, {'root': str(tmp_path / 'nope')}, monkeypatch)
    assert failed and 'is not a directory' in result['msg']
    result, failed = run_module(gpu_state_facts.main, {'root': str(tmp_path), 'timeout': 0}, monkeypatch)
    assert failed and 'at least 1 second' in result['msg']


def test_read_kmsg_without_blocking_and_bounded(tmp_path):
    log = tmp_path / 'kmsg'
    log.write_text(''.join('6,%d,2,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n' % n for n in range(1000, 3000)))
    kept = _gpu_state.read_kmsg(str(log), limit=8192)
    # The newest records kept (a regular file reads in 8 KiB chunks where /dev/kmsg gives one record per read).
    assert len(kept) <= 2 * 8192 and kept.rstrip().endswith('6,2999,2,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.')
    assert _gpu_state.read_kmsg(str(log), limit=8192, most=8192).startswith('6,1000,')
    # The oldest records (a driver's probe at boot, module_utils/_peermem.py): it stops at the limit.
    oldest = _gpu_state.read_kmsg(str(log), limit=8192, newest=False)
    assert oldest.startswith('6,1000,') and len(oldest) <= 2 * 8192 and '6,2999,' not in oldest
    with pytest.raises(OSError):
        _gpu_state.read_kmsg(str(tmp_path / 'absent'))


def test_saved_outputs_are_read_instead_of_a_tool(monkeypatch, tmp_path, node_root):
    """offline.yml: the snapshot's saved outputs, never the tool of the machine that reads it."""
    saved = tmp_path / 'saved'
    saved.mkdir()
    for name, fixture in (('query_gpu.txt', 'nvsmi_query_gpu_busy.txt'), ('compute_apps.txt', 'nvsmi_apps_busy.txt'),
                          ('nvlink_s.txt', 'nvsmi_nvlink_s.txt'), ('nvlink_e.txt', 'nvsmi_nvlink_e.txt')):
        (saved / name).write_text(fixture_text('real', 'h200x2', 'state', fixture))
    monkeypatch.setenv('PATH', SIM_BIN + os.pathsep + os.environ['PATH'])   # a tool that must not be asked
    monkeypatch.delenv('GF_SIM_ROOT', raising=False)
    result, failed = run_module(gpu_state_facts.main, {'root': node_root, 'from_log': str(saved)}, monkeypatch)
    facts = result['ansible_facts']['gpu_fabric_gpu']
    assert not failed and facts['not_read'] == {} and result['timings'] == []
    assert [(p['pid'], p['used_mib']) for p in facts['processes']] == [(3294, 1644)]
    assert [g['power_w'] for g in facts['gpus']] == [80.22, 683.51]
    # No saved outputs in the snapshot: not read, with why.
    result, failed = run_module(gpu_state_facts.main, {'root': node_root, 'from_log': str(tmp_path / 'none')}, monkeypatch)
    facts = result['ansible_facts']['gpu_fabric_gpu']
    assert facts['gpus'] == [] and sorted(facts['not_read']) == ['gpus', 'nvlink', 'processes']
    assert facts['not_read']['gpus'].startswith('no saved outputs of nvidia-smi in ')


def test_a_snapshot_judges_the_same(monkeypatch, tmp_path, node_root):
    """fabric_capture saves what gpu_state_facts runs (and the kernel log's NVRM lines); from_log on the
    unpacked snapshot gives the same GPU state as on the node."""
    monkeypatch.setenv('PATH', SIM_BIN + os.pathsep + os.environ['PATH'])
    monkeypatch.setenv('GF_SIM_ROOT', node_root)
    live, failed = run_module(gpu_state_facts.main, {'root': node_root}, monkeypatch)
    assert not failed
    tarball = str(tmp_path / 'node.tar.gz')
    result, failed = run_module(fabric_capture.main, {'root': node_root, 'dest': tarball, 'readers': ['gdr'], 'gpu_tools': 'always'},
                                monkeypatch)
    assert not failed, result
    assert [c['file'] for c in result['commands']] == ['.gpu_fabric_commands/gpu_state/%s.txt' % name for name in
                                                       ('query_gpu', 'compute_apps', 'nvlink_s', 'nvlink_e')]
    unpacked = tmp_path / 'snap'
    with tarfile.open(tarball) as tar:
        tar.extractall(str(unpacked), filter='tar')
    saved = unpacked / '.gpu_fabric_commands' / 'gpu_state'
    assert (saved / 'kmsg.txt').read_text().count('NVRM') == 2     # the driver's banner and the XID, nothing else
    monkeypatch.setenv('PATH', str(tmp_path))   # offline: no tool at all
    offline, failed = run_module(gpu_state_facts.main, {'root': str(unpacked), 'from_log': str(saved)}, monkeypatch)
    assert not failed
    keys = ('gpus', 'processes', 'xid', 'not_read', 'driver_version')
    on_node = dict((k, live['ansible_facts']['gpu_fabric_gpu'][k]) for k in keys)
    snapshot = dict((k, offline['ansible_facts']['gpu_fabric_gpu'][k]) for k in keys)
    # The process owner comes from /proc of the node, which a snapshot does not hold.
    for process in on_node['processes'] + snapshot['processes']:
        process.pop('user')
    assert snapshot == on_node
