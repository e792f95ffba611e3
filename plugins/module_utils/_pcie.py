# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""PCIe links trained below what both of their ends can do, and the IOMMU mode of the GPUs and HCAs.

A slow rail is most often a PCIe link that trained narrower or slower than its slot and card
allow (a reseated card, a riser, a bad lane). sysfs says it for every PCIe function
(drivers/pci/pci-sysfs.c): ``current_link_speed``/``current_link_width`` (Link Status) and
``max_link_speed``/``max_link_width`` (Link Capabilities). A link has two ends and each end
reports the same negotiated status but its own capability, so a link is judged once, against
the lower of the two maxima: a Gen4 NIC in a Gen5 slot trains at 16 GT/s and the slot's port
reads "16 GT/s (downgraded)" in lspci without any fault (tests/fixtures/public/lspci_acs/
gpud_h100_pex890xx_acs_disabled.txt: a PEX890xx downstream port capable of 32GT/s x4 at 16GT/s).

A GPU lowers its link speed when idle to save power and raises it under load, keeping its lanes:
hwloc's maintainer, https://github.com/open-mpi/hwloc/issues/385 ("especially NVIDIA GPUs, may
decrease their uplink speed when idle ... the number of lanes remains the same"), and an idle
RTX 4090 at 'Speed 2.5GT/s (downgraded), Width x16 (ok)' (tests/fixtures/public/lspci_link/
jan_183_rtx4090_idle_2_5gt.txt). So a GPU's own link below its speed is said, not judged; fewer
lanes than both ends have is a fault on any device. NICs (ConnectX) keep their link trained.

The IOMMU: GPUDirect RDMA needs every PCIe device to see the same physical addresses, "incompatible
with IOMMUs performing any form of translation other than 1:1, hence they must be disabled or
configured for pass-through translation" (https://docs.nvidia.com/cuda/gpudirect-rdma/, IOMMUs).
The mode of a device is its group's default domain (/sys/kernel/iommu_groups/<n>/type, drivers/
iommu/iommu.c iommu_group_show_type: identity = not translated, DMA / DMA-FQ = translated;
Documentation/ABI/testing/sysfs-kernel-iommu_groups).
"""

from __future__ import annotations

import re
import struct
from typing import Any

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _pci

LINK_FILES = ('current_link_speed', 'current_link_width', 'max_link_speed', 'max_link_width')

# What sysfs prints for a link speed. Since Linux 5.5 pci_speed_string() (drivers/pci/probe.c
# pci_bus_speed_strings): '2.5 GT/s PCIe', '5.0 GT/s PCIe', '8.0 GT/s PCIe', '16.0 GT/s PCIe',
# '32.0 GT/s PCIe', '64.0 GT/s PCIe', 'Unknown'; before, PCIE_SPEED2STR (drivers/pci/pci.h):
# '2.5 GT/s', '5 GT/s', '8 GT/s', '16 GT/s', 'Unknown speed'. Bounded and ASCII: the value is untrusted.
_SPEED_RE = re.compile(r'^(\d{1,3}(?:\.\d{1,3})?) ?GT/s(?: PCIe)?$', re.A)
# current_link_width/max_link_width: '%u' of the Link Status/Capabilities width field (6 bits):
# 0 when the link is down. lspci writes 'x16'; sysfs never does, but a pasted value may.
_WIDTH_RE = re.compile(r'^x?(\d{1,2})$', re.A)

# Per-lane data rate after line encoding, Mb/s, as the kernel computes it (drivers/pci/pci.h
# PCIE_SPEED2MBS_ENC): 8b/10b for 2.5 and 5 GT/s, 128b/130b for 8 to 32 GT/s (PCIe Base Spec
# 3.0 4.2.2 and 5.0 Table 4-xx), 1b/1b (FLIT mode) for 64 GT/s (PCIe r6.1 sec 1.2, Table 1-1).
# Integer arithmetic as in the kernel, so the figures match its dmesg line
# ('126.016 Gb/s available PCIe bandwidth, limited by 8.0 GT/s PCIe x16 link',
# tests/fixtures/public/sysfs_pci/dmesg_pcie_bandwidth_limited.txt).
_LANE_MBPS = {2.5: 2500 * 8 // 10, 5.0: 5000 * 8 // 10, 8.0: 8000 * 128 // 130, 16.0: 16000 * 128 // 130,
              32.0: 32000 * 128 // 130, 64.0: 64000}

# PCI Express capability (include/uapi/linux/pci_regs.h): capability list pointer at 0x34 when
# Status (0x06) has PCI_STATUS_CAP_LIST; capability ID 0x10; its Flags word at +2, the device/port
# type in bits 7:4. Readable by root only: sysfs serves 64 bytes of config space to other users.
_PCI_STATUS, _PCI_STATUS_CAP_LIST, _PCI_CAPABILITY_LIST, _PCI_CAP_ID_EXP = 0x06, 0x10, 0x34, 0x10
TYPE_ENDPOINT, TYPE_LEG_END, TYPE_ROOT_PORT, TYPE_UPSTREAM, TYPE_DOWNSTREAM = 0x0, 0x1, 0x4, 0x5, 0x6
TYPE_PCI_BRIDGE, TYPE_RC_END, TYPE_RC_EC = 0x7, 0x9, 0xa
# The end of a link nearer the device (its Link Status describes the link above it) ...
_LOWER_TYPES = (TYPE_ENDPOINT, TYPE_LEG_END, TYPE_UPSTREAM, TYPE_PCI_BRIDGE)
# ... and the end nearer the CPU (its Link Status describes the link below it). Root complex
# integrated endpoints and event collectors have no link.
_UPPER_TYPES = (TYPE_ROOT_PORT, TYPE_DOWNSTREAM)
_NO_LINK_TYPES = (TYPE_RC_END, TYPE_RC_EC)

IOMMU_GROUPS = '/sys/kernel/iommu_groups'
IOMMU_CLASS = '/sys/class/iommu'
# iommu_group_show_type() (drivers/iommu/iommu.c): what each default-domain type means for DMA.
IOMMU_MODES = {'identity': 'passthrough', 'DMA': 'translated', 'DMA-FQ': 'translated',
               'unmanaged': 'vfio', 'blocked': 'blocked'}
# Kernel parameters that set the default domain (Documentation/admin-guide/kernel-parameters.txt).
_CMDLINE_KEYS = ('iommu', 'intel_iommu', 'amd_iommu', 'iommu.passthrough', 'iommu.strict')
_TRUE = ('1', 'y', 'yes', 'on', 'true')
_FALSE = ('0', 'n', 'no', 'off', 'false')


def parse_speed(text):
    """'16.0 GT/s PCIe' or '8 GT/s' -> 16.0 / 8.0; 'Unknown', 'Unknown speed', garbage -> None."""
    match = _SPEED_RE.match((text or '').strip())
    return float(match.group(1)) if match else None


def parse_width(text):
    """'16' -> 16; '0' (link down) -> 0; garbage -> None."""
    match = _WIDTH_RE.match((text or '').strip())
    return int(match.group(1)) if match else None


def link_gbps(speed, width):
    """Data bandwidth of a link in Gb/s after line encoding (the kernel's figure), or None."""
    lane = _LANE_MBPS.get(speed)
    if lane is None or not width:
        return None
    return lane * width / 1000.0


def express_type(config):
    """The PCI Express device/port type from a config space dump, or None (no capability, or only
    the 64 bytes a non-root reader gets)."""
    if not config or len(config) < 0x40:
        return None
    if not struct.unpack_from('<H', config, _PCI_STATUS)[0] & _PCI_STATUS_CAP_LIST:
        return None
    offset, seen = config[_PCI_CAPABILITY_LIST] & 0xfc, set()
    while offset >= 0x40 and offset not in seen and offset + 4 <= len(config):
        seen.add(offset)
        if config[offset] == _PCI_CAP_ID_EXP:
            return (struct.unpack_from('<H', config, offset + 2)[0] >> 4) & 0xf
        offset = config[offset + 1] & 0xfc
    return None


def read_link_attrs(sysroot, bdf):
    """The four link attributes of one function, raw and parsed; every value None where absent
    (a conventional PCI function has none: drivers/pci/pci-sysfs.c pcie_dev_attrs_are_visible)."""
    rel = '%s/%s/' % (_pci.PCI_DEVICES, bdf)
    raw = dict((name, sysroot.text(rel + name, quiet=True)) for name in LINK_FILES)
    return {'raw': raw, 'speed': parse_speed(raw['current_link_speed']), 'width': parse_width(raw['current_link_width']),
            'max_speed': parse_speed(raw['max_link_speed']), 'max_width': parse_width(raw['max_link_width'])}


def _capability(own, upper, key):
    """What both ends can do: the lower of the two maxima. An upper end without link attributes (none
    above the device, or a conventional PCI bridge) leaves the device's own; a maximum that sysfs
    printed as 'Unknown' (a kernel older than the link's speed) leaves it unknown."""
    if own is None:
        return None
    if upper is None or not any(v is not None for v in upper['raw'].values()):
        return own
    return None if upper[key] is None else min(own, upper[key])


def _ends(chain, types):
    """[(upper end or None, lower end)] of the links on ``chain`` (root port first, the device last).

    By the PCI Express port types where config space gave them; otherwise by position: the first
    bridge is a root port, then a switch's upstream port and its downstream port alternate, and
    the device itself is an endpoint. A chain whose bridges do not fit that (an even number of
    them) keeps only the device's own link."""
    links = []
    by_position = len(chain) % 2 == 0    # root port + (upstream, downstream) pairs + the device
    for index, bdf in enumerate(chain):
        kind = types.get(bdf)
        if kind is not None:
            lower = kind in _LOWER_TYPES
        elif index == len(chain) - 1:
            lower = True
        else:
            lower = by_position and index % 2 == 1
        if lower and kind not in _NO_LINK_TYPES:
            links.append((chain[index - 1] if index else None, bdf))
    return links


def _judge(link, lower_is_gpu):
    speed, width = link['speed_gts'], link['width']
    cap_speed, cap_width = link['capable_speed_gts'], link['capable_width']
    if speed is None or width is None or cap_speed is None or cap_width is None:
        return None, 'the link status or capability could not be read (%s)' % ', '.join(
            '%s %s' % (k, link['raw'].get(k)) for k in LINK_FILES)
    if width == 0:
        return None, 'the link reads width 0 (down or not trained)'
    link['width_degraded'] = width < cap_width
    link['speed_degraded'] = speed < cap_speed and not lower_is_gpu
    link['gpu_idle_speed'] = speed < cap_speed and lower_is_gpu
    return link['width_degraded'] or link['speed_degraded'], None


def read_links(sysroot, pci, gpus, nics):
    """One entry per PCIe link on the way from a GPU or an RDMA NIC to its root port.

    Each: ``upstream``/``downstream`` (the two ends' PCI addresses; upstream None for a device on
    the root bus), ``kind`` and ``device`` of the lower end (gpu, nic or bridge), the current
    ``speed_gts``/``width``, each end's maximum, ``capable_speed_gts``/``capable_width`` (the lower
    of the two), ``gbps``/``capable_gbps`` (after encoding), the ``gpus``/``nics`` whose traffic
    to the host crosses the link, ``degraded`` (True, False, or None when it could not be judged,
    with ``reason``), ``width_degraded``, ``speed_degraded`` and ``gpu_idle_speed`` (a GPU's own
    link below its speed: power saving at idle, not judged)."""
    devices = [('gpu', g['name'], g['pci_address']) for g in gpus] + \
        [('nic', n['name'], n['pci_address']) for n in nics if n.get('pci_address') in pci]
    chains = dict((bdf, list(pci[bdf].get('parents') or []) + [bdf]) for _kind, _name, bdf in devices)
    types = {}
    for chain in chains.values():
        for bdf in chain:
            if bdf not in types:
                types[bdf] = express_type(sysroot.binary('%s/%s/config' % (_pci.PCI_DEVICES, bdf)))
    kind_of = dict((bdf, (kind, name)) for kind, name, bdf in devices)
    attrs, links = {}, {}
    for kind, name, bdf in devices:
        for upper, lower in _ends(chains[bdf], types):
            # The functions of one device share its link (a dual-port NIC's .0 and .1).
            key = (upper, lower.rsplit('.', 1)[0] if lower in kind_of else lower)
            entry = links.setdefault(key, {'upstream': upper, 'downstream': lower, 'gpus': [], 'nics': []})
            entry[kind + 's'].append(name)
    result = []
    for key in sorted(links, key=lambda k: (links[k]['downstream'], k[0] or '')):
        entry = links[key]
        upper, lower = entry['upstream'], entry['downstream']
        for bdf in (upper, lower):
            if bdf and bdf not in attrs:
                attrs[bdf] = read_link_attrs(sysroot, bdf)
        low, high = attrs[lower], attrs.get(upper) or {}
        kind, name = kind_of.get(lower, ('bridge', None))
        entry.update(
            kind=kind, device=name, raw=low['raw'],
            speed_gts=low['speed'] if low['speed'] is not None else high.get('speed'),
            width=low['width'] if low['width'] is not None else high.get('width'),
            max_speed_gts=low['max_speed'], max_width=low['max_width'],
            upstream_max_speed_gts=high.get('max_speed'), upstream_max_width=high.get('max_width'),
            capable_speed_gts=_capability(low['max_speed'], attrs.get(upper), 'max_speed'),
            capable_width=_capability(low['max_width'], attrs.get(upper), 'max_width'),
            by='port type' if types.get(lower) is not None else 'position',
            width_degraded=None, speed_degraded=None, gpu_idle_speed=None)
        entry['gbps'] = link_gbps(entry['speed_gts'], entry['width'])
        entry['capable_gbps'] = link_gbps(entry['capable_speed_gts'], entry['capable_width'])
        entry['degraded'], entry['reason'] = _judge(entry, kind == 'gpu')
        result.append(entry)
    return result


def link_words(link: dict[str, Any]) -> str:
    """'16.0 GT/s x8 (126.0 Gb/s) where both ends can do 32.0 GT/s x16 (504.1 Gb/s)'."""
    def one(speed, width, gbps):
        return '%s GT/s x%s%s' % (speed, width, ' (%.1f Gb/s)' % gbps if gbps else '')
    return '%s where both ends can do %s' % (
        one(link.get('speed_gts'), link.get('width'), link.get('gbps')),
        one(link.get('capable_speed_gts'), link.get('capable_width'), link.get('capable_gbps')))


# ---------------------------------------------------------------------------- IOMMU

def parse_cmdline(text):
    """The IOMMU parameters of a kernel command line: {name: value as written} (last one wins, as
    the kernel's parser applies them in order)."""
    found = {}
    for word in (text or '').split()[:4096]:
        if word == '--':
            break    # what follows is the init's, not the kernel's
        name, sep, value = word.partition('=')
        if name in _CMDLINE_KEYS:
            found[name] = value if sep else ''
    return found


def cmdline_mode(params):
    """What the command line asks the default domain to be: 'passthrough', 'translated', 'off' or None."""
    iommu = [v.strip() for v in (params.get('iommu') or '').split(',')]
    passthrough = (params.get('iommu.passthrough') or '').lower()
    if 'off' in iommu or params.get('intel_iommu', '').startswith('off') or params.get('amd_iommu', '') == 'off':
        return 'off'
    if 'pt' in iommu or passthrough in _TRUE:
        return 'passthrough'
    if 'nopt' in iommu or passthrough in _FALSE:
        return 'translated'
    return None


def read_iommu(sysroot, gpus, nics):
    """The IOMMU mode of every GPU and RDMA NIC.

    ``devices``: per device its ``group`` (the iommu_group link of its PCI function; None: no
    IOMMU handles its DMA), the group's ``type`` and ``mode`` (passthrough, translated, vfio,
    blocked, none - no IOMMU handles its DMA, unknown); ``units`` the IOMMU hardware units (/sys/class/iommu); ``cmdline``
    the IOMMU parameters of /proc/cmdline and ``cmdline_mode`` what they ask for; ``translated``
    the devices whose DMA the IOMMU translates; ``mode`` the node's summary over them."""
    params = parse_cmdline(sysroot.text('/proc/cmdline', quiet=True))
    asked = cmdline_mode(params)
    # The kernel creates /sys/kernel/iommu_groups whenever it has the IOMMU API (drivers/iommu/iommu.c
    # iommu_init), empty without an IOMMU (tests/fixtures/real/h200x4-vm). Where the directory is not
    # there at all (a snapshot taken before this was read), a device without a group is not known to be
    # untranslated.
    groups_read = sysroot.isdir(IOMMU_GROUPS)
    entries = []
    for kind, items in (('gpu', gpus), ('nic', nics)):
        for item in items:
            bdf = item.get('pci_address')
            group = sysroot.link_name('%s/%s/iommu_group' % (_pci.PCI_DEVICES, bdf)) if bdf else None
            if group is not None and not group.isdigit():
                group = None
            kind_text = sysroot.text('%s/%s/type' % (IOMMU_GROUPS, group), quiet=True) if group is not None else None
            if group is None:
                mode = 'none' if groups_read else 'unknown'
            elif kind_text in IOMMU_MODES:
                mode = IOMMU_MODES[kind_text]
            elif kind_text is None and asked in ('passthrough', 'translated'):
                # Kernels before the type attribute (v5.4, sysfs-kernel-iommu_groups): the command line decides.
                mode = asked
            else:
                mode = 'unknown'
            entries.append({'name': item.get('name'), 'kind': kind, 'pci_address': bdf, 'group': group,
                            'type': kind_text, 'mode': mode})
    modes = set(e['mode'] for e in entries)
    if not entries:
        summary = None
    elif modes <= set(['none']):
        summary = 'off'
    elif len(modes - set(['none'])) == 1:
        summary = (modes - set(['none'])).pop()
    else:
        summary = 'mixed'
    return {'units': list(sysroot.listdir(IOMMU_CLASS))[:64], 'cmdline': params, 'cmdline_mode': asked,
            'devices': entries, 'translated': [e['name'] for e in entries if e['mode'] == 'translated'],
            'mode': summary}
