# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The PCI tree from sysfs: devices, their bridge chains, ACS, and GPU<->NIC distance classes."""

from __future__ import annotations

import os
import re
import struct
from typing import Any, Sequence

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _paths
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot, parse_hex, parse_numa

PCI_DEVICES = '/sys/bus/pci/devices'

_BDF_RE = re.compile(r'^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')
_HOST_BRIDGE_RE = re.compile(r'^pci[0-9a-f]{4}:[0-9a-f]{2}$')

# GPU vendors we know how to check (PCI SIG vendor IDs; a MetaX C500 enumerates as
# 9999:4001 in lspci) and the PCI classes their compute GPUs use:
# 0x03 display (0x0300 VGA, 0x0302 3D controller: NVIDIA data-centre GPUs,
# tests/fixtures/real/h200x2/pci_sysfs.txt) and 0x12 processing accelerator
# (AMD Instinct). Audio functions (0x0403) and NVSwitches (0x0680) are not GPUs.
GPU_VENDORS = {0x10de: 'nvidia', 0x1002: 'amd', 0x9999: 'metax'}
GPU_BASE_CLASSES = (0x03, 0x12)
BRIDGE_CLASS = 0x0604

# nvidia-smi / mx-smi topology classes, nearest first.
DISTANCE_CLASSES = ('PIX', 'PXB', 'PHB', 'NODE', 'SYS')

# PCIe ACS extended capability (PCIe Base Spec 6.0, 7.7.8; include/uapi/linux/pci_regs.h):
# capability ID 0x000D, ACS Capability register at +4, ACS Control at +6, both
# with these bits. lspci prints the same names in ACSCap/ACSCtl.
PCI_EXT_CAP_ID_ACS = 0x000D
ACS_BITS = (
    ('SrcValid', 0x0001),     # PCI_ACS_SV
    ('TransBlk', 0x0002),     # PCI_ACS_TB
    ('ReqRedir', 0x0004),     # PCI_ACS_RR
    ('CmpltRedir', 0x0008),   # PCI_ACS_CR
    ('UpstreamFwd', 0x0010),  # PCI_ACS_UF
    ('EgressCtrl', 0x0020),   # PCI_ACS_EC
    ('DirectTrans', 0x0040),  # PCI_ACS_DT
)
# Request/Completion Redirect and Egress Control send peer-to-peer TLPs up to
# the root complex instead of across the switch: GPU<->NIC P2P then crawls or
# fails (NCCL's troubleshooting guide: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/
# troubleshooting.html#pci-access-control-services-acs). Source Validation alone does not redirect.
ACS_P2P_REDIRECT_MASK = 0x0004 | 0x0008 | 0x0020
_EXT_CAP_START = 0x100
_CONFIG_SPACE_SIZE = 4096


def acs_flags(value: int) -> list[str]:
    """Bit mask -> the lspci names of the bits that are set."""
    return [name for name, bit in ACS_BITS if value & bit]


def parse_acs(config: bytes | None) -> dict[str, Any] | None:
    """ACS registers from a PCI config space dump.

    Returns {'present': bool, 'offset', 'cap', 'ctl'} or None when the
    extended config space (offsets >= 0x100) is not in the dump: sysfs serves
    only the first 64 bytes of ``config`` to a non-root reader.
    """
    if config is None or len(config) <= _EXT_CAP_START + 4:
        return None
    offset = _EXT_CAP_START
    seen: set[int] = set()
    while offset and offset not in seen and offset + 8 <= len(config):
        seen.add(offset)
        header = struct.unpack_from('<I', config, offset)[0]
        if header in (0, 0xffffffff):
            break
        if header & 0xffff == PCI_EXT_CAP_ID_ACS:
            cap, ctl = struct.unpack_from('<HH', config, offset + 4)
            return {'present': True, 'offset': offset, 'cap': cap, 'ctl': ctl}
        offset = (header >> 20) & 0xffc
    return {'present': False, 'offset': None, 'cap': None, 'ctl': None}


def split_device_path(devpath: str) -> tuple[str | None, list[str]]:
    """'/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0' -> ('pci0000:00', ['0000:00:01.0', '0000:01:00.0'])."""
    host_bridge: str | None = None
    chain: list[str] = []
    for part in devpath.split('/'):
        if _HOST_BRIDGE_RE.match(part):
            host_bridge = part
            chain = []
        elif _BDF_RE.match(part):
            chain.append(part)
    return host_bridge, chain


def read_pci(sysroot: SysRoot) -> dict[str, dict[str, Any]]:
    """{bdf: device dict} for every PCI function under /sys/bus/pci/devices."""
    devices: dict[str, dict[str, Any]] = {}
    for bdf in sysroot.listdir(PCI_DEVICES):
        if not _BDF_RE.match(bdf):
            continue
        rel = '%s/%s' % (PCI_DEVICES, bdf)
        devpath = sysroot.resolve(rel) or ''
        host_bridge, chain = split_device_path(devpath)
        pci_class = parse_hex(sysroot.text(rel + '/class'))
        devices[bdf] = {
            'pci_address': bdf,
            'vendor_id': parse_hex(sysroot.text(rel + '/vendor')),
            'device_id': parse_hex(sysroot.text(rel + '/device')),
            'class': pci_class,
            'numa_node': parse_numa(sysroot.text(rel + '/numa_node', quiet=True)),
            'driver': sysroot.link_name(rel + '/driver'),
            'host_bridge': host_bridge,
            # Bridges from the root port down to (excluding) the device itself.
            'parents': chain[:-1] if chain and chain[-1] == bdf else chain,
        }
    return devices


def is_gpu(device: dict[str, Any]) -> bool:
    pci_class = device.get('class')
    return (device.get('vendor_id') in GPU_VENDORS and pci_class is not None
            and (pci_class >> 16) in GPU_BASE_CLASSES)


def distance(dev_a: dict[str, Any], dev_b: dict[str, Any]) -> tuple[str, list[str]]:
    """Topology class between two PCI functions, as nvidia-smi topo -m prints it.

    PIX: through at most one PCIe switch (each side hangs off a downstream port
    of a common switch); PXB: through several switches but below one root port;
    PHB: through the host bridge; NODE: across host bridges of one NUMA node;
    SYS: across NUMA nodes. Returns (class, [bridges on the path]).
    """
    if dev_a['host_bridge'] != dev_b['host_bridge'] or dev_a['host_bridge'] is None:
        numa_a, numa_b = dev_a['numa_node'], dev_b['numa_node']
        cross_numa = numa_a is not None and numa_b is not None and numa_a != numa_b
        return ('SYS' if cross_numa else 'NODE'), []
    chain_a, chain_b = dev_a['parents'], dev_b['parents']
    common = 0
    while common < min(len(chain_a), len(chain_b)) and chain_a[common] == chain_b[common]:
        common += 1
    below_a, below_b = chain_a[common:], chain_b[common:]
    if common == 0:
        return 'PHB', below_a + below_b
    path = [chain_a[common - 1]] + below_a + below_b
    if len(below_a) <= 1 and len(below_b) <= 1:
        return 'PIX', path
    return 'PXB', path


_BDF_SHORT_RE = re.compile(r'^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$')
_ACS_CTL_OFFSET = 6


def normalise_bdf(text: str | None) -> str | None:
    """'10:00.0' or '0000:10:00.0' -> '0000:10:00.0'; anything else -> None."""
    match = _BDF_SHORT_RE.match((text or '').strip())
    if not match:
        return None
    domain, bus, dev, func = match.groups()
    return ('%s:%s:%s.%s' % (domain or '0000', bus, dev, func)).lower()


def acs_mask(names: Sequence[str]) -> int:
    """['ReqRedir', 'CmpltRedir'] -> 0x000c; unknown names raise ValueError."""
    bits = dict(ACS_BITS)
    unknown = [n for n in names if n not in bits]
    if unknown:
        raise ValueError('unknown ACS control bit(s) %s (known: %s)' % (', '.join(unknown), ', '.join(bits)))
    mask = 0
    for name in names:
        mask |= bits[name]
    return mask


def acs_ctl_after(ctl: int, value: int, mask: int) -> int:
    """ACSCtl ``ctl`` after ``value``:``mask`` is written: the bits of ``mask`` as in ``value``, the
    others as they were (setpci's VALUE:MASK, pciutils setpci.c exec_op: (old & ~mask) | value)."""
    return (ctl & ~mask) | (value & mask)


def setpci_acs_argv(bdf: str, value: int, mask: int) -> list[str]:
    """The setpci command that writes ``value``:``mask`` into the ACS Control register of ``bdf``
    (ECAP_ACS, offset +6, a word): what acs_disable writes now, as the boot script writes it.
    With the whole register in ``mask`` setpci writes ``value`` without reading first."""
    return ['setpci', '-s', bdf, 'ECAP_ACS+0x%x.w=%04x:%04x' % (_ACS_CTL_OFFSET, value & mask, mask)]


def write_acs_ctl(sysroot: SysRoot, bdf: str, cap_offset: int, value: int) -> int:
    """Write the 16-bit ACS Control register and return what reads back.

    sysfs' config file takes writes at any offset from root (drivers/pci/pci-sysfs.c
    pci_write_config); setpci does the same through it. No tool is needed, and a
    snapshot or simulated root is written the same way.
    """
    # host_path: below a snapshot or simulated root the symlinks of the path (devices/<bdf> is one)
    # are resolved inside that root.
    path = sysroot.host_path('%s/%s' % (PCI_DEVICES, bdf)) + '/config'
    # Not through a symlink, and only a regular file (sysfs' config is one): below a snapshot or
    # simulated root a symlink or FIFO there must not be written through or block (NotRegular).
    with os.fdopen(_paths.open_regular_to_write(path, os.O_RDWR), 'r+b') as handle:
        handle.seek(cap_offset + _ACS_CTL_OFFSET)
        handle.write(struct.pack('<H', value))
        handle.flush()
        handle.seek(cap_offset + _ACS_CTL_OFFSET)
        return struct.unpack('<H', handle.read(2))[0]
