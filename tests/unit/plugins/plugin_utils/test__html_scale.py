# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""report.html for a large pairwise benchmark: heatmaps of node groups that keep the
worst cell, bounded lists, bounded curves, escaped names, a page whose size does not follow the
number of pairs."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _html, _report

RAILS = 8


def _pair(server, client, rail, memory, bw=392.0, verdict='ok', reasons=()):
    failed = verdict == 'failed'
    return {'server': server, 'client': client, 'rail': rail, 'memory': memory, 'status': 'failed' if failed else 'ok',
            'verdict': verdict, 'bw_avg_gbps': None if failed else bw, 'bw_ratio': None if failed else round(bw / 400.0, 3),
            'port_rate_gbps': 400.0, 'bytes': 8388608, 'sizes': [], 'reasons': list(reasons)}


def _ring(count, bad=(), random_rounds=0, name='gpu%04d'):
    """Pairs of a ring (each node with the next) plus ``random_rounds`` shifted matchings, every
    rail, host and GPU memory; a node in ``bad`` fails every test on rail 3."""
    nodes = [name % index for index in range(count)]
    pairs = []
    for shift in [1] + [7 + 2 * r for r in range(random_rounds)]:
        for index, server in enumerate(nodes):
            client = nodes[(index + shift) % count]
            for rail in range(RAILS):
                for memory in ('host', 'gpu'):
                    if rail == 3 and (server in bad or client in bad):
                        pairs.append(_pair(server, client, rail, memory, verdict='failed', reasons=['timeout: no answer']))
                    else:
                        pairs.append(_pair(server, client, rail, memory))
    return nodes, pairs


def _page(nodes, pairs):
    verdicts = {}
    for pair in pairs:
        verdicts[pair['verdict']] = verdicts.get(pair['verdict'], 0) + 1
    bench = {'pairs': pairs, 'verdicts': verdicts, 'thresholds': {'bw_ratio': 0.9, 'gpu_ratio': 0.9, 'lat_max_us': 5.0}}
    built = _report.build(dict((n, {'ib': None, 'gdr': None}) for n in nodes), [], bench, None, [], '2026-11-24T00:00:00')
    return _html.render(built)


class Tags(HTMLParser):
    def __init__(self):
        HTMLParser.__init__(self)
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_node_groups_are_every_node_up_to_the_limit_then_runs_of_names():
    few = ['n%02d' % i for i in range(_html.HEATMAP_NODES)]
    assert _html.node_groups(few) == (few, dict((n, n) for n in few))
    many = ['gpu%04d' % i for i in range(1000)]
    labels, group_of = _html.node_groups(many)
    assert len(labels) == _html.HEATMAP_GROUPS == len(set(labels)) and set(group_of) == set(many)
    # Consecutive names, 42 a group (the last one shorter), each labelled first..last.
    assert labels[0] == 'gpu0000..gpu0041' and labels[-1] == 'gpu0966..gpu0999'
    assert group_of['gpu0041'] == labels[0] and group_of['gpu0042'] == labels[1]


def test_a_group_cell_keeps_the_worst_pair_and_counts_the_rest():
    nodes = ['gpu%04d' % i for i in range(64)]
    labels, group_of = _html.node_groups(nodes, groups=32)     # two nodes a group
    slow = _pair('gpu0001', 'gpu0003', 0, 'host', bw=250.0, verdict='low', reasons=['250.0 Gb/s is 62 % of the 400 Gb/s port rate'])
    pairs = [_pair('gpu0000', 'gpu0002', 0, 'host', bw=391.0), slow,
             _pair('gpu0000', 'gpu0003', 0, 'host', bw=330.0, verdict='low'), _pair('gpu0001', 'gpu0002', 0, 'host', bw=392.0)]
    cells = _html.group_cells(pairs, group_of)
    cell = cells[(labels[0], labels[1])]
    assert cell['verdict'] == 'low' and cell['value'] == 250.0 and cell['ratio'] == 0.625
    assert 'gpu0001->gpu0003 rail 0' in cell['tip'] and '4 pair test(s), 0 failed, 2 below threshold' in cell['tip']
    # A link carries both directions: the mirror cell is the same.
    assert cells[(labels[1], labels[0])]['value'] == 250.0 and set(cells) == {(labels[0], labels[1]), (labels[1], labels[0])}
    # A failed test is worse than any bandwidth, and a pair within one group lands on the diagonal.
    cells = _html.group_cells(pairs + [_pair('gpu0000', 'gpu0001', 0, 'host', verdict='failed')], group_of)
    assert cells[(labels[0], labels[0])]['verdict'] == 'failed' and cells[(labels[0], labels[1])]['verdict'] == 'low'


def test_a_large_fleet_gets_group_heatmaps_and_bounded_lists():
    nodes, pairs = _ring(256, bad=('gpu0100', 'gpu0200'), random_rounds=3)
    page = _page(nodes, pairs)
    parsed = Tags()
    parsed.feed(page)
    heatmaps = [a for t, a in parsed.tags if t == 'svg' and a.get('class') == 'heatmap']
    assert len(heatmaps) == 2 * RAILS
    cells = [a for t, a in parsed.tags if t == 'rect' and (a.get('class') or '').startswith('cell ')]
    # 24 x 24 groups at most per heatmap, every group pair of a ring-plus-shifts not all filled.
    assert 0 < len(cells) <= 2 * RAILS * _html.HEATMAP_GROUPS ** 2
    failed_cells = [a for a in cells if a['class'] == 'cell failed']
    assert failed_cells and 'each row and column is a group of up to 11 nodes' in page
    # 2 bad nodes x 8 peers x 2 memories on rail 3 failed: listed
    # in full (fewer than PAIR_ROWS), and both nodes top the table of nodes.
    failed = [p for p in pairs if p['verdict'] == 'failed']
    assert 0 < len(failed) < _html.PAIR_ROWS and page.count('timeout: no answer') >= len(failed)
    table = page[page.index('Nodes in the most pairs below threshold or failed'):]
    mine = [p for p in failed if 'gpu0100' in (p['server'], p['client'])]
    peers = set(p['server'] for p in mine) | set(p['client'] for p in mine)
    assert len(mine) == 16 and len(peers) == 9      # 8 peers and itself
    assert '<td>gpu0100</td><td class="num">16</td><td class="num">0</td><td class="num">8</td><td>3</td>' in table
    assert table.index('gpu0100') < table.index('</table>') and table.index('gpu0200') < table.index('</table>')
    # The healthy pairs' curve is their median, not 16,000 circles.
    assert len([a for t, a in parsed.tags if t == 'circle' and a.get('class') == 'series']) <= 2 * (_html.MAX_CURVES + 1)
    unhealthy = len([p for p in pairs if p['memory'] == 'host' and p['verdict'] != 'ok'])
    assert 'median of %d healthy pair test(s)' % (4 * 256 * RAILS - unhealthy) in page


def test_pair_table_is_cut_to_the_worst():
    nodes, pairs = _ring(64)
    for index, pair in enumerate(pairs):
        if pair['rail'] in (1, 2, 4, 5) and pair['memory'] == 'host':
            bw = 200.0 + index % 100
            pair.update(verdict='low', bw_avg_gbps=bw, bw_ratio=round(bw / 400.0, 3), reasons=['slow %d' % index])
    pairs[5].update(verdict='failed', status='failed', bw_avg_gbps=None, bw_ratio=None, reasons=['the worst of all'])
    low = [p for p in pairs if p['verdict'] != 'ok']
    assert len(low) > _html.PAIR_ROWS
    page = _page(nodes, pairs)
    section = page[page.index('<h3>Pairs below threshold or failed'):]
    section = section[:section.index('</table>')]
    assert 'the worst %d of %d (all in report.json)' % (_html.PAIR_ROWS, len(low)) in section
    assert section.count('<tr>') == _html.PAIR_ROWS + 1
    # Failed first, then the lowest share of the port rate.
    values = [float(v) for v in re.findall(r'<td class="num">([0-9.]+)</td>', section)]
    assert section.index('the worst of all') < section.index('slow ') and values == sorted(values) and values[0] == 200.0


def test_names_are_escaped_in_group_labels_tooltips_and_tables():
    nodes, pairs = _ring(40, bad=('n<x>&0005',), name='n<x>&%04d')
    page = _page(nodes, pairs)
    assert '<x>' not in page and 'n&lt;x&gt;&amp;0000..n&lt;x&gt;&amp;0001' in page
    assert '<td>n&lt;x&gt;&amp;0005</td>' in page and page.count('<script>') == 1


def test_page_size_is_bounded_by_the_aggregation_not_by_the_pairs():
    # 1,024 nodes x 8 rails x 2 memories. What grows with the fleet: the hosts table (one row a
    # node, ~250 bytes: 0.25 MB) and nothing else; the heatmaps are at most 24 x 24 cells (~450 bytes
    # a cell with its tooltip, 16 heatmaps: ~4.1 MB), the tables at most PAIR_ROWS + WORST_NODES rows
    # (~0.1 MB), the curves MAX_CURVES + 1 per memory. 6 MiB holds that; before the grouping, the
    # ring alone rendered 2.7 GB (tests/bench/controller_scale.py).
    nodes, pairs = _ring(1024, bad=('gpu0005', 'gpu0700'))
    ring = len(_page(nodes, pairs).encode('utf-8'))
    assert ring < 6 * 2 ** 20
    # Three times the pairs (random matchings on top of the ring) barely move it: the cells fill in.
    nodes, more = _ring(1024, bad=('gpu0005', 'gpu0700'), random_rounds=2)
    assert len(more) == 3 * len(pairs) and len(_page(nodes, more).encode('utf-8')) < 6 * 2 ** 20


def test_the_scale_benchmark_runs_every_stage_on_a_small_fleet():
    from tests.bench import controller_scale
    rows = list(controller_scale.measure_case(6, 'full'))
    assert [r['stage'] for r in rows] == list(controller_scale.STAGES) and not any(r.get('error') for r in rows)
    by_stage = dict((r['stage'], r) for r in rows)
    # 15 pairs x 8 rails x 2 memories; the planted faults on nodes 1, 2, 5 are judged and diagnosed.
    assert by_stage['judge']['pairs'] == 15 * 8 * 2 and by_stage['judge']['verdicts'].get('low', 0) > 0
    assert by_stage['records']['records'] == 2 * by_stage['judge']['pairs'] and by_stage['diagnose']['findings'] > 0
    assert all(r['within_target'] and r['peak_rss_mib'] > 0 for r in rows if not r['input'])


def test_curves_beyond_the_cap_are_the_worst_pairs_and_a_median():
    nodes, pairs = _ring(60)
    for index, pair in enumerate(pairs):
        pair['sizes'] = [{'bytes': 65536, 'bw_avg_gbps': 100.0 + index % 3}, {'bytes': 8388608, 'bw_avg_gbps': pair['bw_avg_gbps']}]
    host = [p for p in pairs if p['memory'] == 'host']
    for pair in host[:_html.MAX_CURVES + 10]:
        pair.update(verdict='low', bw_avg_gbps=200.0, bw_ratio=0.5)
    series, median_of, not_drawn = _html._curves(host)
    assert len(series) == _html.MAX_CURVES + 1 and not_drawn == 10 and median_of == len(host) - _html.MAX_CURVES - 10
    median = series[-1]
    assert median['name'] == 'median of %d healthy pair test(s)' % median_of and median['points'] == [(65536, 101.0), (8388608, 392.0)]
    page = _page(nodes, pairs)
    assert 'the worst %d pair test(s) one by one, %d healthy ones as their median, 10 more below threshold not drawn' % (
        _html.MAX_CURVES, median_of) in page
