# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Verify (testinfra) what configure.yml left on each simulated node, seen from the node."""

from __future__ import annotations

import os
import struct

import pytest

testinfra_hosts = ['ansible://all']


@pytest.fixture
def root(host):
    return host.ansible.get_variables()['gpu_fabric_root']


def test_modules_load_file_is_vendor_aware(host, root):
    conf = host.file(os.path.join(root, 'etc/modules-load.d/gpu-fabric.conf'))
    assert conf.exists
    names = [line.strip() for line in conf.content_string.splitlines() if line.strip() and not line.startswith('#')]
    assert 'ib_uverbs' in names
    name = host.ansible.get_variables()['inventory_hostname']
    assert ('nvidia_peermem' in names) == (name in ('sim-h100', 'sim-drift'))   # NVIDIA nodes only


def test_peer_memory_module_loaded_now(host, root):
    name = host.ansible.get_variables()['inventory_hostname']
    modules = [line.split()[0] for line in host.file(os.path.join(root, 'proc/modules')).content_string.splitlines()]
    if name in ('sim-h100', 'sim-drift'):
        assert 'nvidia_peermem' in modules
    elif name == 'sim-roce':
        assert 'nvidia_peermem' not in modules and 'amdgpu' in modules     # amdgpu registers its own client
    else:
        assert 'nvidia_peermem' not in modules and 'metax' in modules


def test_memlock_limits(host, root):
    limits = host.file(os.path.join(root, 'etc/security/limits.d/90-gpu-fabric-memlock.conf')).content_string
    assert 'soft' in limits and 'hard' in limits and 'memlock' in limits and 'unlimited' in limits
    manager = host.file(os.path.join(root, 'etc/systemd/system.conf.d/90-gpu-fabric-memlock.conf')).content_string
    assert 'DefaultLimitMEMLOCK=infinity' in manager


def test_governor_performance_now_and_at_boot(host, root):
    cpus = host.file(os.path.join(root, 'sys/devices/system/cpu')).listdir()
    governors = [host.file(os.path.join(root, 'sys/devices/system/cpu', cpu, 'cpufreq/scaling_governor')).content_string.strip()
                 for cpu in cpus if cpu.startswith('cpu') and cpu[3:].isdigit()]
    assert governors and set(governors) == {'performance'}
    assert host.file(os.path.join(root, 'etc/systemd/system/gpu-fabric-cpu-governor.service')).exists


def test_acs_cleared_on_gpu_nic_paths(host, root):
    name = host.ansible.get_variables()['inventory_hostname']
    devices = os.path.join(root, 'sys/bus/pci/devices')
    redirecting = []
    for bdf in host.file(devices).listdir():
        data = host.file(os.path.join(devices, bdf, 'config')).content
        # extended capability list from 0x100 (PCIe spec 7.6); ACS id 0x000D, control at +6
        offset = 0x100
        while 0x100 <= offset < len(data) - 8:
            header = struct.unpack_from('<I', data, offset)[0]
            if header & 0xffff == 0x000D:
                if struct.unpack_from('<H', data, offset + 6)[0] & 0x2c:
                    redirecting.append(bdf)
                break
            offset = (header >> 20) & 0xffc
            if not offset:
                break
    assert redirecting == []
    unit = host.file(os.path.join(root, 'etc/systemd/system/gpu-fabric-acs.service'))
    assert unit.exists, name
    assert host.file(os.path.join(root, 'etc/systemd/system/multi-user.target.wants/gpu-fabric-acs.service')).is_symlink


def test_roce_lossless_now_and_at_boot(host, root):
    # Role roce_qos (issue 15) on the RoCE node: trust dscp, PFC on 3 only, ECN on 3, CNP on 6,
    # RDMA CM ToS 106, as the mlnx_qos stand-in and the sysfs/configfs files show it.
    name = host.ansible.get_variables()['inventory_hostname']
    unit = os.path.join(root, 'etc/systemd/system/gpu-fabric-roce-qos.service')
    if name != 'sim-roce':
        return      # the IB nodes' storage NICs are RoCE ports set up healthy by the profiles
    env = host.ansible.get_variables()['gpu_fabric_environment']
    shown = host.run('env GF_SIM_ROOT=%s %s/mlnx_qos -i ens10f0np0' % (root, env['PATH'].split(':')[0]))
    assert shown.rc == 0, shown.stderr
    assert 'Priority trust state: dscp' in shown.stdout
    assert 'enabled     0   0   0   1   0   0   0   0' in shown.stdout
    net = os.path.join(root, 'sys/class/net/ens10f0np0/ecn')
    assert host.file(os.path.join(net, 'roce_np/enable/3')).content_string.strip() == '1'
    assert host.file(os.path.join(net, 'roce_rp/enable/3')).content_string.strip() == '1'
    tos = host.file(os.path.join(root, 'sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos'))
    assert tos.content_string.strip() == '106'
    assert host.file(unit).exists
    assert host.file(os.path.join(root, 'etc/systemd/system/multi-user.target.wants/gpu-fabric-roce-qos.service')).is_symlink
    script = host.file(os.path.join(root, 'usr/local/sbin/gpu-fabric-roce-qos')).content_string
    # roce_qos' boot plan rendered by the boot_script filter: one quoted command or write per line.
    assert 'mlnx_qos -i ens17f0np0 --trust dscp >/dev/null || status=1\n' in script
    assert 'mlnx_qos -i ens17f0np0 --pfc 0,0,0,1,0,0,0,0 >/dev/null || status=1\n' in script
    assert "printf '%s\\n' 106 > /sys/kernel/config/rdma_cm/" in script and script.rstrip().endswith('exit $status')
