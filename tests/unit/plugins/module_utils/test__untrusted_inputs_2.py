# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Node-side parsers and readers on hostile input (issue 25 items 5-7): perfquery counters with
a leading zero, the mlnx_qos parser in linear time, netdev names checked where they are read,
a NodeDescription with a newline in iblinkinfo, a zombie ancestor for the parent watch."""

from __future__ import annotations

import os
import subprocess
import time

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _ib, _ibdiag, _process, _roce
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from tests.unit.conftest import fixture_text

# ---------------------------------------------------------------------------- item 5: perfquery

PERFQUERY = """# Port counters: Lid 4 port 1 (CapMask: 0x5A00)
PortSelect:......................01
CounterSelect:...................0x1b01
SymbolErrorCounter:..............010
LinkDownedCounter:...............0x0A
PortXmitData:....................007
PortRcvErrors:...................18446744073709551615
"""


def test_perfquery_counters_with_a_leading_zero_are_decimal():
    unread = {}
    blocks = _ibdiag.parse_perfquery(PERFQUERY, unread)
    assert blocks == [{'lid': 4, 'port': 1, 'counters': {'symbol_error': 10, 'link_downed': 10, 'port_xmit_data': 7,
                                                         'port_rcv_errors': 18446744073709551615}}]
    assert unread == {'count': 0, 'lines': []}


def test_perfquery_line_not_read_says_why():
    unread = {}
    text = PERFQUERY + 'SymbolErrorCounter:..............0x' + 'f' * 40 + '\nPortRcvErrors:...................1e999\ngarbage here\n'
    blocks = _ibdiag.parse_perfquery(text, unread)
    assert blocks[0]['counters']['symbol_error'] == 10   # the bad lines change nothing read
    assert unread['count'] == 3
    reasons = [item['reason'] for item in unread['lines']]
    assert 'SymbolErrorCounter' in reasons[0] and '0x hexadecimal' in reasons[0]
    assert "'1e999'" in reasons[1] and 'PortRcvErrors' in reasons[1]
    assert reasons[2] == 'not a counter line (Name:....value) or a port header'


# ---------------------------------------------------------------------------- item 5: mlnx_qos linear

def _timed(func, text):
    start = time.perf_counter()
    func(text)
    return time.perf_counter() - start


def test_mlnx_qos_parser_is_linear_on_200_kb():
    """200 kB inputs that made the whole-text re.M patterns quadratic ('^\\s*' from every line start
    over all the blank lines after it: 7.8 s at 20 kB of newlines, ~13 minutes at 200 kB). Linear
    code reads each in well under a second; the bound is generous against a slow machine."""
    hostile = {
        'newlines': '\n' * 200000,
        'blank lines': ' \n' * 100000,
        'row continued': 'prio:0 dscp:' + '1,\n' * 67000 + 'x',
        'spaces then a row': ' ' * 200000 + 'prio:0 dscp:1,',
        'pfc header words': 'priority ' + '0 ' * 100000,
        'tc words': 'tc: 1 ' + 'tsa' * 67000,
    }
    # First 20 kB (a quadratic parser fails here in seconds, not after minutes): 7.8 s before.
    assert _timed(_roce.parse_mlnx_qos, '\n' * 20000) < 1.0
    for name, text in hostile.items():
        assert len(text) >= 199000
        took = min(_timed(_roce.parse_mlnx_qos, text) for _try in range(2))
        assert took < 5.0, '%s: %.2f s' % (name, took)


def test_mlnx_qos_reads_the_real_output_and_a_continued_row():
    parsed = _roce.parse_mlnx_qos(fixture_text('public', 'mlnx_qos', 'netarbiter_cx_pfc_prio3_dscp_trust.txt'))
    assert parsed['trust'] == 'dscp' and parsed['pfc'] == [3]
    assert parsed['dscp2prio'] == dict((dscp, dscp // 8) for dscp in range(64))
    assert parsed['prio_tc'] == {0: 1, 1: 0, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7}
    # A priority holding more DSCPs than fit one line: its row goes on on the next line.
    continued = 'dscp2prio mapping:\n\tprio:0 dscp:07,06,\n\t\t05,04,\n\n\tprio:3 dscp:26,\nCable len: 7\n30,\n'
    assert _roce.parse_mlnx_qos(continued)['dscp2prio'] == {7: 0, 6: 0, 5: 0, 4: 0, 26: 3}


MIB = 1 << 20


def test_dcb_parsers_are_linear_on_1_mib():
    """1 MiB inputs that made the dcb parsers quadratic: 'order' then newlines (a whole-text
    '\\border\\s*:?\\s+' search backtracked over every blank line: 3.1 s at 16 kB), and a key
    repeated (the words after each copy of it were sliced: ~4 s at 400 kB). Linear code reads
    each in well under a second; a quadratic one needs minutes at 1 MiB."""
    hostile = {
        'apptrust order then newlines': (_roce.parse_dcb_apptrust, 'order' + '\n' * MIB + 'X'),
        'apptrust order then blanks': (_roce.parse_dcb_apptrust, 'order:' + ' \n' * (MIB // 2) + 'X'),
        'app keys': (_roce.parse_dcb_app, 'dscp-prio ' * (MIB // 10)),
        'app keys with a pair each': (_roce.parse_dcb_app, 'dscp-prio 1:x: ' * (MIB // 15)),
        'app conflicts keys': (_roce.dcb_app_conflicts, 'dscp-prio ' * (MIB // 10)),
        'pfc keys': (_roce.parse_dcb_pfc, 'prio-pfc ' * (MIB // 9)),
        'ets keys': (_roce.parse_dcb_ets, 'prio-tc tc-tsa tc-bw ' * (MIB // 21)),
    }
    # First 16 kB of newlines after 'order' (3.1 s before; a quadratic parser fails here at once).
    assert _timed(_roce.parse_dcb_apptrust, 'order' + '\n' * 16000 + 'X') < 1.0
    for name, (func, text) in hostile.items():
        assert len(text) >= MIB - 64
        took = min(_timed(func, text) for _try in range(2))
        assert took < 5.0, '%s: %.2f s' % (name, took)


def test_dcb_parsers_still_read_real_shapes():
    assert _roce.parse_dcb_apptrust('order: pcp dscp \n') == 'pcp'
    assert _roce.parse_dcb_apptrust('order dscp pcp') == 'dscp'
    assert _roce.parse_dcb_apptrust('x\norder : ethtype dscp\n') == 'dscp'
    assert _roce.parse_dcb_apptrust('order\n' * 3) is None
    assert _roce.parse_dcb_pfc('pfc-cap 8 macsec-bypass off delay 4096\nprio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off\n') == [3]
    # A key without pairs, then one with: the first that has pairs answers.
    assert _roce.parse_dcb_pfc('prio-pfc x prio-pfc 3:on 4:on') == [3, 4]
    assert _roce.parse_dcb_app('dscp-prio CS3:3 26:3 dscp-prio 1:1') == {24: 3, 26: 3}
    assert _roce.dcb_app_conflicts('dscp-prio CS3:2 CS3:3') == {24: [2, 3]}
    assert _roce.parse_dcb_ets('prio-tc 0:0 3:3 tc-tsa 0:ets 3:strict tc-bw 0:50 3:50') == ({0: 0, 3: 3}, {0: 'ets', 3: 'strict'}, {0: 50, 3: 50})


# ---------------------------------------------------------------------------- item 6: netdev names

def test_netdev_name_check_is_the_kernels():
    assert _roce.netdev_name_problem is _ib.netdev_name_problem
    for good in ('eth0', 'ens1f0np0', 'a' * 15, 'eth-0.100', 'x$(y)'):
        assert _ib.netdev_name_problem(good) is None, good
    for bad in ('', '.', '..', 'a' * 16, 'e/0', 'e:0', 'e 0', 'eth0\nreboot', 'e\t0', 'e\x00', 'e\x1b', '\u00e9' * 8):
        assert _ib.netdev_name_problem(bad), bad


def _mkdir(root, rel, files=None):
    path = os.path.join(root, rel.lstrip('/'))
    os.makedirs(path, exist_ok=True)
    for name, content in (files or {}).items():
        with open(os.path.join(path, name), 'w') as handle:
            handle.write(content)


def test_device_net_fallback_refuses_a_name_with_a_newline(tmp_path):
    root = str(tmp_path)
    dev = '/sys/class/infiniband/mlx5_0'
    _mkdir(root, dev + '/device/net/eth0\ntouch x')
    _mkdir(root, dev + '/device/net/eth1')
    _mkdir(root, '/sys/class/net/eth0\ntouch x', {'dev_port': '0\n'})
    _mkdir(root, '/sys/class/net/eth1', {'dev_port': '0\n'})
    sysroot = SysRoot(root)
    assert _ib._port_netdev(sysroot, dev, 1, 'Ethernet', []) == 'eth1'
    assert any("'eth0\\ntouch x' is not a network interface name (holds '\\n')" in w for w in sysroot.warnings), sysroot.warnings
    # The only candidate hostile: no netdev at all.
    os.rmdir(os.path.join(root, dev.lstrip('/'), 'device/net/eth1'))
    assert _ib._port_netdev(SysRoot(root), dev, 1, 'Ethernet', []) is None


# ---------------------------------------------------------------------------- item 7: iblinkinfo

def _linkinfo():
    return '\n'.join(line for line in fixture_text('public', 'iblinkinfo', 'linpack_edr_sb7700.txt').splitlines()
                     if not line.startswith('##'))


def test_node_description_with_a_newline_is_read_joined():
    whole = _ibdiag.parse_iblinkinfo(_linkinfo())
    split = _ibdiag.parse_iblinkinfo(_linkinfo().replace('MF0;SB7700:MSB7700/U1', 'MF0;SB\n7700:MSB7700/U1'))
    assert split['unparsed'] == []
    assert len(split['links']) == len(whole['links']) == 20
    switch = split['nodes']['0x506b4b0300820910']
    assert switch['type'] == 'switch' and switch['desc'] == 'MF0;SB 7700:MSB7700/U1'
    # The up-links from n02 and mgt to the switch are there, with their rate.
    up = [link for link in split['links'] if link['b'] and link['b']['lid'] == 2 and link['a']['lid'] in (3, 4)]
    assert sorted((link['a']['lid'], link['gbps']) for link in up) == [(3, 103.125), (4, 103.125)]


def test_node_description_past_the_join_is_counted_unread():
    text = _linkinfo().replace('MF0;SB7700:MSB7700/U1', 'MF0;SB\n1\n2\n3\n4\n5')
    parsed = _ibdiag.parse_iblinkinfo(text)
    topology = _ibdiag.topology(parsed, None)
    assert len(parsed['unparsed']) >= 6 and all(item['reason'] for item in parsed['unparsed'])
    # The switch header was not read: its port lines are given to no CA read before it.
    assert not any(node.get('type') == 'ca' and node.get('lid') == 2 for node in topology['nodes'].values())
    # ib_fabric_facts' status is not ok with lines unread (FABRIC_INPUT_UNREAD on the controller).
    from ansible_collections.hpc.gpu_fabric.plugins.modules import ib_fabric_facts
    facts = ib_fabric_facts.judge_status(
        {'status': 'ok', 'unread': {'count': len(topology['unparsed']), 'lines': topology['unparsed']}}, {'iblinkinfo': 'used'})
    assert facts['status'] == 'partial' and 'iblinkinfo' in facts['reason']


# ---------------------------------------------------------------------------- item 7: zombie

def test_a_zombie_ancestor_counts_as_gone():
    child = subprocess.Popen(['sleep', '0'])
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            with open('/proc/%d/stat' % child.pid, 'rb') as handle:
                fields = handle.read().rsplit(b')', 1)[1].split()
                if fields[0] == b'Z':
                    # The zombie's real start time (proc(5) field 22): only its state can make it gone.
                    start = int(fields[19])
                    break
            time.sleep(0.02)
        else:
            raise AssertionError('the child never became a zombie')
        assert _process._proc_stat(child.pid) is None
        watch = _process.ParentWatch()
        live = _process._proc_stat(os.getpid())
        assert live is not None
        watch.watched = [(os.getpid(), live[1])]
        assert watch.gone() is None or 'output' in watch.gone()
        watch.watched.append((child.pid, start))
        assert watch.gone() == 'the ancestor process %d exited' % child.pid
    finally:
        child.wait()
