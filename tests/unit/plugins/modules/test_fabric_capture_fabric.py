# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The fabric tools' outputs in a snapshot: ib_fabric_facts save_to (or, without the tools, why the fabric
was not read: not_read.txt), packed by fabric_capture (fabric_outputs) below _ibdiag.SAVED_DIR, read back by
ib_fabric_facts from_log with the same facts; a saved file that is no regular file is left out and said."""

from __future__ import annotations

import os
import tarfile

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _capture, _ibdiag
from ansible_collections.hpc.gpu_fabric.plugins.modules import fabric_capture, ib_fabric_facts
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _offline
from tests.sim import fabric, render
from tests.unit.plugins.modules.utils import run_module

SIM_BIN = os.path.join(os.path.dirname(fabric.__file__), 'bin')


@pytest.fixture(scope='module')
def node_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('node'))
    render.render(render.load_profile('nvidia_h100_8x_ndr'), root)
    return root


def fabric_facts(result):
    return result['ansible_facts']['gpu_fabric_ib_fabric']


def pack(root, saved, dest, monkeypatch):
    result, failed = run_module(fabric_capture.main, {'root': root, 'dest': dest, 'readers': ['ib'], 'fabric_outputs': saved},
                                monkeypatch)
    assert not failed, result
    unpacked = dest + '.d'
    with tarfile.open(dest) as tar:
        tar.extractall(unpacked, filter='data')
    return result, os.path.join(unpacked, _ibdiag.SAVED_DIR)


def test_saved_outputs_packed_and_read_back_give_the_same_facts(monkeypatch, tmp_path, node_root):
    path = fabric.write(fabric.model(faults=('subnet_port_errors',)), str(tmp_path / 'fabric.json'))
    monkeypatch.setenv('GF_SIM_FABRIC', path)
    monkeypatch.setenv('PATH', SIM_BIN + os.pathsep + os.environ['PATH'])
    saved = tmp_path / 'saved'
    saved.mkdir()
    live, failed = run_module(ib_fabric_facts.main, {'root': node_root, 'interval': 0.1, 'save_to': str(saved)}, monkeypatch)
    assert not failed and fabric_facts(live)['status'] == 'ok', live
    # Something that is not ib_fabric_facts' own is never packed.
    (saved / 'other.txt').write_text('not an output')
    result, unpacked = pack(node_root, str(saved), str(tmp_path / 'node.tar.gz'), monkeypatch)
    # Every output but uptime.txt (this rendered node has no /proc/uptime).
    names = sorted(name for name in _ibdiag.SAVED_NAMES if name not in (_ibdiag.NOT_READ, 'uptime.txt'))
    assert sorted(os.listdir(str(saved))) == sorted(names + ['other.txt'])
    assert result['fabric_outputs'] == ['%s/%s' % (_ibdiag.SAVED_DIR, name) for name in names]
    assert sorted(os.listdir(unpacked)) == names and result['skipped'] == []
    offline, failed = run_module(ib_fabric_facts.main, {'root': node_root, 'from_log': unpacked}, monkeypatch)
    assert not failed
    got, want = fabric_facts(offline), fabric_facts(live)
    assert set(got['tools'].values()) == {'read from log'}
    for key in ('status', 'topology', 'sm', 'subnet', 'counters', 'unread'):
        assert got[key] == want[key], key


@pytest.mark.parametrize('profile,status,why', [('nvidia_h100_8x_ndr', 'no_tools', 'infiniband-diags is not installed'),
                                                ('no_rdma_vm', 'no_ib_port', 'this node has no InfiniBand port')])
def test_without_the_tools_the_snapshot_says_why(monkeypatch, tmp_path, profile, status, why):
    root = str(tmp_path / 'node')
    render.render(render.load_profile(profile), root)
    monkeypatch.setenv('PATH', str(tmp_path))
    saved = tmp_path / 'saved'
    saved.mkdir()
    live, failed = run_module(ib_fabric_facts.main, {'root': root, 'save_to': str(saved)}, monkeypatch)
    assert not failed and fabric_facts(live)['status'] == status
    assert (saved / _ibdiag.NOT_READ).read_text().startswith('%s\n%s' % (status, why))
    _result, unpacked = pack(root, str(saved), str(tmp_path / 'node.tar.gz'), monkeypatch)
    offline, failed = run_module(ib_fabric_facts.main, {'root': root, 'from_log': unpacked}, monkeypatch)
    got = fabric_facts(offline)
    assert not failed and got['status'] == status and got['reason'].startswith('not read when the outputs were saved: ' + why)


def test_check_mode_saves_nothing(monkeypatch, tmp_path, node_root):
    monkeypatch.setenv('PATH', str(tmp_path))
    saved = tmp_path / 'saved'
    saved.mkdir()
    _live, failed = run_module(ib_fabric_facts.main, {'root': node_root, 'save_to': str(saved), '_ansible_check_mode': True}, monkeypatch)
    assert not failed and os.listdir(str(saved)) == []


def test_a_saved_record_that_is_no_regular_file_or_says_nonsense(tmp_path):
    saved = tmp_path / 'saved'
    saved.mkdir()
    assert ib_fabric_facts.saved_not_read(str(saved)) is None
    (saved / _ibdiag.NOT_READ).write_text('ok\n' + 'x' * 5000)
    status, reason = ib_fabric_facts.saved_not_read(str(saved))
    # Never read back as a fabric that was read; the reason bounded.
    assert status == 'no_tools' and len(reason) < 600
    os.unlink(str(saved / _ibdiag.NOT_READ))
    os.symlink('/etc/passwd', str(saved / _ibdiag.NOT_READ))
    status, reason = ib_fabric_facts.saved_not_read(str(saved))
    assert status == 'no_tools' and 'is not readable' in reason


def test_only_regular_files_of_the_saved_names_are_packed(tmp_path):
    saved = tmp_path / 'saved'
    saved.mkdir()
    (saved / 'iblinkinfo.txt').write_text('links')
    os.symlink('/etc/passwd', str(saved / 'sminfo.txt'))
    os.mkfifo(str(saved / 'perfquery.1.txt'))
    (saved / 'secret.key').write_text('never')
    members, skipped = _capture.fabric_members(str(saved))
    assert sorted(name for name, m in members.items() if m['kind'] == 'file') == [_ibdiag.SAVED_DIR + '/iblinkinfo.txt']
    assert members['.gpu_fabric_commands'] == members[_ibdiag.SAVED_DIR] == {'kind': 'dir'}
    assert sorted(os.path.basename(item['path']) for item in skipped) == ['perfquery.1.txt', 'sminfo.txt']


def test_fabric_outputs_must_be_a_directory(monkeypatch, tmp_path, node_root):
    result, failed = run_module(fabric_capture.main, {'root': node_root, 'dest': str(tmp_path / 'x.tar.gz'),
                                                      'fabric_outputs': str(tmp_path / 'none')}, monkeypatch)
    assert failed and 'is not a directory' in result['msg'] and not os.path.exists(str(tmp_path / 'x.tar.gz'))


def test_offline_puts_the_snapshot_with_the_fabric_first(tmp_path):
    roots = dict((name, str(tmp_path / name)) for name in ('a', 'b', 'c'))
    for root in roots.values():
        os.makedirs(root)
    os.makedirs(os.path.join(roots['c'], _ibdiag.SAVED_DIR))
    # A file of that name is no saved outputs.
    os.makedirs(os.path.join(roots['b'], '.gpu_fabric_commands'))
    with open(os.path.join(roots['b'], _ibdiag.SAVED_DIR), 'w') as handle:
        handle.write('x')
    ordered = _offline.fabric_first(roots)
    assert list(ordered) == ['c', 'a', 'b'] and ordered == roots
