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
import copy
import os
import pwd
import shutil
import struct
import sys

import yaml

try:
    from tests.sim import faults
    from tests.sim import tools_qos  # RoCE QoS
    from tests.sim import tools_gpu  # the GPUs' own state
    from tests.sim import tools_window  # AER, ethtool -S: what the pair tests' windows read
except ImportError:  # run as a script from tests/sim
    import faults
    import tools_qos
    import tools_gpu
    import tools_window

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
    """A profile by name or path. A variant names its ``base`` profile and says what differs:
    its own keys replace the base's, ``add_pci`` and ``add_hcas`` are appended to the base's
    lists, ``add_host_bridges`` merged into its host bridges, ``set_pci_kind`` updates every PCI
function of a kind, and ``rename_hcas`` ({old: new})
    renames the base's HCAs (the kernel numbers mlx5_N in probe order, so a card that enumerates
    first shifts every name after it)."""
    path = name_or_path
    if not os.path.isfile(path):
        path = os.path.join(PROFILE_DIR, name_or_path + '.yml')
    with open(path) as handle:
        profile = yaml.safe_load(handle)
    if not profile.get('base'):
        return profile
    merged = copy.deepcopy(load_profile(profile.pop('base')))
    renames = profile.pop('rename_hcas', None) or {}
    for hca in merged.get('hcas', []):
        hca['name'] = renames.get(hca['name'], hca['name'])
    merged['pci'] = merged.get('pci', []) + (profile.pop('add_pci', None) or [])
    merged['hcas'] = merged.get('hcas', []) + (profile.pop('add_hcas', None) or [])
    merged['host_bridges'] = dict(merged.get('host_bridges') or {}, **(profile.pop('add_host_bridges', None) or {}))
    # ``set_pci_kind`` ({kind: {key: value}}): e.g. another GPU model in the same slots.
    for kind, values in (profile.pop('set_pci_kind', None) or {}).items():
        for dev in merged['pci']:
            if dev.get('kind') == kind:
                dev.update(values)
    merged.update(profile)
    return merged


def variant_of(name):
    """The base profile a variant profile names, or None (tests run the fault catalog on bases only)."""
    with open(os.path.join(PROFILE_DIR, name + '.yml')) as handle:
        return (yaml.safe_load(handle) or {}).get('base')


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


# PCI Express link speeds, Link Capabilities/Status encoding (include/uapi/linux/pci_regs.h
# PCI_EXP_LNKCAP_SLS_*, PCI_EXP_LNKSTA_CLS_*: 1 = 2.5 GT/s ... 6 = 64 GT/s).
SPEED_CODES = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def config_space(acs=None, vendor=0, device=0, pci_class=0, express=None):
    """4 KiB PCI config space: type header, a PCI Express capability at 0x40 when ``express``
    ({type, max_speed, max_width, speed, width}) is given, and an ACS extended capability at 0x100."""
    data = bytearray(4096)
    struct.pack_into('<HH', data, 0, vendor, device)
    struct.pack_into('<I', data, 8, pci_class << 8)
    if express is not None:
        # Status: capabilities list; pointer at 0x34; PCI_CAP_ID_EXP (0x10) with version 2 and the
        # device/port type in Flags bits 7:4; Link Capabilities at +0x0c, Link Status at +0x12.
        struct.pack_into('<H', data, 0x06, 0x10)
        data[0x34] = 0x40
        struct.pack_into('<BBH', data, 0x40, 0x10, 0x00, 0x2 | (express['type'] << 4))
        struct.pack_into('<I', data, 0x4c, SPEED_CODES.get(express['max_speed'], 0) | (express['max_width'] << 4))
        struct.pack_into('<H', data, 0x52, SPEED_CODES.get(express['speed'], 0) | (express['width'] << 4))
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


# The PCIe link each kind of device is built for, (max GT/s, max lanes), by (vendor, device):
# H100 SXM (10de:2330), H200 (10de:2335), MI300X (1002:74a1), MetaX C500 (9999:4001), ConnectX-7
# (15b3:1021) and BlueField-3 (15b3:a2dc) are PCIe Gen5 x16 (vendors' data sheets; the H200s of
# tests/fixtures/real/h200x4-vm read max_link_speed '32.0 GT/s PCIe', max_link_width 16);
# ConnectX-6 / 6 Dx (15b3:101b, 101d), A100 (10de:20b0, 20b2) and RTX 3090 (10de:2204) Gen4 x16;
# ConnectX-4 (15b3:1013) Gen3 x16. Bridges (switch ports, root ports) default to Gen5 x16;
# a profile's ``link: {max_speed, max_width}`` says otherwise (an older platform's root port).
LINK_MAX = {
    (0x10de, 0x2330): (32.0, 16), (0x10de, 0x2335): (32.0, 16), (0x1002, 0x74a1): (32.0, 16),
    (0x9999, 0x4001): (32.0, 16), (0x15b3, 0x1021): (32.0, 16), (0x15b3, 0xa2dc): (32.0, 16),
    (0x15b3, 0x101b): (16.0, 16), (0x15b3, 0x101d): (16.0, 16), (0x10de, 0x20b0): (16.0, 16),
    (0x10de, 0x20b2): (16.0, 16), (0x10de, 0x2204): (16.0, 16), (0x15b3, 0x1013): (8.0, 16),
}
# PCI Express port types (include/uapi/linux/pci_regs.h PCI_EXP_TYPE_*).
EXP_ENDPOINT, EXP_ROOT_PORT, EXP_UPSTREAM, EXP_DOWNSTREAM = 0x0, 0x4, 0x5, 0x6


def _speed_text(speed):
    """As sysfs prints it since Linux 5.5 (drivers/pci/probe.c pci_bus_speed_strings)."""
    return '%.1f GT/s PCIe' % speed if speed in SPEED_CODES else 'Unknown'


def pcie_links(profile):
    """{bdf: {type, max_speed, max_width, speed, width}} for every PCIe function of the profile.

    A bridge without a parent is a root port, a bridge below a root port or a downstream port is a
    switch's upstream port, a bridge below an upstream port a downstream port; GPUs and NICs are
    endpoints ('other' devices are conventional PCI, as virtio is, unless they carry ``link``).
    Each link trains at the lower of its two ends' maxima (PCIe Base Spec 4.2.6 link training);
    a device's ``link_status: {speed, width}`` (a fault) sets what its link trained at instead.
    Both ends of a link report its status: the upper end's current_link_* describe the link
    below it, the lower end's the link above it."""
    by_bdf = {dev['bdf']: dev for dev in profile.get('pci', [])}
    links = {}

    def port_type(bdf, depth=0):
        dev = by_bdf[bdf]
        if dev.get('kind') != 'bridge':
            return EXP_ENDPOINT
        if not dev.get('parent') or depth > 32:
            return EXP_ROOT_PORT
        return EXP_DOWNSTREAM if port_type(dev['parent'], depth + 1) == EXP_UPSTREAM else EXP_UPSTREAM

    for bdf, dev in by_bdf.items():
        if dev.get('kind', 'other') == 'other' and 'link' not in dev:
            continue
        vendor, device = PCI_DEFAULTS[dev.get('kind', 'other')][:2]
        top = LINK_MAX.get((int(dev.get('vendor', vendor)), int(dev.get('device', device))), (32.0, 16))
        spec = dev.get('link') or {}
        links[bdf] = {'type': port_type(bdf), 'max_speed': float(spec.get('max_speed', top[0])),
                      'max_width': int(spec.get('max_width', top[1])), 'speed': 2.5, 'width': 0}
    for bdf, link in links.items():
        if link['type'] in (EXP_ROOT_PORT, EXP_DOWNSTREAM):
            continue
        parent = by_bdf[bdf].get('parent')
        upper = links.get(parent)
        status = by_bdf[bdf].get('link_status') or {}
        link['speed'] = float(status.get('speed', min(link['max_speed'], upper['max_speed'] if upper else link['max_speed'])))
        link['width'] = int(status.get('width', min(link['max_width'], upper['max_width'] if upper else link['max_width'])))
        if upper is not None and upper['type'] in (EXP_ROOT_PORT, EXP_DOWNSTREAM):
            upper['speed'], upper['width'] = link['speed'], link['width']
    return links


def render_pci(root, profile):
    by_bdf = {dev['bdf']: dev for dev in profile.get('pci', [])}
    paths = _pci_paths(profile)
    links = pcie_links(profile)
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
        _write(root, base + '/config', config_space(dev.get('acs'), vendor, device, pci_class, links.get(bdf)), 0o644)
        link = links.get(bdf)
        if link is not None:
            # drivers/pci/pci-sysfs.c: current_link_speed/max_link_speed as pci_speed_string(), widths '%u'.
            _write(root, base + '/current_link_speed', _speed_text(link['speed']))
            _write(root, base + '/current_link_width', link['width'])
            _write(root, base + '/max_link_speed', _speed_text(link['max_speed']))
            _write(root, base + '/max_link_width', link['max_width'])
        if driver:
            _link(root, base + '/driver', '/sys/bus/pci/drivers/' + driver)
            os.makedirs(os.path.join(root, 'sys/bus/pci/drivers', driver), exist_ok=True)
        _link(root, '/sys/bus/pci/devices/' + bdf, base)
    render_iommu(root, profile, paths)
    # The counters the pair tests' windows read (AER, ethtool -S) at rest, and what each test moves.
    tools_window.render_window(root, profile, paths, links)
    return paths


def render_iommu(root, profile, paths):
    """IOMMU groups and the kernel command line. Profile ``iommu``: {mode: identity (default: a GPU
    node booted with iommu=pt), DMA, DMA-FQ or off (a VM without an IOMMU, as tests/fixtures/real/
    h200x4-vm), cmdline: the IOMMU words of /proc/cmdline}. One group per function, numbered in PCI
    order; each device links to its group (iommu_group) and the group lists it (devices/), as
    drivers/iommu/iommu.c iommu_group_add_device() makes them; the group's type is the mode."""
    spec = dict({'mode': 'identity'}, **(profile.get('iommu') or {}))
    words = spec.get('cmdline', {'identity': 'intel_iommu=on iommu=pt', 'off': ''}.get(spec['mode'], 'intel_iommu=on'))
    release = (profile.get('kernel') or {}).get('release', '5.15.0-119-generic')
    _write(root, '/proc/cmdline', ('BOOT_IMAGE=/boot/vmlinuz-%s root=UUID=6b1d5d3e-8f8a-4c1e-9a55-2f0e3c7d9b11 ro quiet %s'
                                   % (release, words)).strip())
    os.makedirs(os.path.join(root, 'sys/kernel/iommu_groups'), exist_ok=True)
    os.makedirs(os.path.join(root, 'sys/class/iommu'), exist_ok=True)
    if spec['mode'] == 'off':
        return
    # One unit per host bridge: Intel's are dmar0, dmar1, ... (drivers/iommu/intel/dmar.c), AMD's
    # ivhd0, ... (drivers/iommu/amd/init.c); profile ``iommu.unit`` names the prefix.
    unit = spec.get('unit', 'dmar')
    for index, _host in enumerate(sorted(profile.get('host_bridges') or {'pci0000:00': {}})):
        os.makedirs(os.path.join(root, 'sys/devices/virtual/iommu/%s%d' % (unit, index)), exist_ok=True)
        _link(root, '/sys/class/iommu/%s%d' % (unit, index), '/sys/devices/virtual/iommu/%s%d' % (unit, index))
    for group, bdf in enumerate(sorted(paths)):
        base = '/sys/kernel/iommu_groups/%d' % group
        _write(root, base + '/type', spec['mode'])
        _link(root, base + '/devices/' + bdf, paths[bdf])
        _link(root, paths[bdf] + '/iommu_group', base)


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
# systemd-system.conf(5): the [Manager] section; DefaultLimitMEMLOCK= is what services without
# LimitMEMLOCK= get (a configured node: infinity, as the memlock role sets it).
SYSTEM_CONF = '# See systemd-system.conf(5) for details.\n\n[Manager]\n#DefaultLimitNOFILE=1024:524288\nDefaultLimitMEMLOCK=%s\n'
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
    node carries limits.d/rdma.conf and system.conf with DefaultLimitMEMLOCK=infinity, a limited one
    nothing: the kernel's or systemd's default), ``system_conf_d`` ({drop-in file: DefaultLimitMEMLOCK value}),
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
        _write(root, '/etc/systemd/system.conf', SYSTEM_CONF % 'infinity')
    for name, value in sorted((profile.get('system_conf_d') or {}).items()):
        _write(root, '/etc/systemd/system.conf.d/' + name, '[Manager]\nDefaultLimitMEMLOCK=%s\n' % value)
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


def sim_home():
    """The home directory of the simulated node's user (the one who runs the tests and the stand-ins)."""
    return '/home/' + pwd.getpwuid(os.geteuid()).pw_name


def render_nccl_conf(root, profile):
    """/etc/passwd with the user who runs the stand-ins, and NCCL's configuration files of the profile's
    ``nccl_conf``: {path: {NAME: value}}, '~/.nccl.conf' in that user's home (module_utils/_nccl_conf.py reads them)."""
    user = pwd.getpwuid(os.geteuid()).pw_name
    home = sim_home()
    entries = [] if os.geteuid() == 0 else ['root:x:0:0:root:/root:/bin/bash']
    entries.append('%s:x:%d:%d::%s:/bin/bash' % (user, os.geteuid(), os.getegid(), home))
    _write(root, '/etc/passwd', '\n'.join(entries))
    for path, settings in sorted((profile.get('nccl_conf') or {}).items()):
        rel = home + path[1:] if path.startswith('~/') else path
        _write(root, rel, ''.join('%s=%s\n' % item for item in sorted((settings or {}).items())))


def module_elf(modinfo, big_endian=False, wide=True):
    """A kernel module as far as modinfo(8) reads it: an ELF relocatable file with a ``.modinfo`` section of
    NUL-terminated 'key=value' strings (include/linux/moduleparam.h __MODULE_INFO) and the section names."""
    info = b''.join(('%s=%s' % (key, value)).encode() + b'\0' for key, value in modinfo.items())
    names = b'\0.modinfo\0.shstrtab\0'
    end = '>' if big_endian else '<'
    head, entry = (64, 64) if wide else (52, 40)
    info_at = head
    names_at = info_at + len(info)
    table_at = names_at + len(names)
    table_at += (-table_at) % 8

    def section(name, kind, offset, size):
        if wide:
            return struct.pack(end + 'IIQQQQIIQQ', name, kind, 0, 0, offset, size, 0, 0, 1, 0)
        return struct.pack(end + 'IIIIIIIIII', name, kind, 0, 0, offset, size, 0, 0, 1, 0)
    sections = section(0, 0, 0, 0) + section(1, 1, info_at, len(info)) + section(10, 3, names_at, len(names))
    ident = b'\x7fELF' + (b'\x02' if wide else b'\x01') + (b'\x02' if big_endian else b'\x01') + b'\x01' + b'\0' * 9
    if wide:
        header = ident + struct.pack(end + 'HHIQQQIHHHHHH', 1, 62, 1, 0, 0, table_at, 0, head, 0, 0, entry, 3, 2)
    else:
        header = ident + struct.pack(end + 'HHIIIIIHHHHHH', 1, 3, 1, 0, 0, table_at, 0, head, 0, 0, entry, 3, 2)
    body = header + info + names
    return body + b'\0' * (table_at - len(body)) + sections


def render_module_files(root, profile):
    """/lib/modules/<release>/modules.dep and the module files it names, from the profile's ``module_files``
    ({module file stem: version}, e.g. {'nvidia': '570.133.20', 'nvidia-peermem': '570.133.20'}): the driver
    package on disk, which an update without a reboot changes while the loaded modules stay."""
    files = profile.get('module_files') or {}
    if not files:
        return
    release = profile.get('kernel', {}).get('release', '5.15.0-119-generic')
    base = '/lib/modules/%s' % release
    lines = []
    for stem, version in sorted(files.items()):
        rel = 'updates/dkms/%s.ko' % stem
        info = {'version': version, 'srcversion': '0123456789ABCDEF0123456', 'vermagic': '%s SMP mod_unload modversions ' % release,
                'name': stem.replace('-', '_')}
        _write(root, '%s/%s' % (base, rel), module_elf(info))
        lines.append('%s:%s' % (rel, ' updates/dkms/nvidia.ko' if stem != 'nvidia' else ''))
    _write(root, base + '/modules.dep', '\n'.join(lines))


def render_kmsg(root, profile):
    """The kernel log as /dev/kmsg hands it out (Documentation/ABI/testing/dev-kmsg: 'prio,seq,usec,flags;message'),
    a regular file of the node's tree, from the profile's ``kmsg`` ([[priority, seconds, message]])."""
    records = profile.get('kmsg') or []
    if records:
        lines = ['%d,%d,%d,-;%s' % (prio, seq, int(seconds * 1e6), message) for seq, (prio, seconds, message) in enumerate(records, 1000)]
        _write(root, '/dev/kmsg', '\n'.join(lines))


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
    render_nccl_conf(dest, profile)
    # The GPUs' own state for the nvidia-smi stand-in, and the kernel log (tests/sim/tools_gpu.py).
    tools_gpu.render_gpu(dest, profile)
    render_module_files(dest, profile)
    render_kmsg(dest, profile)
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
