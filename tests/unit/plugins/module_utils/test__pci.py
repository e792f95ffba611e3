# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import re
import struct

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _pci
from tests.sim.render import config_space
from tests.unit.conftest import fixture_text


def _dev(host, *chain, **kw):
    return {'host_bridge': host, 'parents': list(chain), 'numa_node': kw.get('numa', 0)}


@pytest.mark.parametrize('a, b, expected', [
    # seed 000 GPU3 (11:00.0) and NIC0 (12:00.0): two downstream ports of one switch
    (_dev('pci0000:03', '0000:03:01.0', '0000:04:00.0', '0000:05:0c.0', '0000:0f:00.0', '0000:10:00.0'),
     _dev('pci0000:03', '0000:03:01.0', '0000:04:00.0', '0000:05:0c.0', '0000:0f:00.0', '0000:10:10.0'), 'PIX'),
    # seed 000 GPU0 (08:00.0) and NIC0: through two switch levels
    (_dev('pci0000:03', '0000:03:01.0', '0000:04:00.0', '0000:05:00.0', '0000:06:00.0', '0000:07:00.0'),
     _dev('pci0000:03', '0000:03:01.0', '0000:04:00.0', '0000:05:0c.0', '0000:0f:00.0', '0000:10:10.0'), 'PXB'),
    # two root ports of one host bridge
    (_dev('pci0000:00', '0000:00:01.1'), _dev('pci0000:00', '0000:00:02.1'), 'PHB'),
    # devices straight on the root bus (the H200 VM)
    (_dev('pci0000:00'), _dev('pci0000:00'), 'PHB'),
    (_dev('pci0000:03', '0000:03:01.0'), _dev('pci0000:2d', '0000:2d:01.0'), 'NODE'),
    (_dev('pci0000:03', '0000:03:01.0', numa=0), _dev('pci0000:80', '0000:80:01.0', numa=1), 'SYS'),
    # NUMA unknown (-1 in a VM) is not evidence of crossing sockets
    (_dev('pci0000:03', numa=None), _dev('pci0000:80', numa=1), 'NODE'),
])
def test_distance(a, b, expected):
    assert _pci.distance(a, b)[0] == expected
    assert _pci.distance(b, a)[0] == expected


def test_distance_path_names_the_bridges():
    cls, bridges = _pci.distance(_dev('h', 'rp', 'up', 'dn1'), _dev('h', 'rp', 'up', 'dn2'))
    assert (cls, bridges) == ('PIX', ['up', 'dn1', 'dn2'])


def test_parse_acs_walks_the_capability_list():
    acs = _pci.parse_acs(config_space({'cap': 0x5f, 'ctl': 0x1d}))
    assert acs == {'present': True, 'offset': 0x148, 'cap': 0x5f, 'ctl': 0x1d}
    assert _pci.acs_flags(0x1d) == ['SrcValid', 'ReqRedir', 'CmpltRedir', 'UpstreamFwd']


def test_parse_acs_absent_short_and_looping():
    assert _pci.parse_acs(config_space(None))['present'] is False
    assert _pci.parse_acs(config_space({'cap': 1, 'ctl': 1})[:64]) is None      # non-root read of sysfs config
    assert _pci.parse_acs(None) is None
    looping = bytearray(4096)
    struct.pack_into('<I', looping, 0x100, 0x0001 | (0x100 << 20))              # next pointer to itself
    assert _pci.parse_acs(bytes(looping))['present'] is False


def _lspci_mask(line):
    names = re.findall(r'(\w+)([+-])', line)
    bits = dict(_pci.ACS_BITS)
    return sum(bits[name] for name, sign in names if sign == '+'), [n for n, s in names if s == '+']


@pytest.mark.parametrize('fixture, redirects', [
    ('gpud_h100_pex890xx_acs_disabled.txt', False),
    ('gpud_pmc_sierra_acs_enabled.txt', True),
])
def test_acs_names_and_verdict_match_lspci(fixture, redirects):
    text = fixture_text('public', 'lspci_acs', fixture)
    cap_line = re.search(r'ACSCap:\s*(.*)', text).group(1)
    ctl_line = re.search(r'ACSCtl:\s*(.*)', text).group(1)
    cap, cap_names = _lspci_mask(cap_line)
    ctl, ctl_names = _lspci_mask(ctl_line)
    acs = _pci.parse_acs(config_space({'cap': cap, 'ctl': ctl}))
    assert _pci.acs_flags(acs['cap']) == cap_names
    assert _pci.acs_flags(acs['ctl']) == ctl_names
    assert bool(acs['ctl'] & _pci.ACS_P2P_REDIRECT_MASK) is redirects


@pytest.mark.parametrize('vendor, pci_class, expected', [
    (0x10de, 0x030200, True), (0x10de, 0x030000, True), (0x10de, 0x068000, False),   # NVSwitch bridge
    (0x1002, 0x120000, True), (0x1002, 0x040300, False),                             # MI300X; HDMI audio
    (0x9999, 0x038000, True), (0x15b3, 0x020700, False), (0x10de, None, False),
])
def test_is_gpu(vendor, pci_class, expected):
    assert _pci.is_gpu({'vendor_id': vendor, 'class': pci_class}) is expected


def test_split_device_path():
    assert _pci.split_device_path('/sys/devices/pci0000:2d/0000:2d:01.0/0000:2e:00.0') == \
        ('pci0000:2d', ['0000:2d:01.0', '0000:2e:00.0'])
    assert _pci.split_device_path('/sys/devices/platform/foo') == (None, [])
