# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import os

from ansible.module_utils import basic

from ansible_collections.hpc.gpu_fabric.plugins.modules import gdr_facts, ib_link_facts
from tests.unit.conftest import fixture_text
from tests.unit.plugins.modules.utils import run_module


def test_ib_link_facts_on_simulated_node(sim_root, monkeypatch):
    root, _ctx = sim_root('metax_c500_cx7')
    result, failed = run_module(ib_link_facts.main, {'root': root, '_ansible_check_mode': True}, monkeypatch)
    assert not failed and result['changed'] is False
    facts = result['ansible_facts']['gpu_fabric_ib']
    assert [d['name'] for d in facts['devices']] == ['mlx5_0', 'mlx5_1', 'mlx5_2']
    assert facts['ibv_devinfo'] == 'disabled' and facts['root'] == root


def test_gdr_facts_on_simulated_node(sim_root, monkeypatch):
    root, _ctx = sim_root('metax_c500_cx7', 'mm_kobj_not_exported')
    result, failed = run_module(gdr_facts.main, {'root': root}, monkeypatch)
    assert not failed and result['changed'] is False
    facts = result['ansible_facts']['gpu_fabric_gdr']
    assert facts['gdr_ready'] is False and 'mm_kobj' in facts['reasons'][0]


def test_root_that_does_not_exist(monkeypatch, tmp_path):
    missing = str(tmp_path / 'nope')
    for main in (ib_link_facts.main, gdr_facts.main):
        result, failed = run_module(main, {'root': missing}, monkeypatch)
        assert failed and missing in result['msg'] and 'snapshot' in result['msg']


def test_ibv_devinfo_runs_as_argument_list(monkeypatch, tmp_path):
    calls = []

    def run_command(self, args, **kwargs):
        calls.append((args, kwargs))
        return 0, fixture_text('public', 'ibv_devinfo', 'heioy_mlx4_2hca_port2_down.txt'), ''

    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', lambda self, name, *a, **k: '/usr/bin/' + name)
    monkeypatch.setattr(basic.AnsibleModule, 'run_command', run_command)
    monkeypatch.setattr(ib_link_facts, 'SysRoot', lambda root: _FixtureRoot(str(tmp_path)))
    result, failed = run_module(ib_link_facts.main, {'ibv_devinfo': True}, monkeypatch)
    assert not failed
    assert calls == [(['/usr/bin/ibv_devinfo'], {'environ_update': {'LC_ALL': 'C'}})]
    assert result['ansible_facts']['gpu_fabric_ib']['ibv_devinfo'] == 'used'
    port = result['ansible_facts']['gpu_fabric_ib']['devices'][0]['ports'][0]
    assert (port['active_mtu'], port['active_mtu_source']) == (4096, 'ibv_devinfo')


def test_ibv_devinfo_failure_is_reported_not_fatal(monkeypatch, tmp_path):
    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', lambda self, name, *a, **k: '/usr/bin/' + name)
    # Real output on a node without RDMA (fixtures/real/cpu-vm-no-rdma/ibv_devinfo.txt).
    monkeypatch.setattr(basic.AnsibleModule, 'run_command',
                        lambda self, args, **kw: (255, '', 'Failed to get IB devices list: Function not implemented\n'))
    monkeypatch.setattr(ib_link_facts, 'SysRoot', lambda root: _FixtureRoot(str(tmp_path)))
    result, failed = run_module(ib_link_facts.main, {'ibv_devinfo': True}, monkeypatch)
    assert not failed
    assert result['ansible_facts']['gpu_fabric_ib']['ibv_devinfo'] == \
        'failed: rc=255 Failed to get IB devices list: Function not implemented'


def test_ibv_devinfo_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', lambda self, name, *a, **k: None)
    monkeypatch.setattr(ib_link_facts, 'SysRoot', lambda root: _FixtureRoot(str(tmp_path)))
    result, failed = run_module(ib_link_facts.main, {'ibv_devinfo': True}, monkeypatch)
    assert not failed and result['ansible_facts']['gpu_fabric_ib']['ibv_devinfo'] == 'not installed'


def test_warnings_reach_the_user(sim_root, monkeypatch, tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, 'sys/class/infiniband/mlx5_0/ports/1/rate'))   # a directory: EISDIR
    result, failed = run_module(ib_link_facts.main, {'root': root}, monkeypatch)
    assert not failed
    assert any('ports/1/rate' in w for w in result['warnings'])
    assert result['ansible_facts']['gpu_fabric_ib']['devices'][0]['ports'][0]['rate_gbps'] is None


def _FixtureRoot(root):
    """A SysRoot over a one-HCA tree named like the ibv_devinfo fixture (mlx4_0 port 1)."""
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
    port = os.path.join(root, 'sys/class/infiniband/mlx4_0/ports/1')
    os.makedirs(port, exist_ok=True)
    for name, value in (('state', '4: ACTIVE'), ('phys_state', '5: LinkUp'), ('rate', '40 Gb/sec (4X QDR)'),
                        ('link_layer', 'InfiniBand')):
        with open(os.path.join(port, name), 'w') as handle:
            handle.write(value + '\n')
    return SysRoot(root)


def test_default_path_spawns_no_tool(sim_root, monkeypatch):
    import subprocess

    def refuse(*args, **kwargs):
        raise AssertionError('external command spawned: %r' % (args,))

    monkeypatch.setattr(subprocess, 'Popen', refuse)
    monkeypatch.setattr(basic.AnsibleModule, 'run_command', refuse)
    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', refuse)
    root, _ctx = sim_root('nvidia_h100_8x_ndr')
    for main in (ib_link_facts.main, gdr_facts.main):
        result, failed = run_module(main, {'root': root}, monkeypatch)
        assert not failed, result


def test_a_name_that_is_not_utf8_costs_no_other_fact(sim_root, monkeypatch, tmp_path):
    """A directory under /sys/class/infiniband (and a counter) named in bytes that are not
    UTF-8: both facts modules keep the real devices, leave the entry out or report it as
    U+FFFD, warn naming it, and return a result that can be written as UTF-8."""
    import json
    import shutil
    root = str(tmp_path / 'node')
    shutil.copytree(sim_root('metax_c500_cx7')[0], root, symlinks=True)
    bad = os.path.join(root.encode(), b'sys/class/infiniband/mlx5_\xff')
    os.makedirs(os.path.join(bad, b'ports', b'1'))
    with open(os.path.join(bad, b'ports', b'1', b'state'), 'w') as handle:
        handle.write('4: ACTIVE\n')
    counters = os.path.realpath(os.path.join(root, 'sys/class/infiniband/mlx5_0/ports/1/counters')).encode()
    with open(os.path.join(counters, b'vendor_\xfe'), 'w') as handle:
        handle.write('7\n')
    expected = [d['name'] for d in run_module(ib_link_facts.main, {'root': sim_root('metax_c500_cx7')[0]}, monkeypatch)[0][
        'ansible_facts']['gpu_fabric_ib']['devices']]

    result, failed = run_module(ib_link_facts.main, {'root': root}, monkeypatch)
    assert not failed
    devices = result['ansible_facts']['gpu_fabric_ib']['devices']
    assert [d['name'] for d in devices] == expected
    assert devices[0]['ports'][0]['counters']['vendor_\ufffd'] == 7
    assert any('mlx5_\\udcff' in w and 'not UTF-8' in w for w in result['warnings'])
    assert any('vendor_\ufffd' in w for w in result['warnings'])
    json.dumps(result, ensure_ascii=False).encode('utf-8')

    result, failed = run_module(gdr_facts.main, {'root': root}, monkeypatch)
    assert not failed
    assert [n['name'] for n in result['ansible_facts']['gpu_fabric_gdr']['nics']] == expected
    assert any('mlx5_\\udcff' in w for w in result['warnings'])
    json.dumps(result, ensure_ascii=False).encode('utf-8')
