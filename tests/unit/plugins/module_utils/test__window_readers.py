# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The window's node-side readers (issue 34): the PCIe AER files (module_utils/_aer.py) and ethtool -S
(module_utils/_ethtool.py) on real outputs (tests/fixtures/public/aer, public/ethtool: each file names its
source), and module_utils/_window.py on a simulated node whose counters a test moved (tests/sim/tools_window.py)."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _aer, _ethtool, _window
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from tests.sim import faults, render, tools_window
from tests.unit.conftest import fixture_text

ETHTOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                       'sim', 'bin', 'ethtool')


def _sections(text):
    """'==> name <==' sections of a fixture: {name: text}."""
    found, name = {}, None
    for line in text.splitlines(True):
        if line.startswith('==> '):
            name = line[4:].split(' <==')[0]
            found[name] = ''
        elif name:
            found[name] += line
    return found


def test_aer_kernel_419_long_names():
    files = _sections(fixture_text('public', 'aer', 'kernel_abi_aer_stats_sample.txt'))
    parsed = _aer.parse_aer(files['aer_dev_correctable'])
    # The long names of kernel 4.19 read to the short names of later kernels (drivers/pci/pcie/aer.c).
    assert parsed == {'counters': {'RxErr': 2, 'BadTLP': 0, 'BadDLLP': 0, 'Rollover': 0, 'Timeout': 0, 'NonFatalErr': 0,
                                   'CorrIntErr': 0, 'HeaderOF': 0}, 'total': 2, 'unread': []}
    fatal = _aer.parse_aer(files['aer_dev_fatal'])
    assert fatal['counters'] == {'Undefined': 0, 'DLP': 0, 'SDES': 0} and fatal['total'] is None


def test_aer_short_names_and_bad_lines():
    text = 'RxErr 40\nBadTLP 2600\nBadDLLP 1400\nRollover 3\nTimeout 800\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 4843\n'
    assert _aer.parse_aer(text)['total'] == 4843 and _aer.parse_aer(text)['counters']['BadTLP'] == 2600
    odd = _aer.parse_aer('BadTLP -1\nBadTLP 99999999999999999999999\n\x00junk\nTimeout 5')
    assert odd['counters'] == {'Timeout': 5} and len(odd['unread']) == 3
    assert _aer.parse_aer(None) == {'counters': {}, 'total': None, 'unread': []}
    assert len(_aer.parse_aer('RxErr 1\n' * 1000)['unread']) == 1     # past LINES_MAX: said, not read
    assert (_aer.parse_count('17\n'), _aer.parse_count('x'), _aer.parse_count('1' * 30)) == (17, None, None)


def test_ethtool_mlx5_real_output():
    parsed = _ethtool.parse_stats(fixture_text('public', 'ethtool', 'ethq_8_mlx5_connectx4lx_ubuntu1804.txt'))
    assert len(parsed['counters']) == 23 and parsed['unread'] == [] and not parsed['cut']
    assert parsed['counters']['rx_bytes'] == 2195783498134 and parsed['counters']['tx_queue_stopped'] == 0
    assert _ethtool.pfc(parsed['counters']) == {}      # the excerpt ends before the pause counters


def test_ethtool_bnxt_real_output_normalised():
    parsed = _ethtool.parse_stats(fixture_text('public', 'ethtool', 'rocm_11027_bnxt_thor2_pfc_elided.txt'))
    assert parsed['unread'] == []                       # the author's '...' lines are no counter, and no error
    assert _ethtool.pfc(parsed['counters']) == {'rx_prio0_pause': 0, 'tx_prio7_pause': 0, 'rx_prio0_pause_duration_us': 0,
                                                'tx_prio7_pause_duration_us': 0}


def test_ethtool_ice_real_output_keeps_suffixed_names():
    counters = _ethtool.parse_stats(fixture_text('public', 'ethtool', 'ethq_27_ice_nic_suffix.txt'))['counters']
    assert counters['tx_bytes.nic'] == 24528 and counters['tx_multicast.nic'] == 116 and len(counters) == 11
    assert _ethtool.pfc({'rx_priority_3_xoff.nic': 12, 'tx_priority_3_xoff.nic': 4}) == {'rx_prio3_pause': 12, 'tx_prio3_pause': 4}


def test_ethtool_mlx5_pause_names():
    text = ('NIC statistics:\n     rx_prio3_pause: 1523\n     rx_prio3_pause_duration: 48736\n     tx_prio3_pause: 2847\n'
            '     tx_pause_storm_warning_events: 2\n     rxq0: rx_bytes: 5\n     rx_pause_ctrl_phy: 41927\n')
    counters = _ethtool.parse_stats(text)['counters']
    assert counters['rxq0: rx_bytes'] == 5
    assert _ethtool.pfc(counters) == {'rx_prio3_pause': 1523, 'rx_prio3_pause_duration_us': 48736, 'tx_prio3_pause': 2847,
                                      'tx_pause_storm_warning_events': 2, 'rx_pause_ctrl_phy': 41927}


@pytest.fixture(scope='module')
def moved(tmp_path_factory):
    """A RoCE node with a pause storm and replays on mlx5_0, after one test of 2 s moved its counters."""
    root = str(tmp_path_factory.mktemp('window'))
    profile = copy.deepcopy(render.load_profile('amd_mi300x_roce'))
    target = faults.apply_window(profile, 'pfc_pause_storm')
    profile['window'][target['hca']].update(aer={'BadTLP': 2600, 'Timeout': 800}, aer_link={'BadDLLP': 900})
    render.render(profile, root)
    before = _read(root)
    tools_window.after_test(root, target['hca'], {}, True, 2.0)
    return root, target, before, _read(root)


def _read(root, ethtool=ETHTOOL):
    saved = os.environ.get('GF_SIM_ROOT')
    os.environ['GF_SIM_ROOT'] = root      # the stand-in's node (ethtool runs as a process)
    try:
        sysroot = SysRoot(root)
        return _window.read_window(sysroot, read_ib(sysroot), (), ethtool)
    finally:
        if saved is None:
            os.environ.pop('GF_SIM_ROOT', None)
        else:
            os.environ['GF_SIM_ROOT'] = saved


def test_read_window_on_a_simulated_node(moved):
    root, target, before, after = moved
    hca, bdf = target['hca'], target['bdf']
    path = before['paths'][hca]
    assert path[-1] == bdf and len(path) >= 2 and before['roce'] and hca in before['roce']
    assert before['aer'][bdf]['TOTAL_ERR_COR'] == 0 and after['aer'][bdf]['BadTLP'] == 2600
    assert after['aer'][path[-2]]['BadDLLP'] == 900      # the port above the HCA counts its link's errors too
    # The ethtool stand-in's mlx5 format, read by the real runner and parser.
    assert before['pause'][hca]['rx_prio3_pause_duration_us'] == 0
    assert after['pause'][hca]['rx_prio3_pause_duration_us'] == 600000 and after['pause'][hca]['tx_pause_storm_warning_events'] == 2
    assert 'np_cnp_sent' in after['cc'][hca] and after['unread'] == {}


def test_read_window_without_ethtool_says_so(moved):
    window = _read(moved[0], ethtool=None)
    assert window['pause'] == {} and any('ethtool is not installed' in why for why in window['unread'].values())


def test_ethtool_failure_and_timeout_are_said(tmp_path, monkeypatch):
    monkeypatch.setenv('GF_SIM_ROOT', str(tmp_path))
    counters, why = _ethtool.read_pause('nosuch0', ETHTOOL)
    assert counters is None and 'No such device' in why
    slow = tmp_path / 'slow'
    slow.write_text('#!/bin/sh\nsleep 30\n')
    slow.chmod(0o755)
    counters, why = _ethtool.read_pause('eth0', str(slow), timeout=0.3)
    assert counters is None and 'did not answer within 0.3 s' in why
    assert _ethtool.read_pause('eth0', str(tmp_path / 'absent'))[0] is None


def test_sample_links_reads_the_link_now(moved):
    root, target = moved[0], moved[1]
    sysroot = SysRoot(root)
    bdfs = _window.link_bdfs(_window.read_window(sysroot, read_ib(sysroot), (), None))
    assert target['bdf'] in bdfs
    assert _window.sample_links(SysRoot(root), [target['bdf']]) == {target['bdf']: [32.0, 16]}
    assert _window.pci_path(sysroot, '0000:ff:00.0') == [] and _window.pci_path(sysroot, None) == []
