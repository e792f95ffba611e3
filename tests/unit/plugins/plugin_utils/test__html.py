# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The HTML report: self-contained, what it shows, escaping. The real browser test is
tests/functional/test_report_html.py; these check the page's content without one."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _html, _report
from tests.bench import diagnosis_accuracy


class Collect(HTMLParser):
    def __init__(self):
        HTMLParser.__init__(self)
        self.tags = []
        self.text = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag, **attrs):
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def _sizes(peak):
    return [{'bytes': 2 ** e, 'bw_avg_gbps': round(peak * min(1.0, 2 ** e / 65536.0), 3)} for e in range(1, 24)]


@pytest.fixture(scope='module')
def report():
    nodes = {'a': diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr'),
             'b': diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr', ('acs_enabled',)),
             'c<script>': diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')}
    pairs = []
    for memory, bw, verdict in (('host', 390.0, 'ok'), ('gpu', 270.0, 'low')):
        pairs.append({'server': 'a', 'client': 'b', 'rail': 0, 'memory': memory, 'status': 'ok', 'verdict': verdict,
                      'bw_avg_gbps': bw, 'bw_ratio': bw / 400, 'port_rate_gbps': 400.0, 'sizes': _sizes(bw),
                      'reasons': [] if verdict == 'ok' else ['GPU memory 270.0 Gb/s is 69 % of host memory'],
                      'gpu_vs_host': 0.69 if memory == 'gpu' else None, 'gpu_distance': 'PIX',
                      # The devices of the test, as _bench.report() names them: the path b's ACS (GPU0<->mlx5_0) lies on.
                      'server_hca': 'mlx5_0', 'client_hca': 'mlx5_0', 'server_gpu': 'GPU0', 'client_gpu': 'GPU0'})
    pairs.append({'server': 'a', 'client': 'c<script>', 'rail': 0, 'memory': 'host', 'status': 'failed', 'verdict': 'failed',
                  'bw_avg_gbps': None, 'port_rate_gbps': 400.0, 'sizes': [], 'reasons': ['timeout: no answer']})
    bench = {'pairs': pairs, 'verdicts': {'ok': 1, 'low': 1, 'failed': 1}, 'thresholds': {'bw_ratio': 0.9, 'gpu_ratio': 0.9}}
    rows = [{'size_bytes': 2 ** e, 'out_of_place': {'busbw_gbs': 40.0 * min(1.0, 2 ** e / 2 ** 26)},
             'in_place': {'busbw_gbs': 39.0 * min(1.0, 2 ** e / 2 ** 26)}} for e in range(20, 31, 2)]
    collective = {'expected': {'gbs': 50.0, 'basis': 'median node'},
                  'fleet': {'benchmark': 'all_reduce_perf', 'hosts': ['a', 'b'], 'max_busbw_gbs': 40.0, 'results': rows,
                            'verdict': {'status': 'ok', 'ratio': 0.8, 'healthy_ratio': 0.8, 'reasons': []}},
                  'search': None}
    findings = _diagnose.diagnose(nodes, bench, collective, ['dead'])
    nccl = {'a': {'settings': {'NCCL_IB_HCA': '=mlx5_0:1'}, 'reasons': {'NCCL_IB_HCA': 'the ACTIVE port'}, 'notes': []}}
    built = _report.build(nodes, findings, bench, collective, ['dead'], '2026-11-22T00:00:00', None, nccl)
    built['drift'] = {'baseline_generated_at': '2026-11-01', 'regression_pct': 10, 'new_findings': ['X@a/-'],
                      'cleared_findings': [], 'regressions': [{'what': 'pair', 'server': 'a', 'client': 'b', 'rail': 0,
                                                               'memory': 'host', 'before': 395.0, 'now': 300.0, 'change_pct': -24.1}]}
    return built


def test_page_loads_nothing_from_anywhere(report):
    page = _html.render(report)
    parsed = Collect()
    parsed.feed(page)
    assert not parsed.find('link') and not parsed.find('img') and not parsed.find('iframe')
    assert all('src' not in attrs for tag, attrs in parsed.tags if tag == 'script')
    # The SVG namespace is an identifier, not a fetch; nothing else may name a URL.
    assert 'http' not in page.replace('http://www.w3.org/2000/svg', '')


def test_hosts_findings_and_plots_are_there(report):
    page = _html.render(report)
    parsed = Collect()
    parsed.feed(page)
    rows = parsed.find('tr', **{'data-host': 'dead'})
    assert len(rows) == 1 and len([a for t, a in parsed.tags if t == 'tr' and 'data-host' in a]) == 4
    # The ACS root carries the GPU-memory symptom folded under it.
    acs = [a for a in parsed.find('div') if a.get('data-code') == 'GDR_ACS_REDIRECT']
    assert acs and 'explains 1 symptom(s): BENCH_GPU_MEMORY_LOW' in page
    # One heatmap per memory kind and rail; curves for both memories and the collective.
    assert len(parsed.find('svg', **{'class': 'heatmap'})) == 2
    assert len(parsed.find('svg', **{'class': 'plot'})) == 3
    assert len(parsed.find('polyline', **{'class': 'series'})) == 2 + 2     # two pairs with curves, two collective curves
    assert 'expected 50.0 GB/s' in page and 'healthy 80 %' in page
    # The failed pair is a grey cell with an x, and listed with its reason.
    assert 'timeout: no answer' in page and 'class="cell failed"' in page
    assert 'Drift since 2026-11-01' in page and '-24.1 %' in page
    assert '<code>NCCL_IB_HCA==mlx5_0:1</code>' in page and 'the ACTIVE port' in page


def test_names_are_escaped(report):
    page = _html.render(report)
    assert 'c<script>' not in page and 'c&lt;script&gt;' in page
    # The page's own script is the only one.
    assert page.count('<script>') == 1


def test_empty_report_renders():
    built = _report.build({}, [], None, None, [], None)
    page = _html.render(built)
    assert 'No findings: every check passed.' in page and '<svg' not in page


def test_axis_helpers():
    assert [_html.size_label(s) for s in (2, 1024, 65536, 8388608, 1 << 30, 1000)] == ['2', '1K', '64K', '8M', '1G', '1000']
    assert _html._nice_max(387.5) == 500 and _html._nice_max(48) == 50 and _html._nice_max(0) == 1.0
    # A single point per curve (one message size) still plots.
    svg = _html.line_chart([{'name': 'x', 'points': [(8388608, 390.0)]}], 'size', 'Gb/s')
    assert '<circle' in svg and 'nothing measured' not in svg
    assert 'nothing measured' in _html.line_chart([{'name': 'x', 'points': [(8, None)]}], 'size', 'Gb/s')


def test_per_node_collective_is_a_table_of_nodes_against_their_peers():
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective

    def run(busbw):
        return {'status': 'ok', 'max_busbw_gbs': busbw, 'avg_busbw_gbs': busbw / 2, 'ranks': [{}, {}],
                'benchmark': 'all_reduce_perf', 'verdict': {'status': 'unknown'}}

    local = _collective.judge_nodes({'a': run(320.0), 'b': run(118.5), 'c': run(325.0), 'd<x>': {'failed': True, 'msg': 'no'}})
    assert local['slow'] == ['b'] and local['failed'] == ['d<x>'] and local['median_busbw_gbs'] == 320.0
    page = _html.render(_report.build({}, [], collective={'launcher': 'local', 'nodes': local, 'skipped': None}))
    section = page[page.index('<section id="collective">'):]
    section = section[:section.index('</section>')]
    assert 'median peak bus bandwidth 320.00 GB/s' in section
    assert '<td>b</td><td><span class="badge" style="background:' in section and '>low</span>' in section
    assert '37 %' in section and 'd&lt;x&gt;' in section and 'not run: no' in section


def test_a_1x_ports_cells_are_not_green_and_name_the_port():
    """Issue 22: a 1X link's 97 Gb/s cells were green on a 400 Gb/s rail. Judged by _bench.report against
    the rail's nominal rate, its cells are low and their tooltips name the port (escaped: names are untrusted)."""
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
    bad = 'x<b>&"1x'
    plans = {'a': {'hcas': ['mlx5_0'], 'rate_gbps': {'mlx5_0': 400.0}}, 'b': {'hcas': ['mlx5_0'], 'rate_gbps': {'mlx5_0': 400.0}},
             bad: {'hcas': ['mlx5_0'], 'rate_gbps': {'mlx5_0': 100.0}}}
    nodes = dict((host, {'plan': plan, 'records': []}) for host, plan in plans.items())
    for server, client in (('a', 'b'), ('a', bad), ('b', bad)):
        nodes[client]['records'].append({'side': 'client', 'round': 1, 'memory': 'host', 'rail': 0, 'server': server, 'client': client,
                                         'hca': 'mlx5_0', 'peer_hca': 'mlx5_0', 'status': 'ok', 'failure': None, 'counters_delta': {},
                                         'summary': {'bw_avg_gbps': 97.0 if bad in (server, client) else 392.0}})
    bench = _bench.report(nodes, {})
    page = _html.render(_report.build({}, [], bench, None, [], None))
    parsed = Collect()
    parsed.feed(page)
    # a<->b (both directions) green; a<->bad and b<->bad low (4 cells), none of them green.
    assert len(parsed.find('rect', **{'class': 'cell ok'})) == 2 and len(parsed.find('rect', **{'class': 'cell low'})) == 4
    tips = [t for t in parsed.text if '97.00 Gb/s' in t]
    assert len(tips) == 4 and all('below the rail\'s nominal 400 Gb/s: x<b>&"1x mlx5_0 at 100 Gb/s' in t for t in tips)
    assert bad not in page and 'x&lt;b&gt;&amp;&quot;1x mlx5_0 at 100 Gb/s' in page
    # The pair table says why, the thresholds say what the bar is.
    assert 'of the 400 Gb/s nominal rate of rail 0' in page and 'of the rail\'s nominal rate (the most common' in page
    # A tooltip built from a pair whose reasons do not name the port (a failed test through it) still does.
    cells = _html._node_cells([dict(bench['pairs'][1], verdict='failed', reasons=['timeout: no answer'])], 'host')
    assert all('below the rail\'s nominal 400 Gb/s: ' in cell['tip'] and 'mlx5_0 at 100 Gb/s' in cell['tip'] for cell in cells.values())
