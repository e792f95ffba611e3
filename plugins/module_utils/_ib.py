# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""InfiniBand / RoCE link facts read from sysfs (/sys/class/infiniband, /sys/class/net).

Parsing is kept in small pure functions (``parse_*``) tested on real captured
trees; :func:`read_ib` does the I/O through one :class:`SysRoot`.
"""

from __future__ import annotations

import re
import time
from typing import Any

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._rails import position_key
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot, parse_int, parse_numa

IB_CLASS = '/sys/class/infiniband'
NET_CLASS = '/sys/class/net'

# "400 Gb/sec (4X NDR)", "10 Gb/sec (4X)" (iWARP i40iw: no speed name),
# "2.5 Gb/sec (1X SDR)", "53.125 Gb/sec (1X HDR)". Kernel: drivers/infiniband/core/sysfs.c rate_show().
# Digits bounded and ASCII (re.A): a damaged file's thousand-digit code is no state, and
# int() refuses a string past its digit limit with a ValueError.
_RATE_RE = re.compile(r'^\s*(?P<gbps>\d{1,9}(?:\.\d{1,9})?)\s*Gb/sec\s*\((?P<width>\d{1,3}X)\s*(?:(?P<speed>[A-Za-z0-9]+)\s*)?\)',
                      re.A)
# "4: ACTIVE", "5: LinkUp"; a bare word is accepted too.
# The name ends on a non-blank, not '\S.*?' before '\s*$': that pair tries every split of a run of
# blanks, and a state file with 128 KiB of blanks in a snapshot held the offline run for 1,279 s
# (tests/unit/plugins/test_regex_backtracking.py checks every pattern for the shape).
_STATE_RE = re.compile(r'^\s*(?:(?P<code>\d{1,9})\s*:\s*)?(?P<name>\S(?:.*\S)?)\s*$', re.A)
_BDF_RE = re.compile(r'^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$')

# Width in bits of the IBTA PortCounters error fields (IBA spec vol 1, 16.1.3.5,
# Table "PortCounters"). A value at 2**bits-1 has saturated and stopped counting:
# it says "at least this many", not the count (sysfs_ib/gpud_h100_8x_ndr_plus_bond:
# link_downed = 255 on a flapping link). Data/packet counters are read through
# PortCountersExtended (64 bit) by the kernel and are not listed.
COUNTER_BITS = {
    'symbol_error': 16,
    'link_error_recovery': 8,
    'link_downed': 8,
    'port_rcv_errors': 16,
    'port_rcv_remote_physical_errors': 16,
    'port_rcv_switch_relay_errors': 16,
    'port_xmit_discards': 16,
    'port_xmit_constraint_errors': 8,
    'port_rcv_constraint_errors': 8,
    'local_link_integrity_errors': 4,
    'excessive_buffer_overrun_errors': 4,
    'VL15_dropped': 16,
}

# IB MTU enum values, include/rdma/ib_verbs.h enum ib_mtu.
# Error counters whose increase during a test is attributed to that test's link
# (IBTA PortCounters; the same names as ib_link_facts' counters).
ERROR_COUNTERS = ('symbol_error', 'link_error_recovery', 'link_downed', 'port_rcv_errors',
                  'port_rcv_remote_physical_errors', 'port_rcv_switch_relay_errors', 'port_xmit_discards',
                  'local_link_integrity_errors', 'excessive_buffer_overrun_errors', 'VL15_dropped')
# hw_counters of mlx5 that count retransmissions and broken RC operations.
HW_ERROR_COUNTERS = ('local_ack_timeout_err', 'out_of_sequence', 'packet_seq_err', 'req_cqe_error',
                     'resp_cqe_error', 'rnr_nak_retry_err', 'req_transport_retries_exceeded')
IB_MTUS = (256, 512, 1024, 2048, 4096)
# include/rdma/ib_addr.h iboe_get_mtu(): RoCE headers the netdev MTU must carry
# besides the IB payload: GRH 40 + UDP 8 + BTH 12 + XRC ext 4 + AtomicETH 28 + ICRC 4.
ROCE_MTU_OVERHEAD = 40 + 8 + 12 + 4 + 28 + 4

_ZERO_GID = '0000:0000:0000:0000:0000:0000:0000:0000'
# Linux's interface name limit: IFNAMSIZ (16) bytes with the terminating NUL (include/uapi/linux/if.h).
IFNAMSIZ = 16
_V4_MAPPED_PREFIX = '0000:0000:0000:0000:0000:ffff:'


def netdev_name_problem(name: object) -> str | None:
    """None for a name the kernel accepts for an interface, else what is wrong with it.

    net/core/dev.c dev_valid_name(): not empty, shorter than IFNAMSIZ bytes, not '.' or '..',
    no '/', ':' or whitespace. Control characters are refused too (no driver names one so).
    Every netdev name read from a tree (gid_attrs/ndevs, device/net, a saved output's file
    name) passes here before it names a path to read, an argument or a line of a boot script:
    a gid_attrs/ndevs file or a device/net entry of a copied root may hold a NUL, '../..' or a
    newline."""
    if not isinstance(name, str) or not name:
        return 'empty'
    size = len(name.encode('utf-8', 'surrogateescape'))
    if size >= IFNAMSIZ:
        return '%d bytes, the limit is %d' % (size, IFNAMSIZ - 1)
    if name in ('.', '..'):
        return 'a directory name'
    for char in name:
        if char in '/:' or char.isspace() or ord(char) < 32 or ord(char) == 127:
            return 'holds %s' % ascii(char)
    return None


def parse_rate(text: str | None) -> tuple[float | None, str | None, str | None]:
    """'400 Gb/sec (4X NDR)' -> (400.0, '4X', 'NDR'); unknown format -> (None, None, None)."""
    match = _RATE_RE.match(text or '')
    if not match:
        return None, None, None
    return float(match.group('gbps')), match.group('width'), match.group('speed')


def parse_state(text: str | None) -> tuple[int | None, str | None]:
    """'4: ACTIVE' -> (4, 'ACTIVE'); 'LinkUp' -> (None, 'LinkUp'); None -> (None, None)."""
    match = _STATE_RE.match(text or '')
    if not match:
        return None, None
    code = match.group('code')
    return (int(code) if code is not None else None), match.group('name')


def gid_ipv4(gid: str | None) -> str | None:
    """IPv4 of an IPv4-mapped RoCE GID ('...:ffff:0a07:6011' -> '10.7.96.17'), else None."""
    if not gid or not gid.lower().startswith(_V4_MAPPED_PREFIX):
        return None
    tail = gid[len(_V4_MAPPED_PREFIX):].split(':')
    if len(tail) != 2:
        return None
    try:
        high, low = int(tail[0], 16), int(tail[1], 16)
    except ValueError:
        return None
    return '%d.%d.%d.%d' % (high >> 8, high & 0xff, low >> 8, low & 0xff)


def roce_active_mtu(netdev_mtu: int | None) -> int | None:
    """Largest IB MTU a RoCE port can use on a netdev of this MTU (iboe_get_mtu)."""
    if netdev_mtu is None:
        return None
    usable = netdev_mtu - ROCE_MTU_OVERHEAD
    fitting = [mtu for mtu in IB_MTUS if mtu <= usable]
    return fitting[-1] if fitting else None


def parse_counters(values: dict[str, str]) -> tuple[dict[str, int | None], list[str], list[str]]:
    """{name: raw text} -> ({name: int or None}, [saturated names], [unavailable names])."""
    counters: dict[str, int | None] = {}
    saturated: list[str] = []
    unavailable: list[str] = []
    for name in sorted(values):
        number = parse_int(values[name])
        counters[name] = number
        if number is None:
            unavailable.append(name)
        elif name in COUNTER_BITS and number >= (1 << COUNTER_BITS[name]) - 1:
            saturated.append(name)
    return counters, saturated, unavailable


def parse_ibv_devinfo(text: str | None) -> dict[tuple[str, int], int]:
    """``ibv_devinfo`` (plain or -v) -> {(hca, port): active_mtu}.

    Lines: 'hca_id:\tmlx4_0', '\t\tport:\t1', '\t\t\tactive_mtu:\t\t4096 (5)'
    (ibv_devinfo/heioy_mlx4_2hca_port2_down fixture), indented by tabs or spaces. Only
    the values of enum ibv_mtu count (libibverbs ibv_mtu_string(); anything else is
    printed 'invalid MTU'); a port cut off before its active_mtu line (a truncated paste,
    ibv_devinfo/deepep60_cx7_ib_port_down_lid65535_truncated) is left out.
    """
    result: dict[tuple[str, int], int] = {}
    hca: str | None = None
    port: int | None = None
    for line in (text or '').splitlines():
        stripped = line.strip()
        if stripped.startswith('hca_id:'):
            name = stripped.split(':', 1)[1].split()
            hca = name[0] if name else None
            port = None
        elif stripped.startswith('port:') and hca is not None:
            port = parse_int(stripped.split(':', 1)[1])
        elif stripped.startswith('active_mtu:') and hca is not None and port is not None:
            value = stripped.split(':', 1)[1].split()
            mtu = parse_int(value[0]) if value else None
            if mtu in IB_MTUS:
                result[(hca, port)] = mtu
    return result


def _read_dir_values(sysroot: SysRoot, rel: str) -> dict[str, str]:
    """{file name: text} of every attribute file in a counters directory."""
    values: dict[str, str] = {}
    for name in sysroot.listdir(rel):
        text = sysroot.text('%s/%s' % (rel, name))
        if text is not None:
            values[name] = text
    return values


def _read_gids(sysroot: SysRoot, port_rel: str) -> list[dict[str, Any]]:
    """Populated GID entries with their RoCE type and netdev.

    Unused entries read as all zeros and their gid_attrs return EINVAL, so the
    attributes are read only for populated entries (and quietly).
    """
    gids: list[dict[str, Any]] = []
    names = sysroot.listdir(port_rel + '/gids')

    def order(name: str) -> int:
        number = parse_int(name)
        return 1 << 30 if number is None else number

    for name in sorted(names, key=order):
        index = parse_int(name)
        if index is None:
            continue
        gid = sysroot.text('%s/gids/%s' % (port_rel, name), quiet=True)
        if not gid or gid == _ZERO_GID:
            continue
        gid_type = sysroot.text('%s/gid_attrs/types/%s' % (port_rel, name), quiet=True)
        ndev = sysroot.text('%s/gid_attrs/ndevs/%s' % (port_rel, name), quiet=True)
        if ndev and netdev_name_problem(ndev):
            sysroot.warn('%s/gid_attrs/ndevs/%s: %s is not a network interface name (%s): not used'
                         % (port_rel, name, ascii(ndev[:40]), netdev_name_problem(ndev)))
            ndev = None
        gids.append({
            'index': index,
            'gid': gid,
            'type': gid_type or None,
            'netdev': ndev or None,
            'ipv4': gid_ipv4(gid),
        })
    return gids


def _netdev_facts(sysroot: SysRoot, netdev: str | None) -> tuple[int | None, str | None]:
    if not netdev:
        return None, None
    base = '%s/%s' % (NET_CLASS, netdev)
    return parse_int(sysroot.text(base + '/mtu', quiet=True)), sysroot.text(base + '/operstate', quiet=True)


def _port_netdev(sysroot: SysRoot, dev_rel: str, port_num: int | None, link_layer: str | None, gids: list[dict[str, Any]]) -> Any:
    """The netdev of a port, found the way ibdev2netdev (mlnx-ofa_kernel ofed_scripts) does.

    RoCE: the netdev of GID entry 0 (gid_attrs/ndevs). IB: the IPoIB netdev of
    the same PCI function whose hardware address ends with the port GID (an
    IPoIB address is 4 bytes of QPN and flags followed by the 16-byte GID).
    Otherwise dev_port (0-based port index), dev_id for old mlx4 ports.
    """
    for gid in gids:
        if gid['netdev']:
            return gid['netdev']
    candidates: list[Any] = []
    for netdev in sysroot.listdir(dev_rel + '/device/net'):
        problem = netdev_name_problem(netdev)
        if problem:
            # A live kernel names no interface so; a copied root can (a newline in a name
            # would end a comment line of a generated boot script): not used, said.
            sysroot.warn('%s/device/net: %s is not a network interface name (%s): not used' % (dev_rel, ascii(netdev[:40]), problem))
        else:
            candidates.append(netdev)
    if link_layer == 'InfiniBand' and gids:
        wanted = gids[0]['gid'].replace(':', '').lower()
        for netdev in candidates:
            address = (sysroot.text('%s/%s/address' % (NET_CLASS, netdev), quiet=True) or '').replace(':', '').lower()
            if len(address) == 40 and address[8:] == wanted:
                return netdev
    for netdev in candidates:
        base = '%s/%s' % (NET_CLASS, netdev)
        dev_port = parse_int(sysroot.text(base + '/dev_port', quiet=True))
        if not dev_port:
            dev_port = parse_int(sysroot.text(base + '/dev_id', quiet=True), 16)
        if (dev_port or 0) + 1 == port_num:
            return netdev
    return None


def _read_port(sysroot: SysRoot, dev_rel: str, name: str, ibv_mtus: dict[Any, int]) -> dict[str, Any]:
    port_rel = '%s/ports/%s' % (dev_rel, name)
    port_num = parse_int(name)
    state_code, state = parse_state(sysroot.text(port_rel + '/state'))
    phys_code, phys_state = parse_state(sysroot.text(port_rel + '/phys_state'))
    rate_text = sysroot.text(port_rel + '/rate')
    rate_gbps, width, speed = parse_rate(rate_text)
    if rate_text is not None and rate_gbps is None:
        sysroot.warn('%s/rate: unrecognised value %r' % (port_rel, rate_text))
    link_layer = sysroot.text(port_rel + '/link_layer')
    gids = _read_gids(sysroot, port_rel)
    netdev = _port_netdev(sysroot, dev_rel, port_num, link_layer, gids)
    netdev_mtu, netdev_operstate = _netdev_facts(sysroot, netdev)

    raw = _read_dir_values(sysroot, port_rel + '/counters')
    raw.update(_read_dir_values(sysroot, port_rel + '/counters_ext'))
    counters, saturated, unavailable = parse_counters(raw)
    hw_counters = parse_counters(_read_dir_values(sysroot, port_rel + '/hw_counters'))[0]

    dev_name = dev_rel.rsplit('/', 1)[-1]
    active_mtu, mtu_source = None, None
    if (dev_name, port_num) in ibv_mtus:
        active_mtu, mtu_source = ibv_mtus[(dev_name, port_num)], 'ibv_devinfo'
    elif link_layer == 'Ethernet' and netdev_mtu is not None:
        active_mtu, mtu_source = roce_active_mtu(netdev_mtu), 'netdev_mtu'

    return {
        'port': port_num,
        'state': state,
        'state_code': state_code,
        'phys_state': phys_state,
        'phys_state_code': phys_code,
        'rate': rate_text,
        'rate_gbps': rate_gbps,
        'width': width,
        'speed': speed,
        'link_layer': link_layer,
        'lid': parse_int(sysroot.text(port_rel + '/lid', quiet=True), 16),
        'sm_lid': parse_int(sysroot.text(port_rel + '/sm_lid', quiet=True), 16),
        'lid_mask_count': parse_int(sysroot.text(port_rel + '/lid_mask_count', quiet=True)),
        'netdev': netdev,
        'netdev_mtu': netdev_mtu,
        'netdev_operstate': netdev_operstate,
        'active_mtu': active_mtu,
        'active_mtu_source': mtu_source,
        'gids': gids,
        'counters': counters,
        'counters_saturated': saturated,
        'counters_unavailable': unavailable,
        'hw_counters': hw_counters,
    }


def _utf8(name: str) -> bool:
    try:
        name.encode('utf-8')
    except UnicodeEncodeError:
        return False
    return True


def list_rdma_devices(sysroot: SysRoot) -> list[Any]:
    """[(name, PCI address or None)] of every device in /sys/class/infiniband, in position order
    (PCI address, then the name in natural order: module_utils/_rails.py position_key), never
    in the text order of the names, which puts mlx5_10 before mlx5_2."""
    devices = []
    for name in sysroot.listdir(IB_CLASS):
        if not _utf8(name):
            # os.listdir hands a name that is not UTF-8 over with surrogate escapes (PEP 383): no
            # kernel driver names a device so, and the name could not be reported (JSON is UTF-8).
            sysroot.warn('%s: an entry whose name is not UTF-8 (%r) is no RDMA device: left out' % (IB_CLASS, name))
            continue
        pci_path = sysroot.resolve('%s/%s/device' % (IB_CLASS, name))
        leaf = pci_path.rsplit('/', 1)[-1] if pci_path else ''
        devices.append((name, leaf.lower() if _BDF_RE.match(leaf) else None))
    return sorted(devices, key=lambda entry: position_key(entry[0], entry[1]))


def read_ib(sysroot: SysRoot, ibv_mtus: dict[Any, int] | None = None) -> list[dict[str, Any]]:
    """All RDMA devices under ``sysroot`` -> list of device dicts (possibly empty)."""
    ibv_mtus = ibv_mtus or {}
    devices = []
    for name, pci_address in list_rdma_devices(sysroot):
        dev_rel = '%s/%s' % (IB_CLASS, name)
        node_type = parse_state(sysroot.text(dev_rel + '/node_type', quiet=True))[1]
        ports = []
        for port_name in sysroot.listdir(dev_rel + '/ports'):
            if parse_int(port_name) is None:
                continue
            ports.append(_read_port(sysroot, dev_rel, port_name, ibv_mtus))
        ports.sort(key=lambda p: p['port'])
        devices.append({
            'name': name,
            'hca_type': sysroot.text(dev_rel + '/hca_type', quiet=True),
            'board_id': sysroot.text(dev_rel + '/board_id', quiet=True),
            'fw_ver': sysroot.text(dev_rel + '/fw_ver', quiet=True),
            'node_guid': sysroot.text(dev_rel + '/node_guid', quiet=True),
            'sys_image_guid': sysroot.text(dev_rel + '/sys_image_guid', quiet=True),
            'node_type': node_type,
            'node_desc': sysroot.text(dev_rel + '/node_desc', quiet=True),
            'pci_address': pci_address,
            'numa_node': parse_numa(sysroot.text(dev_rel + '/device/numa_node', quiet=True)),
            'driver': sysroot.link_name(dev_rel + '/device/driver'),
            'hw_counters': parse_counters(_read_dir_values(sysroot, dev_rel + '/hw_counters'))[0],
            'ports': ports,
        })
    return devices


def error_counters(devices: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Only the error counters of each port (ERROR_COUNTERS, HW_ERROR_COUNTERS), in the
    shape of read_ib()'s devices: what a benchmark compares before and after a test."""
    reduced = []
    # When the counters were read (epoch seconds; read_ib() runs right before this): two reads
    # give rates (module_utils/_rates.py). Not in read_ib()'s facts, which must compare equal
    # between a node and its snapshot.
    read_at = round(time.time(), 3)
    for device in devices or []:
        ports = []
        for port in device.get('ports', []):
            ports.append({'port': port.get('port'), 'counters_read_at': read_at,
                          'counters': dict((k, v) for k, v in (port.get('counters') or {}).items() if k in ERROR_COUNTERS),
                          'hw_counters': dict((k, v) for k, v in (port.get('hw_counters') or {}).items() if k in HW_ERROR_COUNTERS)})
        reduced.append({'name': device['name'], 'ports': ports})
    return {'devices': reduced}
