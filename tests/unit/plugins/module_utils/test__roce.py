# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""RoCE QoS readers and parsers (module_utils/_roce.py) on public printouts and simulated nodes."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _roce
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from tests.sim import faults, render, tools_qos

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'public')
WANT = dict(trust='dscp', priority=3, dscp=26, ecn=True, cnp_dscp=48, cnp_priority=6, tos=106)


def fixture(*parts):
    with open(os.path.join(FIXTURES, *parts)) as handle:
        return ''.join(line for line in handle if not line.startswith('## '))


def test_mlnx_qos_netarbiter():
    parsed = _roce.parse_mlnx_qos(fixture('mlnx_qos', 'netarbiter_cx_pfc_prio3_dscp_trust.txt'))
    assert parsed['trust'] == 'dscp'
    assert parsed['pfc'] == [3]                       # the enabled row ends with three spaces
    assert parsed['dscp2prio'][26] == 3 and parsed['dscp2prio'][48] == 6 and len(parsed['dscp2prio']) == 64
    assert parsed['prio_tc'][0] == 1 and parsed['prio_tc'][1] == 0 and parsed['prio_tc'][3] == 3
    assert parsed['tc_tsa'] == dict((tc, 'vendor') for tc in range(8))


def test_mlnx_qos_ets_bw_and_colon_rows():
    text = ('Priority trust state: pcp\nPFC configuration:\n        priority    0   1   2   3   4   5   6   7\n'
            '        enabled     0   0   0   0   1   0   0   0\ntc: 0 ratelimit: unlimited, tsa: ets, bw: 50%\n'
            '         priority:  0\ntc: 6 ratelimit: unlimited, tsa: strict\n         priority:  6\n')
    parsed = _roce.parse_mlnx_qos(text)
    assert parsed['trust'] == 'pcp' and parsed['pfc'] == [4] and parsed['dscp2prio'] is None
    assert parsed['tc_bw'] == {0: 50} and parsed['tc_tsa'] == {0: 'ets', 6: 'strict'}


def test_mlnx_qos_without_pfc_block_is_unknown():
    parsed = _roce.parse_mlnx_qos('Priority trust state: dscp\n')
    assert parsed['pfc'] is None and parsed['trust'] == 'dscp'


@pytest.mark.parametrize('name, expected', [
    ('man7_dcb_pfc_show_prio67.txt', [6, 7]),
    ('talos_roce_dcb_pfc_one_line_prio3.txt', [3]),
])
def test_dcb_pfc(name, expected):
    assert _roce.parse_dcb_pfc(fixture('dcb', name)) == expected


def test_dcb_pfc_absent():
    assert _roce.parse_dcb_pfc('pfc-cap 8 macsec-bypass off delay 0\n') is None


def test_dcb_app_symbolic_and_numeric():
    assert _roce.parse_dcb_app(fixture('dcb', 'talos_roce_dcb_app_symbolic.txt')) == {26: 3, 48: 6}
    text = fixture('dcb', 'man7_dcb_app_conflicting_entries.txt')
    named, numeric = [line for line in text.splitlines() if line.startswith('dscp-prio')]
    # DSCP 24 (CS3) listed to 2 and 3: not collapsed to one, a conflict; the same from names and from -N.
    assert _roce.parse_dcb_app(named) == _roce.parse_dcb_app(numeric) == {0: 0, 48: 6}
    assert _roce.dcb_app_conflicts(named) == _roce.dcb_app_conflicts(numeric) == {24: [2, 3]}
    assert _roce.dcb_app_conflicts(fixture('dcb', 'talos_roce_dcb_app_symbolic.txt')) == {}
    # The driver bug seen on netdev ('63:1 63:2'), built from the man page's line.
    assert _roce.dcb_app_conflicts(numeric.replace('48:6', '63:1 63:2')) == {24: [2, 3], 63: [1, 2]}
    assert _roce.parse_dcb_app('') == {} and _roce.dcb_app_conflicts('') == {}


def test_dcb_maps_are_read_in_linear_time():
    # One long word of KEY:VALUE-like text and many pairs: a backtracking pattern took seconds here.
    start = time.time()
    assert _roce.parse_dcb_app('dscp-prio ' + 'a' * 200000 + ' ' + '1:' * 50000) == {}
    assert len(_roce.parse_dcb_app('dscp-prio ' + ' '.join('%d:%d' % (d % 64, d % 8) for d in range(64000)))) == 64
    assert set(_roce.parse_dcb_pfc('prio-pfc ' + '0:on ' * 100000 + 'delay 0')) == {0}
    assert time.time() - start < 2


def test_a_conflicting_rdma_dscp_has_no_known_priority_and_is_replaced():
    port = {'trust': 'dscp', 'roce_tos': 106, 'dscp2prio': {'48': 6}, 'dscp_conflicts': {'26': [3, 4]}}
    assert _roce.rdma_priority(port) is None
    assert _roce.rdma_priority(dict(port, roce_tos=0)) == 0
    port.update(netdev='eth0', hca='mlx5_0', port=1, pfc=[3], cnp_dscp=48, cnp_prio=6, ecn_np=None, ecn_rp=None)
    changes = dict((c[0], c) for c in _roce.plan(port, WANT, 'dcb'))
    assert changes['dscp 26 priority'][1:3] == ([3, 4], 3)
    assert changes['dscp 26 priority'][3] == [{'argv': ['dcb', 'app', 'replace', 'dev', 'eth0', 'dscp-prio', '26:3']}]


def test_dcb_ets_and_apptrust():
    prio_tc, tsa, bw = _roce.parse_dcb_ets(fixture('dcb', 'talos_roce_dcb_ets_prio_tc.txt'))
    assert prio_tc == dict((p, p) for p in range(8)) and tsa is None and bw is None
    assert _roce.parse_dcb_apptrust('order dscp pcp') == 'dscp'
    assert _roce.parse_dcb_apptrust('order: pcp') == 'pcp'
    assert _roce.parse_dcb_apptrust('nothing') is None


def test_rdma_priority():
    port = {'trust': 'dscp', 'roce_tos': 106, 'dscp2prio': {'26': 3}}
    assert _roce.rdma_priority(port) == 3
    assert _roce.rdma_priority(dict(port, roce_tos=0)) == 0
    assert _roce.rdma_priority(dict(port, dscp2prio={})) == 3            # mlx5 default: dscp >> 3
    assert _roce.rdma_priority(dict(port, trust='pcp')) == 0
    assert _roce.rdma_priority(dict(port, trust=None)) is None


def _node(tmp_path, *names, **changes):
    profile = render.load_profile('amd_mi300x_roce')
    profile.setdefault('roce_qos', {}).update(changes)
    for name in names:
        faults.apply(profile, name)
    root = str(tmp_path / 'node')
    render.render(profile, root)
    return root


def _read(root, run=True):
    sysroot = SysRoot(root)
    runner = (lambda argv: tools_qos.answer(root, argv)[:2]) if run else None
    return _roce.read_roce(sysroot, read_ib(sysroot), runner)


def test_read_healthy_node(tmp_path):
    ports = _read(_node(tmp_path))
    assert len(ports) == 8
    port = ports[0]
    assert (port['source'], port['trust'], port['pfc'], port['roce_tos'], port['roce_tos_source']) == (
        'mlnx_qos', 'dscp', [3], 106, 'configfs')
    assert port['ecn_np']['3'] is True and port['ecn_rp']['0'] is False and port['dscp2prio']['26'] == 3
    assert (port['cnp_dscp'], port['cnp_prio'], port['gid_index'], port['active_mtu']) == (48, 6, 3, 4096)
    assert port['counters']['np_cnp_sent'] == 0 and 'out_of_sequence' in port['counters']


def test_read_without_tools_says_why(tmp_path):
    port = _read(_node(tmp_path), run=False)[0]
    assert port['source'] is None and port['pfc'] is None and 'not run' in port['source_reason']


def test_falls_back_to_dcb(tmp_path):
    root = _node(tmp_path)

    def run(argv):
        return None if argv[0] == 'mlnx_qos' else tools_qos.answer(root, argv)[:2]
    sysroot = SysRoot(root)
    port = _roce.read_roce(sysroot, read_ib(sysroot), run)[0]
    assert (port['source'], port['trust'], port['pfc']) == ('dcb', 'dscp', [3])
    assert port['prio_tc']['0'] == 1 and port['tc_tsa']['6'] == 'strict'


def test_no_tool_at_all(tmp_path):
    sysroot = SysRoot(_node(tmp_path))
    port = _roce.read_roce(sysroot, read_ib(sysroot), lambda argv: None)[0]
    assert port['source'] is None and 'mlnx_qos not installed' in port['source_reason'] and 'dcb' in port['source_reason']


def test_tos_default_without_configfs_entry(tmp_path):
    port = _read(_node(tmp_path, 'roce_tos_default'))[0]
    assert (port['roce_tos'], port['roce_tos_source']) == (0, 'kernel default (no rdma_cm configfs entry for mlx5_0)')
    port = _read(_node(tmp_path, configfs=False))[0]
    assert port['roce_tos'] is None and 'configfs' in port['roce_tos_source']


@pytest.mark.parametrize('tool', ['mlnx_qos', 'dcb'])
def test_plan_apply_read_back(tmp_path, tool):
    root = _node(tmp_path, 'roce_trust_pcp', 'roce_pfc_off', 'roce_ecn_off', 'roce_cnp_lossy', 'roce_tos_default')

    def run(argv):
        return tools_qos.answer(root, argv)[:2]
    port = _read(root)[0]
    fields = [change[0] for change in _roce.plan(port, WANT, tool)]
    assert fields == ['trust', 'pfc', 'roce_np ecn priority 3', 'roce_rp ecn priority 3', 'cnp_dscp', 'cnp_prio',
                      'rdma_cm default_roce_tos']
    for change in _roce.plan(port, WANT, tool):
        assert _roce.apply(SysRoot(root), run, change) is None
    again = [p for p in _read(root) if p['netdev'] == port['netdev']][0]
    assert _roce.plan(again, WANT, tool) == []
    # The other ports were not touched.
    assert [p for p in _read(root) if p['netdev'] != port['netdev']][0]['trust'] == 'pcp'


def test_apply_reports_a_failing_tool(tmp_path):
    root = _node(tmp_path, 'roce_pfc_off')
    port = _read(root)[0]
    change = _roce.plan(port, WANT, 'mlnx_qos')[0]
    assert 'failed (rc 1)' in _roce.apply(SysRoot(root), lambda argv: (1, 'Netlink error'), change)
    assert 'not installed' in _roce.apply(SysRoot(root), lambda argv: None, change)


TOKENS = list('0123456789 :,\n\tabcdefprio-tcsCSAF%') + ['prio-pfc ', 'dscp-prio ', 'tc: ', 'enabled ', 'priority ', 'dscp:']


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS)).map(''.join))
def test_parsers_never_raise(text):
    # Whatever a tool printed (a newer version, a truncated paste), the parsers answer in their types.
    parsed = _roce.parse_mlnx_qos(text)
    assert parsed['pfc'] is None or all(p in range(8) for p in parsed['pfc'])
    assert _roce.parse_dcb_pfc(text) is None or isinstance(_roce.parse_dcb_pfc(text), list)
    assert all(0 <= d <= 63 and 0 <= p <= 7 for d, p in _roce.parse_dcb_app(text).items())
    _roce.parse_dcb_ets(text)
    assert _roce.parse_dcb_apptrust(text) in (None, 'dscp', 'pcp')
