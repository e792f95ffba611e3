# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Render a simulated node profile (YAML) into a snapshot root.

The tree has the layout of a real node: devices live under /sys/devices on
their PCI path, /sys/bus/pci/devices, /sys/class/infiniband and /sys/class/net
hold relative symlinks into it (as the kernel's sysfs does), /proc carries
modules, kallsyms and osrelease, /usr/src and /usr/bin the OFED install; /proc/self/limits,
/proc/net/route, /etc/security/limits.d and /etc/modules-load.d the host layer.
The facts modules read it through their ``root`` option exactly as they read /.

Causality is modelled, not stored: a memory_peers client directory appears
only when its module is loaded *and* OFED was built with
HAVE_MM_KOBJ_EXPORTED (mlnx-ofa_kernel drivers/infiniband/core/peer_mem.c,
seed 000 section 5.1), so a fault that changes the kernel changes what follows.

Usage: python -m tests.sim.render PROFILE.yml DEST [--fault NAME[:TARGET]] ...
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys

import yaml

try:
    from tests.sim import faults
    from tests.sim import tools_qos  # RoCE QoS
except ImportError:  # run as a script from tests/sim
    import faults
    import tools_qos

HERE = os.path.dirname(os.path.abspath(__file__))
PROFILE_DIR = os.path.join(HERE, 'profiles')

# Standard IBTA PortCounters exposed under ports/N/counters (drivers/infiniband/core/sysfs.c).
IB_COUNTERS = (
    'VL15_dropped', 'excessive_buffer_overrun_errors', 'link_downed', 'link_error_recovery',
    'local_link_integrity_errors', 'multicast_rcv_packets', 'multicast_xmit_packets',
    'port_rcv_constraint_errors', 'port_rcv_data', 'port_rcv_errors', 'port_rcv_packets',
    'port_rcv_remote_physical_errors', 'port_rcv_switch_relay_errors', 'port_xmit_constraint_errors',
    'port_xmit_data', 'port_xmit_discards', 'port_xmit_packets', 'port_xmit_wait', 'symbol_error',
    'unicast_rcv_packets', 'unicast_xmit_packets',
)
# mlx5 hw_counters (drivers/infiniband/hw/mlx5/counters.c), as in the gpud H100 capture.
MLX5_HW_COUNTERS = (
    'duplicate_request', 'implied_nak_seq_err', 'lifespan', 'local_ack_timeout_err', 'out_of_buffer',
    'out_of_sequence', 'packet_seq_err', 'req_cqe_error', 'req_cqe_flush_error',
    'req_remote_access_errors', 'req_remote_invalid_request', 'resp_cqe_error',
    'resp_cqe_flush_error', 'resp_local_length_error', 'resp_remote_access_errors',
    'rnr_nak_retry_err', 'roce_adp_retrans', 'roce_adp_retrans_to', 'roce_slow_restart',
    'roce_slow_restart_cnps', 'roce_slow_restart_trans', 'rx_atomic_requests', 'rx_dct_connect',
    'rx_icrc_encapsulated', 'rx_read_requests', 'rx_write_requests',
)
# Traffic a healthy, busy port has seen (same order of magnitude as the gpud capture).
BUSY_COUNTERS = {
    'port_rcv_data': 230539874932483, 'port_xmit_data': 230442669431839,
    'port_rcv_packets': 317548853677, 'port_xmit_packets': 315487941081,
    'unicast_rcv_packets': 317548853677, 'unicast_xmit_packets': 315487941081,
    'port_xmit_wait': 2489603687,
}
STATE_CODES = {'DOWN': 1, 'INIT': 2, 'ARMED': 3, 'ACTIVE': 4, 'ACTIVE_DEFER': 5}
PHYS_CODES = {'Sleep': 1, 'Polling': 2, 'Disabled': 3, 'PortConfigurationTraining': 4,
              'LinkUp': 5, 'LinkErrorRecovery': 6, 'Phy Test': 7}
# gid_tbl_len of mlx5 (ibv_devinfo -v): 255 entries on RoCE ports; IB ports expose 128 here.
GID_TABLE = {'Ethernet': 255, 'InfiniBand': 128}
ZERO_GID = '0000:0000:0000:0000:0000:0000:0000:0000'


def load_profile(name_or_path):
    path = name_or_path
    if not os.path.isfile(path):
        path = os.path.join(PROFILE_DIR, name_or_path + '.yml')
    with open(path) as handle:
        return yaml.safe_load(handle)


def _write(root, rel, content, mode=0o644):
    path = os.path.join(root, rel.lstrip('/'))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = content if isinstance(content, bytes) else (str(content) + '\n').encode()
    with open(path, 'wb') as handle:
        handle.write(data)
    os.chmod(path, mode)


def _link(root, rel, target_rel):
    """Relative symlink at ``rel`` pointing to ``target_rel`` (both node paths)."""
    path = os.path.join(root, rel.lstrip('/'))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    target = os.path.relpath(os.path.join(root, target_rel.lstrip('/')), os.path.dirname(path))
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)


def config_space(acs=None, vendor=0, device=0, pci_class=0):
    """4 KiB PCI config space: type header, and an ACS extended capability at 0x100."""
    data = bytearray(4096)
    struct.pack_into('<HH', data, 0, vendor, device)
    struct.pack_into('<I', data, 8, pci_class << 8)
    if acs is not None:
        # Another extended capability first (AER, id 0x0001) so the walk is exercised.
        struct.pack_into('<I', data, 0x100, 0x0001 | (1 << 16) | (0x148 << 20))
        struct.pack_into('<I', data, 0x148, 0x000D | (1 << 16))
        struct.pack_into('<HH', data, 0x14C, int(acs.get('cap', 0x5f)), int(acs.get('ctl', 0)))
    return bytes(data)


def _pci_paths(profile):
    """{bdf: node path under /sys/devices} from the flat parent list."""
    by_bdf = {dev['bdf']: dev for dev in profile.get('pci', [])}
    if len(by_bdf) != len(profile.get('pci', [])):
        raise ValueError('profile %s lists a PCI address twice' % profile.get('name'))
    paths = {}

    def path_of(bdf, depth=0):
        if bdf in paths:
            return paths[bdf]
        if depth > 32:
            raise ValueError('PCI parent loop at %s' % bdf)
        dev = by_bdf[bdf]
        if dev.get('parent'):
            base = path_of(dev['parent'], depth + 1)
        else:
            base = '/sys/devices/' + dev['host']
        paths[bdf] = base + '/' + bdf
        return paths[bdf]

    for bdf in by_bdf:
        path_of(bdf)
    return paths


def _host_numa(profile, bdf, by_bdf):
    dev = by_bdf[bdf]
    if 'numa' in dev:
        return dev['numa']
    if dev.get('parent'):
        return _host_numa(profile, dev['parent'], by_bdf)
    return profile.get('host_bridges', {}).get(dev['host'], {}).get('numa', -1)


PCI_DEFAULTS = {
    'bridge': (0x8086, 0x347a, 0x060400, 'pcieport'),
    'gpu': (0x10de, 0x2330, 0x030200, 'nvidia'),
    'nic': (0x15b3, 0x1021, 0x020700, 'mlx5_core'),
    'other': (0x1af4, 0x1041, 0x020000, None),
}


def render_pci(root, profile):
    by_bdf = {dev['bdf']: dev for dev in profile.get('pci', [])}
    paths = _pci_paths(profile)
    for bdf, dev in by_bdf.items():
        vendor, device, pci_class, driver = PCI_DEFAULTS[dev.get('kind', 'other')]
        vendor = int(dev.get('vendor', vendor))
        device = int(dev.get('device', device))
        pci_class = int(dev.get('class', pci_class))
        driver = dev.get('driver', driver)
        base = paths[bdf]
        _write(root, base + '/vendor', '0x%04x' % vendor)
        _write(root, base + '/device', '0x%04x' % device)
        _write(root, base + '/class', '0x%06x' % pci_class)
        _write(root, base + '/numa_node', _host_numa(profile, bdf, by_bdf))
        _write(root, base + '/config', config_space(dev.get('acs'), vendor, device, pci_class), 0o644)
        if driver:
            _link(root, base + '/driver', '/sys/bus/pci/drivers/' + driver)
            os.makedirs(os.path.join(root, 'sys/bus/pci/drivers', driver), exist_ok=True)
        _link(root, '/sys/bus/pci/devices/' + bdf, base)
    return paths


def _mac_gid(mac):
    """Link-local GID from a MAC (modified EUI-64), as the kernel fills GID index 0 on RoCE."""
    octets = [int(x, 16) for x in mac.split(':')]
    octets[0] ^= 0x02
    eui = octets[:3] + [0xff, 0xfe] + octets[3:]
    groups = ['%02x%02x' % (eui[i], eui[i + 1]) for i in range(0, 8, 2)]
    return 'fe80:0000:0000:0000:' + ':'.join(groups)


def _v4_gid(ipv4):
    a, b, c, d = (int(x) for x in ipv4.split('.'))
    return '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' % (a, b, c, d)


def _port_gids(port, guid):
    """GID table entries (index -> (gid, type)) a port of this configuration has."""
    if port.get('link_layer', 'InfiniBand') == 'InfiniBand':
        return {0: ('fe80:0000:0000:0000:' + guid, 'IB/RoCE v1')}
    entries = {}
    roce_v2 = port.get('roce_v2', True)
    gids = [_mac_gid(port['mac'])]
    if port.get('ipv4'):
        gids.append(_v4_gid(port['ipv4']))
    index = 0
    for gid in gids:
        entries[index] = (gid, 'IB/RoCE v1')
        index += 1
        if roce_v2:
            entries[index] = (gid, 'RoCE v2')
            index += 1
    return entries


def render_hca(root, hca, pci_path):
    name = hca['name']
    dev = pci_path + '/infiniband/' + name
    _link(root, '/sys/class/infiniband/' + name, dev)
    _link(root, dev + '/device', pci_path)
    guid = hca.get('node_guid', 'a088:c203:005a:ab6c')
    for attr, default in (('hca_type', 'MT4129'), ('fw_ver', '28.41.1000'),
                          ('board_id', 'MT_0000000838'), ('node_guid', guid),
                          ('sys_image_guid', guid), ('node_type', '1: CA'),
                          ('node_desc', '%s %s' % (hca.get('host', 'node'), name))):
        _write(root, dev + '/' + attr, hca.get(attr, default))
    for port in hca.get('ports', []):
        render_port(root, dev, pci_path, port, guid, hca.get('hw_counters', True))


def render_port(root, dev, pci_path, port, guid, hw_counters):
    num = port.get('port', 1)
    base = '%s/ports/%d' % (dev, num)
    layer = port.get('link_layer', 'InfiniBand')
    state = port.get('state', 'ACTIVE')
    phys = port.get('phys_state', 'LinkUp')
    _write(root, base + '/state', '%d: %s' % (STATE_CODES[state], state))
    _write(root, base + '/phys_state', '%d: %s' % (PHYS_CODES[phys], phys))
    _write(root, base + '/rate', port.get('rate', '400 Gb/sec (4X NDR)'))
    _write(root, base + '/link_layer', layer)
    _write(root, base + '/lid', '0x%x' % port.get('lid', 0))
    _write(root, base + '/sm_lid', '0x%x' % port.get('sm_lid', 0))
    _write(root, base + '/lid_mask_count', 0)
    counters = dict.fromkeys(IB_COUNTERS, 0)
    if state == 'ACTIVE':
        counters.update(BUSY_COUNTERS)
    counters.update(port.get('counters', {}))
    for cname, value in counters.items():
        _write(root, '%s/counters/%s' % (base, cname), value)
    if hw_counters:
        values = dict.fromkeys(MLX5_HW_COUNTERS, 0)
        values.update(port.get('hw_counters', {}))
        for cname, value in values.items():
            _write(root, '%s/hw_counters/%s' % (base, cname), value)
    entries = _port_gids(port, port.get('port_guid', guid))
    netdev = port.get('netdev')
    for index in range(GID_TABLE[layer]):
        gid, gid_type = entries.get(index, (ZERO_GID, None))
        _write(root, '%s/gids/%d' % (base, index), gid)
        if gid_type:
            # Unused entries answer EINVAL on read in a live sysfs; here they are absent.
            _write(root, '%s/gid_attrs/types/%d' % (base, index), gid_type)
            if layer == 'Ethernet' and netdev:
                _write(root, '%s/gid_attrs/ndevs/%d' % (base, index), netdev)
    if netdev:
        render_netdev(root, pci_path, netdev, port, num, entries[0][0])


def render_netdev(root, pci_path, netdev, port, port_num, gid0):
    base = pci_path + '/net/' + netdev
    _link(root, '/sys/class/net/' + netdev, base)
    _link(root, base + '/device', pci_path)
    _write(root, base + '/mtu', port.get('netdev_mtu', 4092 if port.get('link_layer') == 'InfiniBand' else 9000))
    _write(root, base + '/operstate', port.get('netdev_operstate', 'up' if port.get('state', 'ACTIVE') == 'ACTIVE' else 'down'))
    if port.get('link_layer', 'InfiniBand') == 'InfiniBand':
        # IPoIB hardware address: 4 bytes of QPN and flags, then the port GID (20 bytes).
        hexgid = gid0.replace(':', '')
        address = '00:00:10:29:' + ':'.join(hexgid[i:i + 2] for i in range(0, 32, 2))
    else:
        address = port['mac']
    _write(root, base + '/address', address)
    _write(root, base + '/dev_port', port_num - 1)
    _write(root, base + '/dev_id', '0x%x' % (port_num - 1))
    _write(root, base + '/type', 32 if port.get('link_layer') == 'InfiniBand' else 1)


def render_software(root, profile):
    kernel = profile.get('kernel', {})
    release = kernel.get('release', '5.15.0-119-generic')
    _write(root, '/proc/sys/kernel/osrelease', release)
    modules = list(profile.get('modules', []))
    # /proc/modules: name size refcount deps state address (kernel/module/procfs.c m_show()).
    _write(root, '/proc/modules', '\n'.join(
        '%s %d 0 - Live 0x0000000000000000' % (mod, 16384 + 4096 * i) for i, mod in enumerate(modules)))
    for mod, version in profile.get('module_versions', {}).items():
        if mod in modules:
            _write(root, '/sys/module/%s/version' % mod, version)
    kallsyms = ['0000000000000000 T _stext', '0000000000000000 D mm_kobj']
    symvers = ['0x5b8f7c2a\tkobject_create_and_add\tvmlinux\tEXPORT_SYMBOL_GPL\t']
    if kernel.get('exports_mm_kobj', True):
        kallsyms.insert(1, '0000000000000000 r __ksymtab_mm_kobj')
        symvers.append('0x7d3a1e59\tmm_kobj\tvmlinux\tEXPORT_SYMBOL_GPL\t')
    kallsyms.append('0000000000000000 T ib_register_peer_memory_client\t[ib_core]'
                    if profile.get('ofed') else '0000000000000000 T ib_register_device\t[ib_core]')
    _write(root, '/proc/kallsyms', '\n'.join(kallsyms))
    if kernel.get('headers', True):
        _write(root, '/usr/src/kernels/%s/Module.symvers' % release, '\n'.join(symvers))
    ofed = profile.get('ofed')
    if ofed:
        version = ofed['version']
        _write(root, '/usr/bin/ofed_info', OFED_INFO_SCRIPT % {'version': version}, 0o755)
        define = ('/* mm_kobj is exported by the kernel */\n#define HAVE_MM_KOBJ_EXPORTED 1' if ofed.get('have_mm_kobj_exported', True)
                  else '/* #undef HAVE_MM_KOBJ_EXPORTED */')
        header = '/usr/src/ofa_kernel/%s/%s/compat/config.h' % (profile.get('arch', 'x86_64'), release)
        _write(root, header, '/* compat/config.h.  Generated from config.h.in by configure.  */\n'
                             '#define HAVE_IB_UMEM_DMABUF 1\n%s\n#define HAVE_XARRAY 1' % define)
        _link(root, '/usr/src/ofa_kernel/default', os.path.dirname(os.path.dirname(header)) + '/' + release)
        if ofed.get('have_mm_kobj_exported', True):
            for client in profile.get('memory_peers', []):
                if client['module'] in modules:
                    _write(root, '/sys/kernel/mm/memory_peers/%s/version' % client['client'], client['version'])
                    _write(root, '/sys/kernel/mm/memory_peers/%s/num_alloc_mrs' % client['client'], 0)
    nvidia = profile.get('nvidia_driver')
    if nvidia:
        flavour = 'NVIDIA UNIX Open Kernel Module for x86_64' if nvidia.get('open', True) else 'NVIDIA UNIX x86_64 Kernel Module'
        _write(root, '/proc/driver/nvidia/version',
               'NVRM version: %s  %s  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Sun Aug 24 10:08:47 UTC 2025\n'
               'GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)' % (flavour, nvidia['version']))
    cpus = profile.get('cpus', 8)
    governor = profile.get('cpu_governor', 'performance')
    for cpu in range(cpus):
        if governor:
            _write(root, '/sys/devices/system/cpu/cpu%d/cpufreq/scaling_governor' % cpu, governor)
            _write(root, '/sys/devices/system/cpu/cpu%d/cpufreq/scaling_available_governors' % cpu, 'performance powersave')
        else:
            os.makedirs(os.path.join(root, 'sys/devices/system/cpu/cpu%d' % cpu), exist_ok=True)
    _write(root, '/sys/devices/system/cpu/online', '0-%d' % (cpus - 1))


# /proc/<pid>/limits of a root login on the H100 machine (fixtures/real/host/h100_vm_proc_self_limits.txt),
# in the kernel's layout (fs/proc/base.c proc_pid_limits: '%-25s %-20s %-20s %-10s'); the
# 'Max locked memory' row comes from the profile.
PROC_LIMITS = (
    ('Max cpu time', 'unlimited', 'unlimited', 'seconds'), ('Max file size', 'unlimited', 'unlimited', 'bytes'),
    ('Max data size', 'unlimited', 'unlimited', 'bytes'), ('Max stack size', '8388608', 'unlimited', 'bytes'),
    ('Max core file size', '0', 'unlimited', 'bytes'), ('Max resident set', 'unlimited', 'unlimited', 'bytes'),
    ('Max processes', '515506', '515506', 'processes'), ('Max open files', '20000', '20000', 'files'),
    ('Max locked memory', None, None, 'bytes'), ('Max address space', 'unlimited', 'unlimited', 'bytes'),
    ('Max file locks', 'unlimited', 'unlimited', 'locks'), ('Max pending signals', '515506', '515506', 'signals'),
    ('Max msgqueue size', '819200', '819200', 'bytes'), ('Max nice priority', '0', '0', ''),
    ('Max realtime priority', '0', '0', ''), ('Max realtime timeout', 'unlimited', 'unlimited', 'us'),
)
# What EL's rdma packages and most RDMA guides put in limits.d ('# configuration for rdma tuning').
RDMA_LIMITS_CONF = ('# configuration for rdma tuning\n*       soft    memlock         unlimited\n'
                    '*       hard    memlock         unlimited\n# rdma tuning end')
# Modules nothing else loads at boot on every stack (the peer-memory module; the RDMA
# user-space modules where neither MLNX OFED's openibd nor rdma-core loads them): what a
# configured node lists in modules-load.d (seed 002's hpc.conf: ib_ipoib ib_umad ib_uverbs nvidia-peermem).
PERSISTED_MODULES = ('ib_ipoib', 'ib_umad', 'ib_uverbs', 'rdma_ucm', 'nvidia_peermem', 'nv_peer_mem')


def _route_hex(ipv4):
    """An address as /proc/net/route prints it: the __be32 with %08X on a little-endian host."""
    return '%08X' % struct.unpack('<I', bytes(int(x) for x in ipv4.split('.')))[0]


def render_host(root, profile):
    """The host layer: RLIMIT_MEMLOCK and where it is configured, modules-load.d, routes.

    Profile keys (defaults: a configured node): ``memlock`` (bytes or 'unlimited'; an unlimited
    node carries limits.d/rdma.conf, a limited one nothing: the kernel's or systemd's default),
    ``modules_load_d`` ({file: [modules]}, default one hpc.conf with the loaded PERSISTED_MODULES),
    ``not_persistent`` (modules left out of every modules-load.d file), ``default_route``
    ({iface, gateway, metric}) and the IPv4 addresses of the netdevs (connected /24 routes).
    """
    memlock = str(profile.get('memlock', 'unlimited'))
    rows = ['%-25s %-20s %-20s %-10s' % ('Limit', 'Soft Limit', 'Hard Limit', 'Units')]
    for name, soft, hard, unit in PROC_LIMITS:
        soft, hard = (memlock, memlock) if soft is None else (soft, hard)
        rows.append('%-25s %-20s %-20s %-10s' % (name, soft, hard, unit) if unit else '%-25s %-20s %-20s ' % (name, soft, hard))
    _write(root, '/proc/self/limits', '\n'.join(rows))
    if memlock == 'unlimited':
        _write(root, '/etc/security/limits.d/rdma.conf', RDMA_LIMITS_CONF)
    modules = profile.get('modules', [])
    files = profile.get('modules_load_d')
    if files is None:
        # Written as seed 002 did (nvidia-peermem with a dash: modprobe reads - as _).
        files = {'hpc.conf': [m.replace('nvidia_peermem', 'nvidia-peermem') for m in PERSISTED_MODULES if m in modules]}
    left_out = set(profile.get('not_persistent', []))
    for name, listed in files.items():
        listed = [m for m in listed if m.replace('-', '_') not in left_out]
        if listed:
            _write(root, '/etc/modules-load.d/' + name, '\n'.join(listed))
    # fib_route_seq_show(): a header and one line per route, each padded to 127 columns.
    lines = ['%-127s' % 'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT']
    route = profile.get('default_route')
    if route:
        # RTF_UP | RTF_GATEWAY
        lines.append('%-127s' % ('%s\t00000000\t%s\t0003\t0\t0\t%d\t00000000\t0\t0\t0'
                                 % (route['iface'], _route_hex(route['gateway']), route.get('metric', 0))))
    for hca in profile.get('hcas', []):
        for port in hca.get('ports', []):
            if port.get('netdev') and port.get('ipv4'):
                net = '.'.join(port['ipv4'].split('.')[:3] + ['0'])
                lines.append('%-127s' % ('%s\t%s\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0' % (port['netdev'], _route_hex(net))))
    _write(root, '/proc/net/route', '\n'.join(lines))


# The MLNX_OFED ofed_info script answers -s with the package name and a colon
# (fixtures/public/ofed_info/daocloud_mlnx_ofed_23_07.txt: 'MLNX_OFED_LINUX-23.07-0.5.1.2:').
OFED_INFO_SCRIPT = '''#!/bin/bash
if [ "X$1" == "X-s" ]; then echo %(version)s:; exit 0; fi
if [ "X$1" == "X-n" ]; then echo %(version)s | sed -e 's/MLNX_OFED_LINUX-//'; exit 0; fi
echo %(version)s:
echo
echo "mlnx-ofa_kernel:"
'''


def render(profile, dest):
    """Render ``profile`` (a dict, faults already applied) into ``dest``."""
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    paths = render_pci(dest, profile)
    for hca in profile.get('hcas', []):
        render_hca(dest, dict(hca, host=profile.get('hostname', 'node')), paths[hca['pci']])
    os.makedirs(os.path.join(dest, 'sys/class/infiniband'), exist_ok=True)
    os.makedirs(os.path.join(dest, 'sys/class/net'), exist_ok=True)
    render_software(dest, profile)
    render_host(dest, profile)
    # RoCE QoS: ECN/CNP sysfs, RDMA CM ToS in configfs, the DCB state of the stand-ins.
    tools_qos.render_qos(dest, profile)
    _write(dest, '/etc/hostname', profile.get('hostname', profile.get('name', 'node')))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('profile')
    parser.add_argument('dest')
    parser.add_argument('--fault', action='append', default=[])
    args = parser.parse_args(argv)
    profile = load_profile(args.profile)
    for fault in args.fault:
        name, _sep, target = fault.partition(':')
        faults.apply(profile, name, target or None)
    render(profile, args.dest)
    return 0


if __name__ == '__main__':
    sys.exit(main())
