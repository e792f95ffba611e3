# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Saved mlnx_qos / dcb outputs (module_utils/_roce.py SavedOutputs; roce_qos_facts from_log):
real public printouts named <netdev>.<kind>.txt, read back as the tools would answer, and every
file that cannot be used said so, per file and per port."""

from __future__ import annotations

import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _paths, _roce
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from ansible_collections.hpc.gpu_fabric.plugins.modules import roce_qos_facts
from tests.sim import render
from tests.unit.plugins.modules.utils import run_module

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'public')
# The first RoCE port of tests/sim/profiles/amd_mi300x_roce.yml (mlx5_0 port 1).
NETDEV = 'ens10f0np0'


def fixture(*parts):
    """A public printout as a customer would paste it: without our '## ' source lines."""
    with open(os.path.join(FIXTURES, *parts)) as handle:
        return ''.join(line for line in handle if not line.startswith('## '))


@pytest.fixture(scope='module')
def node(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('mi300x'))
    render.render(render.load_profile('amd_mi300x_roce'), root)
    return root


def write(directory, name, text):
    os.makedirs(str(directory), exist_ok=True)
    path = os.path.join(str(directory), name)
    with open(path, 'w') as handle:
        handle.write(text)
    return path


def read(root, paths):
    saved = _roce.SavedOutputs(paths)
    sysroot = SysRoot(root)
    ports = dict((p['netdev'], p) for p in _roce.read_roce(sysroot, read_ib(sysroot), saved))
    return ports, saved


def test_real_mlnx_qos_output(node, tmp_path):
    write(tmp_path, NETDEV + '.mlnx_qos.txt', fixture('mlnx_qos', 'netarbiter_cx_pfc_prio3_dscp_trust.txt'))
    ports, saved = read(node, [str(tmp_path)])
    port = ports[NETDEV]
    assert (port['source'], port['source_reason'], port['trust'], port['pfc']) == ('mlnx_qos', None, 'dscp', [3])
    assert port['dscp2prio']['26'] == 3 and port['prio_tc']['0'] == 1 and port['tc_tsa']['6'] == 'vendor'
    # The files below the root still give ECN, CNP and the ToS.
    assert (port['ecn_np']['3'], port['cnp_dscp'], port['roce_tos']) == (True, 48, 106)
    assert saved.read == [os.path.join(str(tmp_path), NETDEV + '.mlnx_qos.txt')] and saved.refused == []
    # The other seven ports have no saved output: unknown, never passed (fail closed).
    others = [p for name, p in ports.items() if name != NETDEV]
    assert len(others) == 7 and all(p['source'] is None and p['pfc'] is None for p in others)
    assert 'no saved output of mlnx_qos or dcb for ens11f0np0 (%s): not checked' % tmp_path in ports['ens11f0np0']['source_reason']


def test_real_dcb_outputs_given_as_files(node, tmp_path):
    paths = [write(tmp_path, NETDEV + '.dcb_pfc.txt', fixture('dcb', 'talos_roce_dcb_pfc_one_line_prio3.txt')),
             write(tmp_path, NETDEV + '.dcb_app.txt', fixture('dcb', 'talos_roce_dcb_app_symbolic.txt')),
             write(tmp_path, NETDEV + '.dcb_ets.txt', fixture('dcb', 'talos_roce_dcb_ets_prio_tc.txt'))]
    ports, saved = read(node, paths)
    port = ports[NETDEV]
    assert (port['source'], port['pfc'], port['dscp2prio']) == ('dcb', [3], {'26': 3, '48': 6})
    assert port['prio_tc'] == dict((str(p), p) for p in range(8)) and port['trust'] is None   # no apptrust output
    assert len(saved.read) == 3 and saved.unused() == []


def test_man7_pfc_on_six_and_seven(node, tmp_path):
    write(tmp_path, NETDEV + '.dcb_pfc.txt', fixture('dcb', 'man7_dcb_pfc_show_prio67.txt'))
    port = read(node, [str(tmp_path)])[0][NETDEV]
    assert (port['source'], port['pfc'], port['dscp2prio'], port['prio_tc']) == ('dcb', [6, 7], None, None)


def test_what_fabric_capture_writes_reads_back(node, tmp_path):
    text = fixture('mlnx_qos', 'netarbiter_cx_pfc_prio3_dscp_trust.txt')
    argv = _roce.qos_argv('mlnx_qos', NETDEV)
    write(tmp_path, NETDEV + '.mlnx_qos.txt', _roce.saved_text(argv, (0, text)))
    assert _roce.parse_saved(_roce.saved_text(argv, (0, text))) == ((0, text), None)
    assert _roce.parse_saved(_roce.saved_text(argv, None)) == (None, None)
    assert read(node, [str(tmp_path)])[0][NETDEV]['pfc'] == [3]
    # Output that itself starts with '# key: value' stays output: only the header's own keys, once each.
    pasted = '# rc: 7\n' + text
    assert _roce.parse_saved(_roce.saved_text(argv, (0, pasted)), argv) == ((0, pasted), None)
    # Another port's saved output renamed to this netdev is not used, and says why.
    other = _roce.saved_text(_roce.qos_argv('mlnx_qos', 'ens11f0np0'), (0, text))
    write(tmp_path, NETDEV + '.mlnx_qos.txt', other)
    port = read(node, [str(tmp_path)])[0][NETDEV]
    assert port['source'] is None and "its header names the command 'mlnx_qos -i ens11f0np0', not \"mlnx_qos -i %s\"" % NETDEV \
        in port['source_reason']


def test_unparsable_and_failed_outputs_say_which_file_and_why(node, tmp_path):
    # Not an mlnx_qos printout (the wrong command's output), then a dcb pfc that failed on the node.
    mlnx = write(tmp_path, NETDEV + '.mlnx_qos.txt', fixture('dcb', 'talos_roce_dcb_app_symbolic.txt'))
    pfc = write(tmp_path, NETDEV + '.dcb_pfc.txt', _roce.saved_text(_roce.qos_argv('dcb_pfc', NETDEV), (1, '')))
    port = read(node, [str(tmp_path)])[0][NETDEV]
    assert port['source'] is None and port['pfc'] is None
    assert port['source_reason'] == ('%s: no "PFC configuration" block in it (is it the output of "mlnx_qos -i %s"?); '
                                     '%s: "dcb pfc show dev %s" failed on the node (rc 1)' % (mlnx, NETDEV, pfc, NETDEV))
    # A dcb pfc that ran but printed no map; a header without its rc.
    write(tmp_path, NETDEV + '.dcb_pfc.txt', 'pfc-cap 8 macsec-bypass off delay 0\n')
    assert 'no "prio-pfc" map in it' in read(node, [str(tmp_path)])[0][NETDEV]['source_reason']
    write(tmp_path, NETDEV + '.mlnx_qos.txt', _roce.SAVED_MAGIC + '\n# command: mlnx_qos -i %s\nDCBX mode: OS controlled\n' % NETDEV)
    assert '%s is no saved output: its header names no rc' % mlnx in read(node, [str(tmp_path)])[0][NETDEV]['source_reason']


def test_only_bounded_regular_files_are_read(node, tmp_path):
    big = write(tmp_path, NETDEV + '.mlnx_qos.txt', 'x' * (_roce.SAVED_MAX_BYTES + 1))
    os.mkfifo(os.path.join(str(tmp_path), NETDEV + '.dcb_pfc.txt'))
    port = read(node, [str(tmp_path)])[0][NETDEV]
    assert port['source'] is None
    assert '%s not read: larger than %s' % (big, _paths.size_text(_roce.SAVED_MAX_BYTES)) in port['source_reason']
    assert 'dcb_pfc.txt not read: a FIFO, not a regular file' in port['source_reason']
    # A symlink (to a good output) is not followed.
    target = write(tmp_path / 'elsewhere', 'out.txt', fixture('mlnx_qos', 'netarbiter_cx_pfc_prio3_dscp_trust.txt'))
    links = tmp_path / 'links'
    links.mkdir()
    os.symlink(target, str(links / (NETDEV + '.mlnx_qos.txt')))
    port = read(node, [str(links)])[0][NETDEV]
    assert port['source'] is None and 'mlnx_qos.txt not read' in port['source_reason']


@pytest.mark.parametrize('name, why', [
    ('a_very_long_ifname.mlnx_qos.txt', '18 bytes, the limit is 15'),
    ('bad name.mlnx_qos.txt', "holds ' '"),
    ('eth0\n.dcb_pfc.txt', "holds '\\n'"),
    ('eth0:1.dcb_pfc.txt', "holds ':'"),
    ('...mlnx_qos.txt', 'a directory name'),
    ('mlnx_qos.txt', 'not named <netdev>.<'),
    ('README.txt', 'not named <netdev>.<'),
])
def test_file_names_that_are_no_netdev_are_refused(node, tmp_path, name, why):
    path = write(tmp_path, name, fixture('mlnx_qos', 'netarbiter_cx_pfc_prio3_dscp_trust.txt'))
    ports, saved = read(node, [str(tmp_path)])
    assert [r['path'] for r in saved.refused] == [path] and why in saved.refused[0]['reason']
    assert saved.read == [] and all(p['source'] is None for p in ports.values())


def test_netdev_names():
    for good in ('eth0', 'ens10f0np0', 'enp1s0f0np0.100', 'x' * 15):
        assert _roce.netdev_name_problem(good) is None, good
    for bad, why in (('a/b', "holds '/'"), ('', 'empty'), ('x' * 16, '16 bytes'), ('eth\t0', "holds '\\t'"), ('..', 'a directory'),
                     (None, 'empty'), ('é' * 8, '16 bytes')):
        assert why in _roce.netdev_name_problem(bad), bad


def test_a_port_whose_netdev_is_no_interface_name_is_never_asked(tmp_path):
    asked = []
    devices = [{'name': 'mlx5_0', 'ports': [{'port': 1, 'link_layer': 'Ethernet', 'netdev': '../../etc', 'state': 'ACTIVE'}]}]
    port = _roce.read_roce(SysRoot(str(tmp_path)), devices, asked.append)[0]
    assert asked == [] and port['source'] is None and port['ecn_np'] is None
    assert port['source_reason'] == "the netdev name '../../etc' is not an interface name (holds '/'): not read"


def test_the_same_output_twice_keeps_the_first(node, tmp_path):
    first = write(tmp_path / 'a', NETDEV + '.mlnx_qos.txt', fixture('mlnx_qos', 'netarbiter_cx_pfc_prio3_dscp_trust.txt'))
    second = write(tmp_path / 'b', NETDEV + '.mlnx_qos.txt', 'garbage\n')
    other = write(tmp_path / 'b', 'eth9.mlnx_qos.txt', 'garbage\n')
    ports, saved = read(node, [str(tmp_path / 'a'), str(tmp_path / 'b')])
    assert ports[NETDEV]['pfc'] == [3] and saved.read == [first]
    assert saved.refused == [{'path': second, 'reason': 'a second output of mlnx_qos for %s (%s is used)' % (NETDEV, first)}]
    assert saved.unused() == [other]     # a netdev the node has no RoCE port for


def test_module_from_log(node, tmp_path, monkeypatch):
    write(tmp_path, NETDEV + '.mlnx_qos.txt', fixture('mlnx_qos', 'netarbiter_cx_pfc_prio3_dscp_trust.txt'))
    write(tmp_path, 'notes.txt', 'sent by the customer\n')
    result, failed = run_module(roce_qos_facts.main, {'root': node, 'from_log': str(tmp_path)}, monkeypatch)
    assert not failed, result
    facts = result['ansible_facts']['gpu_fabric_roce']
    assert [p['source'] for p in facts['ports']] == ['mlnx_qos'] + [None] * 7
    assert facts['from_log'] == {'read': [os.path.join(str(tmp_path), NETDEV + '.mlnx_qos.txt')], 'unused': [],
                                 'refused': [{'path': os.path.join(str(tmp_path), 'notes.txt'),
                                              'reason': 'not named <netdev>.<mlnx_qos|dcb_pfc|dcb_app|dcb_ets|dcb_apptrust|dcb_dcbx|'
                                                        'lldptool_pfc|lldptool_ets>.txt'}],
                                 'refused_more': 0}
    assert result['warnings'] == ['from_log: %s not used: %s' % (facts['from_log']['refused'][0]['path'], facts['from_log']['refused'][0]['reason'])]
    result, failed = run_module(roce_qos_facts.main, {'root': node, 'from_log': [str(tmp_path / 'typo')]}, monkeypatch)
    assert failed and result['msg'].startswith('from_log: %s not found' % (tmp_path / 'typo'))
    # Without from_log, below another root: nothing is run, every port unknown.
    result, failed = run_module(roce_qos_facts.main, {'root': node}, monkeypatch)
    facts = result['ansible_facts']['gpu_fabric_roce']
    assert facts['from_log'] is None and all(p['source'] is None for p in facts['ports'])


def test_a_dscp_with_two_priorities_is_a_conflict_found_on_its_port(node, tmp_path):
    """dcb-app(8)'s own EXAMPLE output: DSCP 24 (CS3) listed to priorities 2 and 3. Kept, not collapsed."""
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _roce_rules
    app = [line for line in fixture('dcb', 'man7_dcb_app_conflicting_entries.txt').splitlines() if line.startswith('dscp-prio')][0]
    paths = [write(tmp_path, NETDEV + '.dcb_pfc.txt', fixture('dcb', 'talos_roce_dcb_pfc_one_line_prio3.txt')),
             write(tmp_path, NETDEV + '.dcb_app.txt', app + '\n')]
    ports, _saved = read(node, paths)
    port = ports[NETDEV]
    assert port['dscp2prio'] == {'0': 0, '48': 6} and port['dscp_conflicts'] == {'24': [2, 3]}
    found = [f for f in _roce_rules.roce_findings('n1', {'ports': [port]}) if f['code'] == 'ROCE_DSCP_CONFLICT']
    assert len(found) == 1 and found[0]['at'] == [['hca', 'n1', 'mlx5_0']] and found[0]['subject'] == NETDEV
    # DSCP 24 is neither the RDMA (ToS 106: DSCP 26) nor the CNP DSCP (48): a warning.
    assert found[0]['severity'] == 'warning' and 'DSCP 24 mapped to priorities [2, 3]' in found[0]['cause']
    # The same conflict on the RDMA DSCP: its priority is unknown, an error.
    rdma = dict(port, dscp_conflicts={'26': [3, 4]})
    found = [f for f in _roce_rules.roce_findings('n1', {'ports': [rdma]}) if f['code'] == 'ROCE_DSCP_CONFLICT']
    assert found[0]['severity'] == 'error' and '(the RDMA DSCP)' in found[0]['cause'] and found[0]['evidence']['ports'][NETDEV]['used'] == [26]
    # A port read by mlnx_qos (the NIC's table, one priority per DSCP) holds no conflict; one not read, None.
    assert [p['dscp_conflicts'] for name, p in ports.items() if name != NETDEV][0] is None


@pytest.mark.parametrize('junk', [_roce.SAVED_REFUSED_LISTED + 1, 20000])
def test_junk_files_in_a_saved_output_directory_give_a_few_warnings_and_a_count(node, tmp_path, monkeypatch, junk):
    """20,000 junk files printed 20,000 warnings: the first few are named, the rest counted, and the
    port's own saved output (sorted among them) is still read."""
    write(tmp_path, NETDEV + '.mlnx_qos.txt', fixture('mlnx_qos', 'netarbiter_cx_pfc_prio3_dscp_trust.txt'))
    for index in range(junk):
        (tmp_path / ('junk%05d.bin' % index)).write_bytes(b'')
    result, failed = run_module(roce_qos_facts.main, {'root': node, 'from_log': str(tmp_path)}, monkeypatch)
    assert not failed, result
    facts = result['ansible_facts']['gpu_fabric_roce']
    assert facts['from_log']['read'] == [os.path.join(str(tmp_path), NETDEV + '.mlnx_qos.txt')]
    refused = facts['from_log']['refused']
    assert len(refused) == _roce.SAVED_REFUSED_LISTED and refused[0]['path'].endswith('junk00000.bin')
    # Every junk file is accounted for: listed, counted as refused, or counted as not looked at.
    assert len(refused) + facts['from_log']['refused_more'] >= min(junk, _roce.SAVED_MAX_NAMES)
    if junk > _roce.SAVED_MAX_NAMES:
        assert any('more file(s) not looked at' in r['reason'] for r in refused) or facts['from_log']['refused_more']
    warnings = result['warnings']
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import WARNINGS_NAMED
    assert len(warnings) <= WARNINGS_NAMED + 1, warnings
    assert 'from_log: %d more file(s) not used, not listed' % facts['from_log']['refused_more'] in warnings, warnings


def test_sysroot_warnings_are_the_first_few_and_a_count(tmp_path):
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _sysroot
    sysroot = SysRoot(str(tmp_path))
    for index in range(50000):
        sysroot.warn('warning %d' % (index % 30000))    # 20,000 repeats: counted once each
    shown = sysroot.warnings
    assert shown[:_sysroot.WARNINGS_NAMED] == ['warning %d' % i for i in range(_sysroot.WARNINGS_NAMED)]
    assert shown[-1] == '... and %d more warning(s) like these, not shown' % (30000 - _sysroot.WARNINGS_NAMED)
    assert len(shown) == _sysroot.WARNINGS_NAMED + 1
