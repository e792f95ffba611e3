# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import copy
import re
from xml.etree import ElementTree

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report
from tests.bench import diagnosis_accuracy


@pytest.fixture(scope='module')
def report():
    nodes = {'a': diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr'),
             'b': diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr', ('acs_enabled',))}
    bench = {'pairs': [{'server': 'a', 'client': 'b', 'rail': 0, 'memory': 'host', 'status': 'ok', 'verdict': 'ok', 'bw_avg_gbps': 390.0},
                       {'server': 'a', 'client': 'b', 'rail': 0, 'memory': 'gpu', 'status': 'ok', 'verdict': 'low', 'bw_avg_gbps': 270.0,
                        'gpu_vs_host': 0.69, 'gpu_distance': 'PIX', 'reasons': ['GPU memory 270.0 Gb/s is 69 % of host memory']}],
             'thresholds': {'gpu_ratio': 0.9}}
    # The devices of each test, as _bench.report() names them: the path b's ACS (GPU0<->mlx5_0) lies on.
    for pair in bench['pairs']:
        pair.update(server_hca='mlx5_0', client_hca='mlx5_0', server_gpu='GPU0', client_gpu='GPU0')
    findings = _diagnose.diagnose(nodes, bench, None, ['c'])
    return _report.build(nodes, findings, bench, None, ['c'], '2026-11-22T00:00:00')


def test_report_hosts_roots_and_symptoms(report):
    assert report['schema'] == 'hpc.gpu_fabric/report' and report['schema_version'] == 1
    # a is in the pair whose GPU memory is low, but b's ACS explains it: a healthy peer of a
    # broken node stays ok (else one bad node turns the whole fleet red).
    assert report['hosts']['a']['status'] == 'ok'
    assert report['hosts']['b']['status'] == 'error' and report['hosts']['c']['status'] == 'unreachable'
    acs = [f for f in report['findings'] if f['code'] == 'GDR_ACS_REDIRECT']
    low = [f for f in report['findings'] if f['code'] == 'BENCH_GPU_MEMORY_LOW'][0]
    assert acs and low['explained_by'] == acs[0]['id']      # ...explained by b's ACS
    assert report['hosts']['a']['roots'] == [] and acs[0]['id'] in report['hosts']['b']['roots']
    assert report['summary']['hosts_unreachable'] == 1


def test_unexplained_pair_symptom_counts_against_both_nodes():
    nodes = {'a': diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr', ()),
             'b': diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr', ())}
    bench = {'pairs': [{'server': 'a', 'client': 'b', 'rail': 0, 'memory': 'host', 'status': 'failed', 'verdict': 'failed',
                        'bw_avg_gbps': None, 'reasons': ['timeout: no answer']}], 'thresholds': {}}
    report = _report.build(nodes, _diagnose.diagnose(nodes, bench), bench)
    assert report['hosts']['a']['status'] == report['hosts']['b']['status'] == 'error'


def test_exit_policy_default_and_custom(report):
    matched = _report.policy(report)
    assert set(f['code'] for f in matched) == {'GDR_ACS_REDIRECT', 'HOST_UNREACHABLE'}
    assert _report.policy(report, "findings[?code=='IB_PORT_DOWN']") == []
    assert _report.policy(report, 'summary.hosts_unreachable > `0`') is True
    with pytest.raises(ValueError, match='not a valid JMESPath'):
        _report.policy(report, 'findings[?')


def test_drift_new_cleared_and_regressions(report):
    baseline = copy.deepcopy(report)
    baseline['findings'] = [f for f in baseline['findings'] if f['code'] != 'GDR_ACS_REDIRECT'] + [
        dict(baseline['findings'][0], id='IB_PORT_DOWN@a/mlx5_3/1', code='IB_PORT_DOWN')]
    baseline['bench']['pairs'][0]['bw_avg_gbps'] = 395.0     # 390 now: -1.3 %, within 10 %
    baseline['bench']['pairs'][1]['bw_avg_gbps'] = 380.0     # 270 now: -28.9 %
    drift = _report.drift(report, baseline, 10.0)
    assert [i for i in drift['new_findings'] if i.startswith('GDR_ACS')] and drift['cleared_findings'] == ['IB_PORT_DOWN@a/mlx5_3/1']
    assert [(r['memory'], r['change_pct']) for r in drift['regressions']] == [('gpu', -28.9)]
    with pytest.raises(ValueError, match='not a hpc.gpu_fabric/report report'):
        _report.drift(report, {'schema': 'other'})


def test_renderings(report):
    suite = ElementTree.fromstring(_report.junit(report))
    assert int(suite.get('tests')) == 4 * len(_report.CHECKS)
    assert suite.find("testcase[@classname='gpu_fabric.b'][@name='ib_gpu']/failure") is not None
    assert suite.find("testcase[@classname='gpu_fabric.a'][@name='ib']/failure") is None
    assert suite.find("testcase[@classname='gpu_fabric.c'][@name='ib']/error") is not None
    prom = _report.prometheus(report, 1795000000)
    # Text exposition format: comments, or name{labels} value.
    assert all(re.match(r'^(# (HELP|TYPE) \w+ .+|[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+]+)$', line)
               for line in prom.splitlines()), prom
    assert 'gpu_fabric_host_status{host="c"} 3' in prom
    assert 'gpu_fabric_pair_bandwidth_gbps{client="b",memory="gpu",rail="0",server="a"} 270.0' in prom
    text = _report.markdown(report, 'out/report.html')
    assert '| c | unreachable |' in text and '`GDR_ACS_REDIRECT` on b' in text and 'Explains 1 symptom(s): BENCH_GPU_MEMORY_LOW' in text


def test_junit_takes_each_host_verdict_from_the_report(report):
    """A pair's symptom explained by a root on its other end is not held against this end: report.md
    and report.html call it ok, and junit.xml passed its `benchmark` case too (it failed it before)."""
    symptom = [f for f in report['findings'] if f['code'] == 'BENCH_GPU_MEMORY_LOW'][0]
    root = [f for f in report['findings'] if f['id'] == symptom['explained_by']][0]
    innocent = [h for h in symptom['hosts'] if h != root['host']][0]
    assert report['hosts'][innocent]['status'] == 'ok' and symptom['id'] not in report['hosts'][innocent]['findings']
    assert symptom['id'] in report['hosts'][root['host']]['findings']
    suite = ElementTree.fromstring(_report.junit(report))
    for host, entry in report['hosts'].items():
        failing = [c.get('name') for c in suite.findall("testcase[@classname='gpu_fabric.%s']" % host)
                   if c.find('failure') is not None or c.find('error') is not None]
        assert (entry['status'] == 'ok') == (failing == []), (host, entry['status'], failing)
    assert suite.find("testcase[@classname='gpu_fabric.%s'][@name='benchmark']/failure" % innocent) is None
    assert suite.find("testcase[@classname='gpu_fabric.%s'][@name='benchmark']/failure" % root['host']) is not None
    assert '| %s | ok |' % innocent in _report.markdown(report)


HOSTILE_HOST = 'n1 | x\n<script>alert(1)</script>\x1b[31m\x00'
HOSTILE_CAUSE = 'perftest said <script>alert(2)</script> | and\x1b[0m *bold* [link](http://x) `code`\x0b\ud800'


@pytest.fixture
def hostile(report):
    """The report with a node whose name, and a finding whose texts, hold what a tool printed."""
    report = copy.deepcopy(report)
    # As build() makes it: the host's status and its findings (the ids junit's cases read) agree.
    report['hosts'][HOSTILE_HOST] = dict(report['hosts']['a'], status='error', findings=['hostile'], roots=['hostile'])
    report['findings'].append({'id': 'hostile', 'host': HOSTILE_HOST, 'hosts': [], 'layer': 'ib', 'code': 'X`Y|Z',
                               'severity': 'error', 'subject': HOSTILE_HOST, 'cause': HOSTILE_CAUSE,
                               'remedy': 'run <b>this</b>\n| then', 'explained_by': None})
    return report


def test_markdown_escapes_names_and_tool_messages(hostile):
    """report.md used to carry '<script>' verbatim, and a '|' or a newline in a name broke its table."""
    text = _report.markdown(hostile)
    assert '<script>' not in text and '<b>' not in text and '&lt;script&gt;' in text
    assert '\x1b' not in text and '\x00' not in text and '\ud800' not in text
    rows = [line for line in text.splitlines() if line.startswith('| ')]
    assert len(rows) == 1 + len(hostile['hosts'])                           # no row split by a newline
    for row in rows:
        assert len(re.findall(r'(?<!\\)\|', row)) == 6, row                  # every cell's '|' escaped
    root = [line for line in text.splitlines() if 'perftest said' in line]
    assert len(root) == 1 and r'\*bold\*' in root[0] and r'\[link\]' in root[0] and r'\`code\`' in root[0]


def test_junit_is_well_formed_whatever_the_names_hold(hostile):
    """A control character (an ANSI colour code, a NUL) made junit.xml unparsable."""
    suite = ElementTree.fromstring(_report.junit(hostile).encode('utf-8'))
    # The controls shown as their escapes (module_utils/_printable.py), as in every format.
    failure = suite.find("testcase[@classname='gpu_fabric.n1 | x\n<script>alert(1)</script>\\x1b[31m\\x00'][@name='ib']/failure")
    assert failure is not None and '<script>alert(2)</script>' in failure.text and '\x1b' not in failure.text


def test_prometheus_label_values_are_escaped(hostile):
    prom = _report.prometheus(hostile)
    line = [entry for entry in prom.splitlines() if entry.startswith('gpu_fabric_host_status{host="n1')][0]
    # Text exposition format: '\\', '"' and line feed escaped; nothing else ends the value.
    assert line == 'gpu_fabric_host_status{host="n1 | x\\n<script>alert(1)</script>\\\\x1b[31m\\\\x00"} 2'
    assert _report._labels(a='say "hi"\\n\n') == '{a="say \\"hi\\"\\\\n\\n"}'
    prom.encode('utf-8')


def test_html_escapes_the_hostile_report(hostile):
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _html
    page = _html.render(hostile)
    assert 'alert(1)</script>' not in page and 'alert(2)</script>' not in page and page.count('<script>') == 1
