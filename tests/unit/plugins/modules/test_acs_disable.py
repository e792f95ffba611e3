# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import hashlib
import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _pci
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from ansible_collections.hpc.gpu_fabric.plugins.modules import acs_disable
from tests.sim import faults, render
from tests.unit.plugins.modules.utils import run_module


@pytest.fixture
def node(tmp_path):
    """A fresh MetaX node (seed 000) with ACS redirecting above GPU0; returns (root, fault context)."""
    profile = render.load_profile('metax_c500_cx7')
    context = faults.apply(profile, 'acs_enabled')
    root = str(tmp_path / 'root')
    render.render(profile, root)
    return root, context


def config_hashes(root):
    base = os.path.join(root, 'sys/bus/pci/devices')
    digests = {}
    for bdf in sorted(os.listdir(base)):
        with open(os.path.join(base, bdf, 'config'), 'rb') as handle:
            digests[bdf] = hashlib.sha256(handle.read()).hexdigest()
    return digests


def acs_ctl(root, bdf):
    return _pci.parse_acs(SysRoot(root).binary('/sys/bus/pci/devices/%s/config' % bdf))['ctl']


def test_quartet_check_apply_again_check(node, monkeypatch):
    root, ctx = node
    bridge = ctx['bridge']
    before = config_hashes(root)

    result, failed = run_module(acs_disable.main, {'root': root, '_ansible_check_mode': True, '_ansible_diff': True}, monkeypatch)
    assert not failed and result['changed'] is True
    assert config_hashes(root) == before                      # check mode wrote nothing
    entry = [d for d in result['devices'] if d['pci_address'] == bridge][0]
    assert (entry['before'], entry['after'], entry['changed']) == (0x1d, 0, True)
    assert entry['before_flags'] == ['SrcValid', 'ReqRedir', 'CmpltRedir', 'UpstreamFwd']
    assert 'GPU0-mlx5_0' in entry['paths']
    assert result['diff']['before'] == '%s ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n' % bridge
    assert result['diff']['after'] == '%s ACSCtl: SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-\n' % bridge

    result, failed = run_module(acs_disable.main, {'root': root}, monkeypatch)
    assert not failed and result['changed'] is True and result['previous'][bridge] == 0x1d
    assert acs_ctl(root, bridge) == 0
    changed_bdfs = [bdf for bdf, digest in config_hashes(root).items() if digest != before[bdf]]
    assert changed_bdfs == [bridge]                           # nothing else touched

    again, failed = run_module(acs_disable.main, {'root': root}, monkeypatch)
    assert not failed and again['changed'] is False
    check, failed = run_module(acs_disable.main, {'root': root, '_ansible_check_mode': True}, monkeypatch)
    assert not failed and check['changed'] is False

    # The previous values put everything back.
    restored, failed = run_module(acs_disable.main, {'root': root, 'restore': result['previous']}, monkeypatch)
    assert not failed and restored['changed'] is True
    assert acs_ctl(root, bridge) == 0x1d and config_hashes(root) == before


def test_default_scope_is_gpu_nic_paths_only(node, monkeypatch):
    root, _ctx = node
    result, _failed = run_module(acs_disable.main, {'root': root, '_ansible_check_mode': True}, monkeypatch)
    scoped = set(d['pci_address'] for d in result['devices'])
    # Root ports (PHB level) and the empty switch ports (05:04.0, 05:10.0) are not on a P2P path.
    assert '0000:03:01.0' not in scoped and '0000:05:04.0' not in scoped and '0000:05:10.0' not in scoped
    assert '0000:10:10.0' in scoped and '0000:10:00.0' in scoped     # GPU3 <-> mlx5_0 (PIX)
    everything, _failed = run_module(acs_disable.main, {'root': root, 'scope': 'all', '_ansible_check_mode': True}, monkeypatch)
    assert scoped < set(d['pci_address'] for d in everything['devices'])
    assert '0000:03:01.0' in set(d['pci_address'] for d in everything['devices'])


def test_clear_only_redirect_bits(node, monkeypatch):
    root, ctx = node
    result, failed = run_module(acs_disable.main, {'root': root, 'scope': 'devices', 'devices': [ctx['bridge'][5:]],
                                                   'clear': ['ReqRedir', 'CmpltRedir']}, monkeypatch)
    assert not failed and result['devices'][0]['after_flags'] == ['SrcValid', 'UpstreamFwd']
    assert acs_ctl(root, ctx['bridge']) == 0x11


@pytest.mark.parametrize('devices, message', [
    (['10:00'], 'is not a PCI address'),
    (['0000:99:00.0'], 'no PCI device 0000:99:00.0'),
    (['0000:08:00.0'], 'is not a PCI bridge'),            # GPU0
    (['0000:04:00.0'], 'has no ACS capability'),          # a switch upstream port
    (['0000:10:10.0', 'zz:00.0'], 'is not a PCI address'),  # one bad entry: nothing is written
])
def test_bad_devices_fail_before_any_write(node, monkeypatch, devices, message):
    root, _ctx = node
    before = config_hashes(root)
    result, failed = run_module(acs_disable.main, {'root': root, 'scope': 'devices', 'devices': devices}, monkeypatch)
    assert failed and message in result['msg']
    assert config_hashes(root) == before


def test_scope_devices_needs_devices(node, monkeypatch):
    result, failed = run_module(acs_disable.main, {'root': node[0], 'scope': 'devices'}, monkeypatch)
    assert failed and 'devices' in result['msg']


def test_restore_rejects_garbage(node, monkeypatch):
    root, ctx = node
    result, failed = run_module(acs_disable.main, {'root': root, 'restore': {ctx['bridge']: 70000}}, monkeypatch)
    assert failed and '16-bit' in result['msg']


def test_non_root_reader_gets_a_clear_message(node, monkeypatch):
    root, ctx = node
    config = os.path.join(root, 'sys/bus/pci/devices', ctx['bridge'], 'config')
    with open(config, 'rb') as handle:
        data = handle.read()
    with open(config, 'wb') as handle:
        handle.write(data[:64])                          # what sysfs serves to a non-root reader
    result, failed = run_module(acs_disable.main, {'root': root}, monkeypatch)
    assert failed and 'become: true' in result['msg']


def test_not_a_node(monkeypatch, tmp_path):
    result, failed = run_module(acs_disable.main, {'root': str(tmp_path)}, monkeypatch)
    assert failed and 'not a Linux node' in result['msg']


def test_devices_without_scope_imply_scope_devices(node, monkeypatch):
    """devices given, scope left out: exactly those bridges (before: silently ignored, changed
    false and devices [] from the default scope gpu_nic_paths)."""
    root, ctx = node
    result, failed = run_module(acs_disable.main, {'root': root, 'devices': [ctx['bridge']], '_ansible_check_mode': True},
                                monkeypatch)
    assert not failed and result['changed'] is True
    assert [d['pci_address'] for d in result['devices']] == [ctx['bridge']]


@pytest.mark.parametrize('extra, message', [
    ({'scope': 'all'}, 'devices lists bridges, but scope=all'),
    ({'scope': 'gpu_nic_paths'}, 'devices lists bridges, but scope=gpu_nic_paths'),
    ({'restore': {'0000:10:00.0': 0}}, 'devices and restore are mutually exclusive'),
])
def test_devices_with_a_contradicting_option_fail(node, monkeypatch, extra, message):
    root, ctx = node
    before = config_hashes(root)
    result, failed = run_module(acs_disable.main, dict(extra, root=root, devices=[ctx['bridge']]), monkeypatch)
    assert failed is True and message in result['msg']
    assert config_hashes(root) == before
