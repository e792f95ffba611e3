# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The host-layer reader on real captured files, on what the configure roles write, and on
simulated roots; and gdr_facts returning it as gpu_fabric_gdr.host."""

from __future__ import annotations

import copy
import os

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _host
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from ansible_collections.hpc.gpu_fabric.plugins.modules import gdr_facts
from tests.sim import faults, render
from tests.unit.conftest import fixture_text
from tests.unit.plugins.modules.utils import run_module

try:  # ansible-core >= 2.19 templates only strings marked as trusted
    from ansible.template import trust_as_template
except ImportError:
    def trust_as_template(value):
        return value

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def write(root, rel, content):
    path = os.path.join(str(root), rel.lstrip('/'))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as handle:
        handle.write(content)
    return path


def link(root, rel, target):
    path = os.path.join(str(root), rel.lstrip('/'))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.symlink(target, path)


# ---------------------------------------------------------------------------- real captured files

def test_proc_limits_of_the_real_machines():
    # H100 GPU VM as root: unlimited; Debian 12 CPU VM: 8388608 bytes (the kernel's 8 MiB default).
    assert _host.parse_proc_limits(fixture_text('real', 'host', 'h100_vm_proc_self_limits.txt')) == \
        {'soft': 'unlimited', 'hard': 'unlimited'}
    assert _host.parse_proc_limits(fixture_text('real', 'host', 'debian12_vm_proc_self_limits.txt')) == \
        {'soft': 8388608, 'hard': 8388608}
    # A row for another limit with the same numbers is not taken for it.
    assert _host.parse_proc_limits('Max stack size            8388608              unlimited            bytes     ') == \
        {'soft': None, 'hard': None}


def test_default_route_of_the_real_machines():
    for name in ('h100_vm_proc_net_route.txt', 'debian12_vm_proc_net_route.txt'):
        text = fixture_text('real', 'host', name)
        # eth0 carries both the default route (via 192.0.2.1) and the connected 192.0.2.0/24.
        assert text.count('eth0') == 2
        assert _host.parse_default_route(text) == 'eth0'


def test_capabilities_and_modules_of_the_real_gpu_machine():
    assert _host.parse_cap_ipc_lock(fixture_text('real', 'host', 'h100_vm_proc_self_status_cap.txt')) is True
    # A user without capabilities; CapEff with only bit 14 (CAP_IPC_LOCK) set.
    assert _host.parse_cap_ipc_lock('CapInh:\t0000000000000000\nCapEff:\t0000000000000000\n') is False
    assert _host.parse_cap_ipc_lock('CapEff:\t0000000000004000\n') is True
    assert _host.parse_cap_ipc_lock('Name:\tpython3\n') is None
    # Out-of-tree modules: refcount '-', taint '(O)'.
    assert _host.parse_proc_modules(fixture_text('real', 'host', 'h100_vm_proc_modules.txt')) == ['nvidia', 'nvidia_uvm']


def test_stock_limits_conf_has_no_memlock_entry():
    text = fixture_text('real', 'host', 'ubuntu2404_limits.conf')
    # Its comments name memlock ('#        - memlock - max locked-in-memory address space (KB)').
    assert 'memlock' in text
    assert _host.parse_limits_conf(text, '/etc/security/limits.conf') == []


# ---------------------------------------------------------------------------- hand-checked formats

ROUTE_HEADER = 'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT'


def route(iface, dest, gateway, flags, metric, mask):
    return '%s\t%s\t%s\t%s\t0\t0\t%d\t%s\t0\t0\t0' % (iface, dest, gateway, flags, metric, mask)


def test_default_route_lowest_metric_up_and_zero_mask():
    # A laptop-like table: wlan0 default metric 600, eth0 default metric 100 (listed after it),
    # a down default route (flags RTF_GATEWAY only) with metric 0, and a host route 0.0.0.0/32.
    text = '\n'.join([ROUTE_HEADER,
                      route('wlan0', '00000000', '0101A8C0', '0003', 600, '00000000'),
                      route('eth0', '00000000', '010200C0', '0003', 100, '00000000'),
                      route('ib0', '00000000', '0100A8C0', '0002', 0, '00000000'),
                      route('lo', '00000000', '00000000', '0005', 0, 'FFFFFFFF'),
                      route('eth0', '000200C0', '00000000', '0001', 100, '00FFFFFF')])
    assert _host.parse_default_route(text) == 'eth0'
    # Two default routes with the same metric: the first listed, as the kernel picks it.
    assert _host.parse_default_route('\n'.join([ROUTE_HEADER, route('bond0', '00000000', '0101A8C0', '0003', 0, '00000000'),
                                                route('eth1', '00000000', '0101A8C0', '0003', 0, '00000000')])) == 'bond0'
    assert _host.parse_default_route(ROUTE_HEADER + '\n') is None
    assert _host.parse_default_route(None) is None


def test_limits_conf_entries():
    text = ('# comment memlock\n'
            '*               soft    memlock  unlimited\n'
            '@rdma           -       memlock  1048576   # both\n'
            'root            hard    memlock  infinity\n'
            'alice           soft    memlock  -1\n'
            'bob             soft    MEMLOCK  64\n'        # pam_limits compares the item exactly: not memlock
            '*               soft    nofile   65536\n')
    assert _host.parse_limits_conf(text, '/f') == [
        {'domain': '*', 'type': 'soft', 'value': 'unlimited', 'bytes': 'unlimited', 'file': '/f'},
        {'domain': '@rdma', 'type': '-', 'value': '1048576', 'bytes': 1073741824, 'file': '/f'},
        {'domain': 'root', 'type': 'hard', 'value': 'infinity', 'bytes': 'unlimited', 'file': '/f'},
        {'domain': 'alice', 'type': 'soft', 'value': '-1', 'bytes': 'unlimited', 'file': '/f'}]


def test_systemd_sizes_and_sections():
    assert _host.parse_systemd_size('infinity') == 'unlimited'
    assert _host.parse_systemd_size('8M') == 8 * 1024 * 1024
    assert _host.parse_systemd_size('1048576K') == 1024 ** 3
    assert _host.parse_systemd_size('65536') == 65536
    assert _host.parse_systemd_size('lots') is None
    text = ('[Manager]\n#DefaultLimitMEMLOCK=8M\n;DefaultLimitMEMLOCK=1M\nDefaultLimitMEMLOCK=64M:infinity\n'
            '[Other]\nDefaultLimitMEMLOCK=1K\n')
    assert _host.parse_system_conf(text, '/s') == [
        {'value': '64M:infinity', 'soft': 64 * 1024 * 1024, 'hard': 'unlimited', 'file': '/s'}]
    # One value sets both.
    assert _host.parse_system_conf('[Manager]\nDefaultLimitMEMLOCK=8M\n', '/s')[0]['hard'] == 8 * 1024 * 1024


def test_module_lists_comments_dashes_and_arguments():
    assert _host.parse_module_list('# hpc\nib_ipoib\n; off\n  nvidia-peermem  \n\n') == ['ib_ipoib', 'nvidia_peermem']
    # /etc/modules: arguments after the name; ';' is not a comment there.
    assert _host.parse_module_list('# /etc/modules\nloop max_loop=64\n', debian=True) == ['loop']


def test_boot_module_sources_masking_and_debian_link(tmp_path):
    root = str(tmp_path)
    write(root, '/usr/lib/modules-load.d/rdma.conf', 'ib_uverbs\n')
    link(root, '/etc/modules-load.d/rdma.conf', '/dev/null')               # masks the vendor file
    write(root, '/usr/lib/modules-load.d/other.conf', 'ib_umad\n')
    write(root, '/run/modules-load.d/other.conf', 'rdma_ucm\n')             # /run hides /usr/lib of the same name
    write(root, '/etc/modules-load.d/hpc.conf', '# seed 002\nib_ipoib\nnvidia-peermem\n')
    write(root, '/etc/modules-load.d/notes.txt', 'mlx5_ib\n')                # not *.conf: not read
    write(root, '/etc/modules', '# Debian\nbonding mode=4\n')
    link(root, '/etc/modules-load.d/modules.conf', '../modules')            # kmod's link: read once
    write(root, '/etc/rdma/modules/infiniband.conf', '# rdma-core\nib_ipoib\nib_umad\n')
    write(root, '/proc/cmdline', 'BOOT_IMAGE=/vmlinuz ro modules_load=nvidia-peermem,ib_uverbs quiet\n')
    persistent = _host.read_persistent_modules(SysRoot(root))
    assert persistent == {
        'ib_ipoib': ['/etc/modules-load.d/hpc.conf', '/etc/rdma/modules/infiniband.conf'],
        'nvidia_peermem': ['/etc/modules-load.d/hpc.conf', '/proc/cmdline'],
        'bonding': ['/etc/modules-load.d/modules.conf'],
        'rdma_ucm': ['/run/modules-load.d/other.conf'],
        'ib_umad': ['/etc/rdma/modules/infiniband.conf'],
        'ib_uverbs': ['/proc/cmdline'],
    }


def test_governors_through_policy_links_and_without_cpufreq(tmp_path):
    root = str(tmp_path)
    # A live node: cpuN/cpufreq links to ../cpufreq/policyN; cpu2 is offline (no cpufreq).
    for cpu, governor in ((0, 'performance'), (1, 'powersave'), (3, 'performance')):
        write(root, '/sys/devices/system/cpu/cpufreq/policy%d/scaling_governor' % cpu, governor + '\n')
        link(root, '/sys/devices/system/cpu/cpu%d/cpufreq' % cpu, '../cpufreq/policy%d' % cpu)
    os.makedirs(os.path.join(root, 'sys/devices/system/cpu/cpu2'))
    write(root, '/sys/devices/system/cpu/cpuidle/current_driver', 'intel_idle\n')
    sysroot = SysRoot(root)
    assert _host.read_governors(sysroot) == ({'performance': 2, 'powersave': 1}, True)
    assert sysroot.warnings == []
    assert _host.read_governors(SysRoot(str(tmp_path / 'none'))) == ({}, False)


def test_empty_root_reads_as_unknown(tmp_path):
    sysroot = SysRoot(str(tmp_path))
    assert _host.read_host(sysroot) == {
        'cpufreq': False, 'cpu_governors': {},
        'memlock': {'soft': None, 'hard': None, 'cap_ipc_lock': None, 'limits_conf': [], 'systemd': []},
        'modules_loaded': [], 'modules_persistent': {}, 'default_route_interface': None}
    assert sysroot.warnings == []


# ---------------------------------------------------------------------------- what the configure roles write

def role_template(role, template, **extra):
    """A role's template rendered by Ansible's templar with the role's defaults and vars."""
    variables = yaml.safe_load(open(os.path.join(REPO, 'roles', role, 'defaults', 'main.yml')))
    for name, value in yaml.safe_load(open(os.path.join(REPO, 'roles', role, 'vars', 'main.yml'))).items():
        variables[name] = trust_as_template(value) if isinstance(value, str) else value
    variables.update(extra, ansible_managed='Ansible managed', gpu_fabric_root='/')
    with open(os.path.join(REPO, 'roles', role, 'templates', template)) as handle:
        return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(handle.read()))


def test_memlock_role_output_reads_as_configured(tmp_path):
    root = str(tmp_path)
    write(root, '/etc/security/limits.d/90-gpu-fabric-memlock.conf', role_template('memlock', 'memlock-limits.conf.j2'))
    write(root, '/etc/systemd/system.conf.d/90-gpu-fabric-memlock.conf', role_template('memlock', 'memlock-system.conf.j2'))
    # The distribution's system.conf: every setting commented out.
    write(root, '/etc/systemd/system.conf', '[Manager]\n#DefaultLimitNOFILE=1024:524288\n#DefaultLimitMEMLOCK=8M\n')
    memlock = _host.read_memlock(SysRoot(root))
    files = set(e['file'] for e in memlock['limits_conf'])
    assert files == {'/etc/security/limits.d/90-gpu-fabric-memlock.conf'}
    # '*' and, because limits.conf(5) skips root for wildcards, root too (memlock_include_root).
    assert sorted((e['domain'], e['type'], e['bytes']) for e in memlock['limits_conf']) == [
        ('*', 'hard', 'unlimited'), ('*', 'soft', 'unlimited'), ('root', 'hard', 'unlimited'), ('root', 'soft', 'unlimited')]
    assert memlock['systemd'] == [{'value': 'infinity:infinity', 'soft': 'unlimited', 'hard': 'unlimited',
                                   'file': '/etc/systemd/system.conf.d/90-gpu-fabric-memlock.conf'}]


def test_memlock_role_with_a_number_of_kib(tmp_path):
    root = str(tmp_path)
    write(root, '/etc/security/limits.d/90-gpu-fabric-memlock.conf',
          role_template('memlock', 'memlock-limits.conf.j2', memlock_soft=1048576, memlock_domain='@rdma'))
    write(root, '/etc/systemd/system.conf.d/90-gpu-fabric-memlock.conf',
          role_template('memlock', 'memlock-system.conf.j2', memlock_soft=1048576))
    memlock = _host.read_memlock(SysRoot(root))
    # limits.conf counts KiB, systemd bytes with K = 1024: both read as 1 GiB.
    soft = [e for e in memlock['limits_conf'] if e['type'] == 'soft']
    assert [(e['domain'], e['value'], e['bytes']) for e in soft] == [('@rdma', '1048576', 1 << 30), ('root', '1048576', 1 << 30)]
    assert (memlock['systemd'][0]['value'], memlock['systemd'][0]['soft'], memlock['systemd'][0]['hard']) == \
        ('1048576K:infinity', 1 << 30, 'unlimited')


def test_rdma_modules_role_output_reads_as_persistent(tmp_path):
    root = str(tmp_path)
    wanted = ['ib_core', 'ib_uverbs', 'ib_umad', 'rdma_ucm', 'ib_ipoib', 'nvidia_peermem']
    write(root, '/etc/modules-load.d/gpu-fabric.conf',
          role_template('rdma_modules', 'modules-load.conf.j2', __rdma_modules_wanted=wanted))
    persistent = _host.read_persistent_modules(SysRoot(root))
    assert persistent == dict((name, ['/etc/modules-load.d/gpu-fabric.conf']) for name in wanted)


# ---------------------------------------------------------------------------- simulated nodes

def test_rendered_proc_files_are_in_the_kernels_format(sim_root):
    root, _ctx = sim_root('nvidia_h100_8x_ndr')
    with open(os.path.join(root, 'proc/self/limits')) as handle:
        rendered = handle.read()
    # An unlimited node renders the H100 machine's own file, byte for byte.
    assert rendered == fixture_text('real', 'host', 'h100_vm_proc_self_limits.txt')
    with open(os.path.join(root, 'proc/net/route')) as handle:
        lines = handle.read().splitlines()
    real = fixture_text('real', 'host', 'h100_vm_proc_net_route.txt').splitlines()
    assert lines[0] == real[0] and all(len(line) == 127 for line in lines)
    # The default route line of the real machine, with this node's interface and gateway (10.100.0.1),
    # padded to 127 columns like every line.
    assert lines[1].rstrip(' ') == real[1].rstrip(' ').replace('eth0', 'enp209s0f0np0').replace('010200C0', '0100640A')


def test_simulated_healthy_and_drifted_nodes(sim_root):
    h100 = _host.read_host(SysRoot(sim_root('nvidia_h100_8x_ndr')[0]))
    assert h100['cpu_governors'] == {'performance': 16} and h100['cpufreq'] is True
    assert (h100['memlock']['soft'], h100['memlock']['hard']) == ('unlimited', 'unlimited')
    assert [e['file'] for e in h100['memlock']['limits_conf']] == ['/etc/security/limits.d/rdma.conf'] * 2
    assert h100['modules_persistent']['nvidia_peermem'] == ['/etc/modules-load.d/hpc.conf']
    assert 'nvidia_peermem' in h100['modules_loaded'] and h100['default_route_interface'] == 'enp209s0f0np0'
    # Seed 002 before its setup: powersave, 8 MiB, nothing in modules-load.d.
    homelab = _host.read_host(SysRoot(sim_root('homelab_cx4')[0]))
    assert homelab['cpu_governors'] == {'powersave': 8}
    assert homelab['memlock']['soft'] == 8388608 and homelab['memlock']['limits_conf'] == []
    assert homelab['modules_persistent'] == {} and 'ib_uverbs' in homelab['modules_loaded']
    vm = _host.read_host(SysRoot(sim_root('h200x2_no_rdma')[0]))
    assert (vm['cpufreq'], vm['cpu_governors'], vm['default_route_interface']) == (False, {}, 'eth0')


def test_host_faults_need_something_to_break():
    profiles = dict((name, render.load_profile(name)) for name in ('nvidia_h100_8x_ndr', 'homelab_cx4', 'metax_c500_cx7', 'no_rdma_vm'))
    assert faults.applies(profiles['nvidia_h100_8x_ndr'], 'governor_powersave')
    assert not faults.applies(profiles['homelab_cx4'], 'governor_powersave')        # powersave already
    assert not faults.applies(profiles['no_rdma_vm'], 'governor_powersave')         # no cpufreq
    assert not faults.applies(profiles['no_rdma_vm'], 'memlock_limited')            # no RDMA device
    assert faults.applies(profiles['nvidia_h100_8x_ndr'], 'modules_not_persistent')
    # MetaX: metax.ko is the GPU driver and MLNX OFED's openibd loads the RDMA modules at boot.
    assert not faults.applies(profiles['metax_c500_cx7'], 'modules_not_persistent')
    profile = copy.deepcopy(profiles['nvidia_h100_8x_ndr'])
    assert faults.apply(profile, 'modules_not_persistent') == {'module': 'nvidia_peermem'}


def test_gdr_facts_returns_host(sim_root, monkeypatch):
    root, _ctx = sim_root('nvidia_h100_8x_ndr', 'memlock_limited')
    result, failed = run_module(gdr_facts.main, {'root': root}, monkeypatch)
    assert not failed
    host = result['ansible_facts']['gpu_fabric_gdr']['host']
    assert (host['memlock']['soft'], host['memlock']['limits_conf']) == (65536, [])
    assert host['default_route_interface'] == 'enp209s0f0np0' and host['cpu_governors'] == {'performance': 16}


@pytest.mark.parametrize('value', ['\u00b2', '\u0663', '1_0', '9' * 5000, '12\0'])
def test_limits_conf_value_that_is_no_decimal_is_not_a_size(value):
    """'\u00b2'.isdigit() is True but int() refuses it; a run past int()'s digit limit neither."""
    entries = _host.parse_limits_conf('* soft memlock %s\n' % value, '/etc/security/limits.d/x.conf')
    assert entries == [{'domain': '*', 'type': 'soft', 'value': value, 'bytes': None, 'file': '/etc/security/limits.d/x.conf'}]
    assert _host.parse_systemd_size(value) is None
