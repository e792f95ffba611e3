# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The report as one self-contained HTML page, rendered from report.json.

GPU clusters are often air-gapped: the page loads nothing (no fonts, scripts, styles or
images from anywhere), so every plot is inline SVG drawn here, on the controller, and the
little script it carries only filters what is already on the page. Without JavaScript the
page shows everything.

What a person sees, top to bottom: the verdict line; the host status table; the root
causes grouped by layer, each with the symptoms it explains folded under it; the pairwise
benchmark as an N x N heatmap per memory kind and rail and as bandwidth-vs-message-size
curves; the collective's bus bandwidth against the NICs' expectation; the recommended NCCL
settings per host; drift against the baseline.
"""

from __future__ import annotations

import json
import math
import statistics
from html import escape
from typing import Any, Iterable, Sequence

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _printable
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _culprit_search
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import LAYERS

LAYER_TITLES = {'ib': 'InfiniBand / RoCE links', 'ib_gpu': 'GPU <-> NIC (GPUDirect RDMA)', 'host': 'Host',
                'benchmark': 'Pairwise benchmark', 'collective': 'Collective'}
# Colour-blind-safe pairs (Okabe-Ito), also distinct in grey print.
STATUS_COLOURS = {'ok': '#009e73', 'warning': '#e69f00', 'error': '#d55e00', 'unreachable': '#555555',
                  'low': '#d55e00', 'failed': '#555555', 'corrupt': '#cc79a7', 'unknown': '#999999'}
SERIES = ('#0072b2', '#d55e00', '#009e73', '#cc79a7', '#e69f00', '#56b4e9', '#000000', '#f0e442')
# Beyond this many curves a legend is unreadable; the curves keep their tooltips.
MAX_LEGEND = 12
# Pairwise benchmark at scale: beyond HEATMAP_NODES nodes (~1,100 px wide at 34 px a
# cell) a heatmap cell is a group of nodes, at most HEATMAP_GROUPS a side (576 cells, each ~450
# bytes with its tooltip: ~4 MB for the 16 heatmaps of 8 rails x 2 memories, where a browser still
# opens the page at once); the pairs below threshold are listed worst
# first, at most PAIR_ROWS of them, and the nodes in the most of them, at most WORST_NODES; at most
# MAX_CURVES pairs get a curve of their own (the worst), the healthy ones one median curve. The
# whole matrix and every pair stay in report.json (bench.matrix, bench.pairs).
HEATMAP_NODES = 32
HEATMAP_GROUPS = 24
PAIR_ROWS = 200
WORST_NODES = 20
MAX_CURVES = 48
# Worst first: a failed test, then one below threshold, then anything not judged ok.
VERDICT_RANK = {'failed': 0, 'low': 1, 'ok': 3}

CSS = '''
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{background:#1d2733;color:#fff;padding:16px 24px}
header h1{margin:0 0 4px;font-size:22px} header .meta{opacity:.8;font-size:12px}
main{padding:8px 24px 40px;max-width:1500px}
section{background:#fff;border:1px solid #e3e3e3;border-radius:6px;margin:16px 0;padding:12px 16px}
h2{font-size:17px;margin:4px 0 10px} h3{font-size:15px;margin:14px 0 6px}
table{border-collapse:collapse;font-size:13px} th,td{border-bottom:1px solid #eee;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#f3f4f6} .num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;border-radius:10px;padding:1px 9px;color:#fff;font-size:12px;font-weight:600}
.verdict{font-size:16px;margin:10px 0} .controls{margin:6px 0 10px;font-size:13px} .controls label{margin-right:12px}
.finding{border-left:4px solid #999;padding:6px 10px;margin:8px 0;background:#fcfcfc}
.finding.error{border-color:#d55e00} .finding.warning{border-color:#e69f00} .finding.info{border-color:#56b4e9}
.finding .code{font-family:ui-monospace,monospace;font-weight:600} .finding .where{color:#555}
.finding .remedy{color:#0b5394} pre{background:#f6f8fa;padding:6px;overflow:auto;font-size:12px;max-height:240px}
details>summary{cursor:pointer;color:#333} .hidden{display:none}
.plots{display:flex;flex-wrap:wrap;gap:16px} figure{margin:0} figcaption{font-size:12px;color:#444;margin-top:2px}
svg text{font:11px system-ui,sans-serif;fill:#333} .note{color:#666;font-size:12px}
code{font-family:ui-monospace,monospace;font-size:12px}
'''

# Filters only: severity check boxes for the findings, a host filter for the table.
SCRIPT = '''
(function () {
  'use strict';
  function apply() {
    var shown = {};
    document.querySelectorAll('input[data-severity]').forEach(function (box) { shown[box.dataset.severity] = box.checked; });
    document.querySelectorAll('.finding[data-severity]').forEach(function (item) {
      item.classList.toggle('hidden', !shown[item.dataset.severity]);
    });
    var text = (document.getElementById('host-filter') || {value: ''}).value.toLowerCase();
    document.querySelectorAll('#hosts tbody tr').forEach(function (row) {
      row.classList.toggle('hidden', text !== '' && row.dataset.host.toLowerCase().indexOf(text) < 0);
    });
  }
  document.querySelectorAll('input[data-severity], #host-filter').forEach(function (el) { el.addEventListener('input', apply); });
  apply();
  document.documentElement.dataset.ready = 'true';
}());
'''


# Control characters (a parse error in HTML: WHATWG HTML 13.2.5 'control-character-in-input-stream',
# passed on or dropped silently by a browser, an escape sequence when the page's text is copied
# into a terminal) and bidirectional overrides (which reorder the text that follows them on the
# page): shown as their visible escapes, as in every other format (module_utils/_printable.py).
def _e(value: object) -> str:
    return escape(_printable.printable(value, _printable.LINES))


def _badge(status: Any) -> str:
    return '<span class="badge" style="background:%s">%s</span>' % (STATUS_COLOURS.get(status, '#999'), _e(status))


def size_label(size: float) -> str:
    for unit, factor in (('G', 1 << 30), ('M', 1 << 20), ('K', 1 << 10)):
        if size >= factor and size % factor == 0:
            return '%d%s' % (size // factor, unit)
    return str(int(size))


def _fmt(value: Any, digits: int = 1) -> str:
    return '-' if value is None else ('%.*f' % (digits, value))


def _nice_max(value: float) -> float:
    """An axis end a little above ``value`` on 1-2-5 steps."""
    if not value or value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        top = step * 10 ** exponent
        if top >= value * 1.02:
            return float(top)
    return float(10 ** (exponent + 1))


# ---------------------------------------------------------------------------- plots

class _Scale(object):
    """Where a line chart draws a point: x on a log2 axis from x0 to x1, y linear from 0 to y1,
    inside the plot's margins (left, right, top, bottom)."""

    MARGINS = (60, 16, 14, 44)

    def __init__(self, x0: float, x1: float, y1: float, width: int, height: int) -> None:
        self.x0, self.x1, self.y1, self.width, self.height = x0, x1, y1, width, height

    def px(self, x: float) -> float:
        left, right = self.MARGINS[0], self.MARGINS[1]
        return left + (math.log(x, 2) - self.x0) / (self.x1 - self.x0) * (self.width - left - right)

    def py(self, y: float) -> float:
        top, bottom = self.MARGINS[2], self.MARGINS[3]
        return self.height - bottom - (y / self.y1) * (self.height - top - bottom)


def _axes(scale: _Scale, x_label: str, y_label: str) -> list[str]:
    """The frame, the grid lines with their values, and the axis labels."""
    left, right, top, bottom = _Scale.MARGINS
    width, height, py = scale.width, scale.height, scale.py
    out = ['<rect x="%d" y="%d" width="%d" height="%d" fill="#fff" stroke="#ccc"/>' % (left, top, width - left - right, height - top - bottom)]
    for i in range(6):
        y = scale.y1 * i / 5.0
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%s</text>'
                   % (left, width - right, py(y), py(y), left - 4, py(y) + 4, ('%g' % round(y, 2))))
    step = max(1, int(math.ceil((scale.x1 - scale.x0) / 12.0)))
    exp = int(math.ceil(scale.x0))
    while exp <= scale.x1:
        x = scale.px(2 ** exp)
        out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>'
                   % (x, x, top, height - bottom, x, height - bottom + 14, size_label(2 ** exp)))
        exp += step
    out.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % ((left + width - right) // 2, height - 8, _e(x_label)))
    out.append('<text transform="translate(14,%d) rotate(-90)" text-anchor="middle">%s</text>' % ((top + height - bottom) // 2, _e(y_label)))
    return out


def _marks(scale: _Scale, series: list[dict[str, Any]], hlines: Sequence[tuple[Any, str]]) -> list[str]:
    """The dashed expectation lines, then each curve (a line with a dot at each of its last points)."""
    left, right = _Scale.MARGINS[0], _Scale.MARGINS[1]
    px, py, out = scale.px, scale.py, []
    for y, label in hlines:
        if y:
            out.append('<line class="expect" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#d55e00" stroke-dasharray="5 4"/>'
                       '<text x="%d" y="%.1f" text-anchor="end" style="fill:#d55e00">%s</text>'
                       % (left, scale.width - right, py(y), py(y), scale.width - right - 4, py(y) - 4, _e(label)))
    for index, item in enumerate(series):
        pts = sorted((x, y) for x, y in item['points'] if x and x > 0 and y is not None)
        if not pts:
            continue
        colour = item.get('colour') or SERIES[index % len(SERIES)]
        coords = ' '.join('%.1f,%.1f' % (px(x), py(y)) for x, y in pts)
        tip = '%s: %s' % (item['name'], ', '.join('%s %s' % (size_label(x), _fmt(y, 2)) for x, y in pts[-3:]))
        if len(pts) > 1:
            out.append('<polyline class="series" fill="none" stroke="%s" stroke-width="1.6" points="%s"><title>%s</title></polyline>'
                       % (colour, coords, _e(tip)))
        for x, y in pts if len(pts) <= 3 else pts[-1:]:
            out.append('<circle class="series" cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s</title></circle>'
                       % (px(x), py(y), colour, _e('%s: %s %s' % (item['name'], size_label(x), _fmt(y, 2)))))
    return out


def _legend(series: list[dict[str, Any]]) -> str:
    if len(series) > MAX_LEGEND:
        return '<div class="note">%d curves; hover a curve for its name</div>' % len(series)
    return '<div class="note">%s</div>' % ' '.join(
        '<span style="color:%s">&#9632;</span> %s' % (item.get('colour') or SERIES[i % len(SERIES)], _e(item['name']))
        for i, item in enumerate(series))


def line_chart(series: list[dict[str, Any]], x_label: str, y_label: str, hlines: Sequence[tuple[Any, str]] = (), width: int = 620,
               height: int = 330, css_class: str = 'plot') -> str:
    """Curves over a log2 x axis (message sizes). ``series``: [{'name', 'points': [(x, y)]}];
    ``hlines``: [(y, label)] drawn dashed (expectations)."""
    points = [(x, y) for s in series for x, y in s['points'] if x and x > 0 and y is not None]
    if not points:
        return '<p class="note">nothing measured to plot</p>'
    xs = [math.log(point[0], 2) for point in points]
    x0, x1 = min(xs), max(xs)
    if x0 == x1:
        x0, x1 = x0 - 1, x1 + 1
    y1 = _nice_max(max([point[1] for point in points] + [line[0] for line in hlines if line[0]]))
    scale = _Scale(x0, x1, y1, width, height)
    out = ['<svg class="%s" role="img" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">'
           % (css_class, width, height, width, height)]
    out += _axes(scale, x_label, y_label) + _marks(scale, series, hlines)
    out.append('</svg>')
    return ''.join(out) + _legend(series)


def heatmap(nodes: list[str], cells: dict[tuple[Any, Any], dict[str, Any]], title: str, cell: int = 34, diagonal: bool = False) -> str:
    """N x N grid, server rows x client columns. ``cells``: {(server, client): {'value', 'ratio',
    'verdict', 'tip'}}; colour by verdict, shade by the share of the port rate reached.
    ``diagonal``: the rows and columns are groups of nodes, whose diagonal holds the pairs
    within a group (else a node with itself: drawn grey)."""
    label_w = max([len(n) for n in nodes] + [4]) * 7 + 10
    size = len(nodes) * cell
    width, height = label_w + size + 10, label_w + size + 10
    out = ['<svg class="heatmap" role="img" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">'
           '<title>%s</title>' % (width, height, width, height, _e(title))]
    for i, node in enumerate(nodes):
        out.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (label_w - 4, label_w + i * cell + cell // 2 + 4, _e(node)))
        out.append('<text transform="translate(%d,%d) rotate(-60)">%s</text>' % (label_w + i * cell + cell // 2, label_w - 4, _e(node)))
    for r, server in enumerate(nodes):
        for c, client in enumerate(nodes):
            x, y = label_w + c * cell, label_w + r * cell
            item = cells.get((server, client))
            if server == client and not diagonal:
                out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="#f3f3f3"/>' % (x, y, cell - 1, cell - 1))
                continue
            if item is None:
                out.append('<rect class="cell empty" x="%d" y="%d" width="%d" height="%d" fill="#fff" stroke="#eee">'
                           '<title>%s -> %s: not tested</title></rect>' % (x, y, cell - 1, cell - 1, _e(server), _e(client)))
                continue
            colour = STATUS_COLOURS.get(item['verdict'], '#999')
            ratio = item.get('ratio')
            opacity = 1.0 if item['verdict'] != 'ok' or ratio is None else max(0.35, min(1.0, ratio))
            out.append('<rect class="cell %s" x="%d" y="%d" width="%d" height="%d" fill="%s" fill-opacity="%.2f"><title>%s</title></rect>'
                       % (_e(item['verdict']), x, y, cell - 1, cell - 1, colour, opacity, _e(item['tip'])))
            text = 'x' if item.get('value') is None else ('%.0f' % item['value'])
            out.append('<text x="%d" y="%d" text-anchor="middle" style="fill:#fff;font-size:10px">%s</text>'
                       % (x + cell // 2, y + cell // 2 + 4, text))
    out.append('</svg>')
    return ''.join(out)


# ---------------------------------------------------------------------------- sections

def _summary(report: dict[str, Any]) -> str:
    s = report['summary']
    worst = 'error' if s['hosts_failed'] or s['hosts_unreachable'] else 'warning' if s['warnings'] else 'ok'
    return ('<p class="verdict">%s %d host(s): <b>%d ok</b>, %d with errors, %d unreachable &middot; %d error(s), '
            '%d warning(s) &middot; <b>%d root cause(s)</b></p>'
            % (_badge(worst), s['hosts'], s['hosts_ok'], s['hosts_failed'], s['hosts_unreachable'], s['errors'],
               s['warnings'], s['roots']))


def _hosts(report: dict[str, Any]) -> str:
    by_id = dict((f['id'], f) for f in report['findings'])
    rows = []
    for host, entry in sorted(report['hosts'].items()):
        gdr = {True: 'ready', False: 'not ready', None: '-'}[entry.get('gdr_ready')]
        roots = ', '.join(sorted(set(by_id[i]['code'] for i in entry.get('roots') or [] if i in by_id))) or '-'
        rows.append('<tr data-host="%s"><td>%s</td><td>%s</td><td class="num">%s/%s</td><td class="num">%s</td><td>%s</td><td>%s</td></tr>'
                    % (_e(host), _e(host), _badge(entry['status']), entry.get('ports_active', 0), entry.get('ports', 0),
                       entry.get('gpus', 0), gdr, _e(roots)))
    return ('<section id="host-status"><h2>Hosts</h2><div class="controls"><label>filter <input id="host-filter" '
            'type="search" placeholder="host name"></label></div><table id="hosts"><thead><tr><th>host</th><th>status</th>'
            '<th>ports active</th><th>GPUs</th><th>GPUDirect RDMA</th><th>root causes</th></tr></thead><tbody>%s</tbody>'
            '</table></section>' % ''.join(rows))


def _finding(item: dict[str, Any], symptoms: Sequence[dict[str, Any]] = ()) -> str:
    where = '%s %s' % (item.get('host') or ', '.join(item.get('hosts') or []) or 'fleet', item.get('subject') or '')
    body = ['<div class="finding %s" data-severity="%s" data-code="%s" id="%s">' % (
        _e(item['severity']), _e(item['severity']), _e(item['code']), _e(item['id'])),
        '%s <span class="code">%s</span> <span class="where">on %s</span>' % (_badge(item['severity']), _e(item['code']), _e(where)),
        '<div>%s</div>' % _e(item['cause']), '<div class="remedy">Fix: %s</div>' % _e(item['remedy'])]
    if item.get('evidence'):
        body.append('<details><summary>evidence</summary><pre>%s</pre></details>'
                    % _e(json.dumps(item['evidence'], indent=1, sort_keys=True, default=str)))
    if symptoms:
        body.append('<details class="symptoms"><summary>explains %d symptom(s): %s</summary>%s</details>' % (
            len(symptoms), _e(', '.join(sorted(set(s['code'] for s in symptoms)))), ''.join(_finding(s) for s in symptoms)))
    body.append('</div>')
    return ''.join(body)


def _findings(report: dict[str, Any]) -> str:
    findings = report['findings']
    roots = [f for f in findings if f['explained_by'] is None]
    out = ['<section id="findings"><h2>Root causes by layer</h2>',
           '<p class="note">Bottom-up: a symptom in a higher layer is shown under the lower-layer finding that explains it.</p>',
           '<div class="controls">%s</div>' % ''.join(
               '<label><input type="checkbox" data-severity="%s"%s> %s</label>' % (sev, '' if sev == 'info' else ' checked', sev)
               for sev in ('error', 'warning', 'info'))]
    if not roots:
        out.append('<p>No findings: every check passed.</p>')
    for layer in LAYERS:
        mine = [f for f in roots if f['layer'] == layer]
        if not mine:
            continue
        out.append('<h3>%s</h3>' % _e(LAYER_TITLES.get(layer, layer)))
        for item in mine:
            out.append(_finding(item, [f for f in findings if f['explained_by'] == item['id']]))
    out.append('</section>')
    return ''.join(out)


def _percent(ratio: object) -> str:
    return '%.0f %%' % (100 * ratio) if isinstance(ratio, (int, float)) else '?'


def _pair_name(pair: dict[str, Any]) -> str:
    return '%s->%s rail %s' % (pair['server'], pair['client'], pair.get('rail'))


def _value(pair: dict[str, Any]) -> Any:
    return pair.get('bw_avg_gbps') if pair.get('bw_avg_gbps') is not None else pair.get('lat_typical_us')


def _worst_key(pair: dict[str, Any]) -> tuple[int, float]:
    """Worst first: failed, then below threshold by the share of the port rate reached, then the rest."""
    ratio = pair.get('bw_ratio')
    return (VERDICT_RANK.get(str(pair.get('verdict')), 2), ratio if isinstance(ratio, (int, float)) else 2.0)


def node_groups(nodes: Iterable[str], limit: int = HEATMAP_NODES, groups: int = HEATMAP_GROUPS) -> tuple[list[str], dict[str, str]]:
    """A heatmap's rows and columns: every node while there are at most ``limit``, else at most
    ``groups`` runs of consecutive names (sorted, the nodes of a rack or leaf usually share a
    prefix, so a run mostly stays within one). Returns (labels, {node: its label})."""
    names = list(nodes)
    if len(names) <= limit:
        return names, dict((node, node) for node in names)
    size = -(-len(names) // groups)
    labels: list[str] = []
    group_of: dict[str, str] = {}
    for start in range(0, len(names), size):
        members = names[start:start + size]
        label = '%s..%s' % (members[0], members[-1]) if len(members) > 1 else members[0]
        labels.append(label)
        group_of.update((node, label) for node in members)
    return labels, group_of


def _degraded(pair: dict[str, Any], tip: str) -> str:
    """``tip`` naming the ports of the pair below its rail's nominal rate (bench.pairs degraded_ports:
    a 1X port's cell says which port it is), unless its reasons named them already."""
    ports = pair.get('degraded_ports') or []
    if not ports:
        return tip

    def rate(value: object) -> str:
        return '%g' % value if isinstance(value, (int, float)) and not isinstance(value, bool) else '?'

    if any(str(reason).startswith('below the rail') for reason in pair.get('reasons') or []):
        return tip
    return tip + '; below the rail\'s nominal %s Gb/s: %s' % (rate(pair.get('rail_nominal_gbps')), ', '.join(
        '%s %s at %s Gb/s' % (port.get('host'), port.get('hca'), rate(port.get('rate_gbps'))) for port in ports if isinstance(port, dict)))


def _node_cells(pairs: list[dict[str, Any]], memory: object) -> dict[tuple[Any, Any], dict[str, Any]]:
    cells: dict[tuple[Any, Any], dict[str, Any]] = {}
    for p in pairs:
        value = _value(p)
        tip = _degraded(p, '%s %s memory: %s %s (%s)%s' % (
            _pair_name(p), memory, _fmt(value, 2), 'Gb/s' if p.get('bw_avg_gbps') is not None else 'us',
            p['verdict'], ('; ' + '; '.join(p.get('reasons') or [])) if p.get('reasons') else ''))
        cells[(p['server'], p['client'])] = {'value': value, 'ratio': p.get('bw_ratio'), 'verdict': p['verdict'], 'tip': tip}
    # A full mesh tests each pair once, one way: its mirror cell shows the same test
    # (a link carries both directions), unless that direction was measured too.
    for (server, client), item in list(cells.items()):
        cells.setdefault((client, server), dict(item, tip=item['tip'] + ' (measured as %s->%s)' % (server, client)))
    return cells


def group_cells(pairs: list[dict[str, Any]], group_of: dict[str, str]) -> dict[tuple[Any, Any], dict[str, Any]]:
    """Heatmap cells between groups of nodes (node_groups), for the pairs of one memory kind and
    rail: each cell the worst pair between the two groups (either direction: a link carries
    both), with the counts of tested, failed and below-threshold pairs in its tooltip."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for p in pairs:
        ends = (group_of[p['server']], group_of[p['client']])
        for cell in set((ends, ends[::-1])):
            entry = found.get(cell)
            if entry is None:
                entry = found[cell] = {'tests': 0, 'failed': 0, 'low': 0, 'worst': p}
            entry['tests'] += 1
            if p['verdict'] in ('failed', 'low'):
                entry[p['verdict']] += 1
            if _worst_key(p) < _worst_key(entry['worst']):
                entry['worst'] = p
    cells: dict[tuple[Any, Any], dict[str, Any]] = {}
    for (server, client), entry in found.items():
        worst = entry['worst']
        value = _value(worst)
        tip = _degraded(worst, '%s -> %s: %d pair test(s), %d failed, %d below threshold; worst %s: %s %s (%s)%s' % (
            server, client, entry['tests'], entry['failed'], entry['low'], _pair_name(worst), _fmt(value, 2),
            'Gb/s' if worst.get('bw_avg_gbps') is not None else 'us', worst['verdict'],
            ('; ' + '; '.join(worst.get('reasons') or [])) if worst.get('reasons') else ''))
        cells[(server, client)] = {'value': value, 'ratio': worst.get('bw_ratio'), 'verdict': worst['verdict'], 'tip': tip}
    return cells


def _points(pair: dict[str, Any]) -> list[tuple[Any, Any]]:
    points = [(s.get('bytes'), s.get('bw_avg_gbps')) for s in pair.get('sizes') or []]
    if not points and pair.get('bw_avg_gbps') is not None and pair.get('bytes'):
        points = [(pair['bytes'], pair['bw_avg_gbps'])]
    return points


def _curves(pairs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int, int]:
    """The curves of one memory kind: one per pair while there are at most MAX_CURVES, else the
    worst MAX_CURVES pairs one by one and the healthy rest as their median at each size.
    Returns (series, how many pairs the median stands for, how many pairs below threshold are left out)."""
    drawn = [p for p in pairs if _points(p)]
    healthy: list[dict[str, Any]] = []
    total = len(drawn)
    if len(drawn) > MAX_CURVES:
        ranked = sorted(drawn, key=_worst_key)
        drawn = [p for p in ranked[:MAX_CURVES] if p['verdict'] != 'ok']
        healthy = [p for p in ranked if p['verdict'] == 'ok']
    series = [{'name': _pair_name(p), 'points': _points(p),
               'colour': None if p['verdict'] == 'ok' else STATUS_COLOURS.get(p['verdict'])} for p in drawn]
    if healthy:
        by_size: dict[Any, list[Any]] = {}
        for p in healthy:
            for x, y in _points(p):
                if y is not None:
                    by_size.setdefault(x, []).append(y)
        series.append({'name': 'median of %d healthy pair test(s)' % len(healthy), 'colour': STATUS_COLOURS['ok'],
                       'points': [(x, statistics.median(ys)) for x, ys in sorted(by_size.items())]})
    return series, len(healthy), total - len(drawn) - len(healthy)


def _worst_nodes(failed: list[dict[str, Any]]) -> str:
    """The nodes in the most pair tests below threshold or failed: a bad node of a large mesh
    shows here once, not as hundreds of its pairs."""
    counts: dict[Any, dict[str, Any]] = {}
    for p in failed:
        for node in (p['server'], p['client']):
            entry = counts.setdefault(node, {'failed': 0, 'low': 0, 'rails': set(), 'peers': set()})
            entry['failed' if p['verdict'] == 'failed' else 'low'] += 1
            entry['rails'].add('%s' % (p.get('rail'),))
            entry['peers'].add(p['client'] if node == p['server'] else p['server'])
    ranked = sorted(counts.items(), key=lambda item: (-(item[1]['failed'] + item[1]['low']), '%s' % (item[0],)))
    return ('<h3>Nodes in the most pairs below threshold or failed (%d of %d)</h3><table><thead><tr><th>node</th>'
            '<th class="num">failed</th><th class="num">below threshold</th><th class="num">peers</th><th>rails</th></tr></thead>'
            '<tbody>%s</tbody></table>' % (min(WORST_NODES, len(ranked)), len(ranked), ''.join(
                '<tr><td>%s</td><td class="num">%d</td><td class="num">%d</td><td class="num">%d</td><td>%s</td></tr>' % (
                    _e(node), entry['failed'], entry['low'], len(entry['peers']), _e(', '.join(sorted(entry['rails']))))
                for node, entry in ranked[:WORST_NODES])))


def _bench_intro(bench: dict[str, Any], pairs: list[dict[str, Any]]) -> str:
    """How many pair tests, their verdicts and the thresholds they were judged with (bench.thresholds,
    never a default of this page)."""
    verdicts = bench.get('verdicts') or {}
    thresholds = bench.get('thresholds') or {}
    bw_ratio, gpu_ratio = thresholds.get('bw_ratio'), thresholds.get('gpu_ratio')
    return ('<p>%d pair test(s): %s. Thresholds: %s of the rail\'s nominal rate (the most common port rate of its model '
            'in the fleet), GPU memory within %s of host '
            'memory on the same pair.</p>' % (len(pairs), ', '.join('%d %s' % (n, v) for v, n in sorted(verdicts.items())) or 'none',
                                              _percent(bw_ratio), _percent(None if gpu_ratio is None else 1 - gpu_ratio)))


def _heatmaps(pairs: list[dict[str, Any]], nodes: list[str], kinds: list[Any]) -> list[str]:
    """A heatmap per memory kind and rail: of the nodes, or of groups of them on a large fleet (node_groups)."""
    rails = sorted(set(p.get('rail') for p in pairs), key=lambda r: (str(type(r)), r))
    by_kind: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for p in pairs:
        by_kind.setdefault((p.get('memory'), p.get('rail')), []).append(p)
    labels, group_of = node_groups(nodes)
    grouped = len(labels) < len(nodes)
    out = ['<h3>Pair bandwidth heatmaps (Gb/s; server rows, client columns)</h3>']
    if grouped:
        out.append('<p class="note">%d nodes: each row and column is a group of up to %d nodes in name order; a cell shows '
                   'the worst pair test between the two groups (its tooltip: how many were tested, failed, below '
                   'threshold). The worst pairs and nodes are listed below; every pair is in report.json (bench.pairs, '
                   'bench.matrix).</p>' % (len(nodes), -(-len(nodes) // len(labels))))
    out.append('<div class="plots">')
    for memory in kinds:
        for rail in rails:
            mine = by_kind.get((memory, rail)) or []
            cells = group_cells(mine, group_of) if grouped else _node_cells(mine, memory)
            if cells:
                out.append('<figure>%s<figcaption>%s memory, rail %s</figcaption></figure>' % (
                    heatmap(labels, cells, '%s memory rail %s' % (memory, rail), diagonal=grouped), _e(memory), _e(rail)))
    return out


def _size_curves(pairs: list[dict[str, Any]], kinds: list[Any], bw_ratio: Any) -> list[str]:
    """Bandwidth against message size, a chart per memory kind, with the threshold of the fastest rail."""
    out = ['</div><h3>Bandwidth vs message size</h3><div class="plots">']
    for memory in kinds:
        mine = [p for p in pairs if p.get('memory') == memory]
        series, median_of, not_drawn = _curves(mine)
        rates = sorted(set(rate for rate in (p.get('rail_nominal_gbps') or p.get('port_rate_gbps') for p in mine) if rate))
        hlines = [(r * bw_ratio, '%s of %g Gb/s' % (_percent(bw_ratio), r)) for r in rates[-1:] if bw_ratio is not None]
        if not series:
            continue
        single = all(len(s['points']) == 1 for s in series)
        out.append('<figure>%s<figcaption>%s memory%s%s</figcaption></figure>' % (
            line_chart(series, 'message size (bytes)', 'bandwidth (Gb/s)', hlines), _e(memory),
            ' (one message size measured: set fabric_bench_all_sizes for the whole curve)' if single else '',
            ('; the worst %d pair test(s) one by one, %d healthy ones as their median%s' % (
                len(series) - bool(median_of), median_of, (', %d more below threshold not drawn (listed below)' % not_drawn) if not_drawn else ''))
            if median_of or not_drawn else ''))
    out.append('</div>')
    return out


def _failed_pairs(pairs: list[dict[str, Any]], grouped: bool) -> list[str]:
    """The worst PAIR_ROWS pair tests below threshold or failed, and the nodes in most of them where
    not every pair is listed or drawn."""
    failed = sorted((p for p in pairs if p['verdict'] != 'ok'), key=_worst_key)
    if not failed:
        return []
    shown = failed[:PAIR_ROWS]
    out = ['<h3>Pairs below threshold or failed%s</h3><table><thead><tr><th>pair</th><th>memory</th><th>verdict</th>'
           '<th class="num">Gb/s</th><th>why</th></tr></thead><tbody>%s</tbody></table>' % (
               (', the worst %d of %d (all in report.json)' % (len(shown), len(failed))) if len(shown) < len(failed) else '',
               ''.join('<tr><td>%s</td><td>%s</td><td>%s</td><td class="num">%s</td><td>%s</td></tr>' % (
                   _e(_pair_name(p)), _e(p.get('memory')), _badge(p['verdict']), _fmt(p.get('bw_avg_gbps')),
                   _e('; '.join(p.get('reasons') or []))) for p in shown))]
    if grouped or len(shown) < len(failed):
        out.append(_worst_nodes(failed))
    return out


def _bench(bench: dict[str, Any]) -> str:
    pairs = bench.get('pairs') or []
    nodes = sorted(set(p['server'] for p in pairs) | set(p['client'] for p in pairs))
    kinds = sorted(set(p.get('memory') for p in pairs), key=lambda m: (m != 'host', str(m)))
    grouped = len(node_groups(nodes)[0]) < len(nodes)
    bw_ratio = (bench.get('thresholds') or {}).get('bw_ratio')
    out = ['<section id="bench"><h2>Pairwise benchmark</h2>', _bench_intro(bench, pairs)]
    out += _heatmaps(pairs, nodes, kinds) + _size_curves(pairs, kinds, bw_ratio) + _failed_pairs(pairs, grouped)
    out.append('</section>')
    return ''.join(out)


def _collective_local(local: dict[str, Any]) -> str:
    """Launcher local: one run per node over its own GPUs, each against its peers' median."""
    return ('<p>Every node over its own GPUs; median peak bus bandwidth %s GB/s; below %s of the peers\' '
            'median is slow.</p><table><thead><tr><th>node</th><th>verdict</th><th class="num">ranks</th>'
            '<th class="num">peak busbw GB/s</th><th class="num">of peers\' median</th><th>why</th></tr></thead>'
            '<tbody>%s</tbody></table>' % (
                _fmt(local.get('median_busbw_gbs'), 2), _percent(local.get('healthy_ratio')), ''.join(
                    '<tr><td>%s</td><td>%s</td><td class="num">%s</td><td class="num">%s</td><td class="num">%s</td>'
                    '<td>%s</td></tr>' % (
                        _e(host), _badge('low' if entry.get('slow') else (entry.get('verdict') or {}).get('status', 'unknown')),
                        _fmt(entry.get('ranks'), 0), _fmt(entry.get('max_busbw_gbs'), 2),
                        ('%.0f %%' % (100 * entry['peer_ratio'])) if entry.get('peer_ratio') is not None else '-',
                        _e('; '.join((entry.get('verdict') or {}).get('reasons') or [])))
                    for host, entry in sorted(local['hosts'].items()))))


def _collective_chart(fleet: dict[str, Any], verdict: dict[str, Any], expected: dict[str, Any]) -> str:
    """The fleet run's bus bandwidth against message size, with the expectation and the healthy line; '' without a value."""
    rows = fleet.get('results') or []
    series = []
    for place in ('out_of_place', 'in_place'):
        points = [(r.get('size_bytes'), (r.get(place) or {}).get('busbw_gbs')) for r in rows]
        if any(point[1] is not None for point in points):
            series.append({'name': '%s busbw' % place.replace('_', '-'), 'points': points})
    if not series:
        return ''
    ratio = verdict.get('healthy_ratio')
    hlines = [(expected.get('gbs'), 'expected %s GB/s' % _fmt(expected.get('gbs'), 1))]
    if expected.get('gbs') and ratio is not None:
        hlines.append((expected['gbs'] * ratio, 'healthy %.0f %%' % (100 * ratio)))
    return ('<div class="plots"><figure>%s<figcaption>bus bandwidth vs message size (fleet run)</figcaption></figure></div>'
            % line_chart(series, 'message size (bytes)', 'busbw (GB/s)', hlines))


def _collective(collective: dict[str, Any]) -> str:
    fleet = collective.get('fleet') or {}
    expected = (collective.get('expected') or {})
    verdict = fleet.get('verdict') or {}
    out = ['<section id="collective"><h2>Collective</h2>']
    if collective.get('skipped'):
        out.append('<p>Not run: %s.</p>' % _e(collective['skipped']))
    local = collective.get('nodes') or {}
    if local.get('hosts'):
        out.append(_collective_local(local))
        out.append('</section>')
        return ''.join(out)
    out.append('<p>%s %s over %s: peak bus bandwidth %s GB/s, expected %s GB/s (%s).%s</p>' % (
        _badge(verdict.get('status', 'unknown')), _e(fleet.get('benchmark') or 'collective'),
        _e(', '.join(fleet.get('hosts') or []) or 'the fleet'), _fmt(fleet.get('max_busbw_gbs'), 2),
        _fmt(expected.get('gbs'), 1), _e(expected.get('basis') or 'no expectation'),
        (' ' + _e('; '.join(verdict.get('reasons') or []))) if verdict.get('reasons') else ''))
    chart = _collective_chart(fleet, verdict, expected)
    if chart:
        out.append(chart)
    search = collective.get('search') or {}
    line = _culprit_search.report_line(search)
    if line:
        # What it named, and what it cost the user: rounds, runs, the time they took.
        out.append('<p>%s</p>' % _e(line))
    out.append('</section>')
    return ''.join(out)


def _nccl(report: dict[str, Any]) -> str:
    rows = []
    for host, entry in sorted(report['hosts'].items()):
        settings = ((entry.get('nccl') or {}).get('settings')) or {}
        reasons = ((entry.get('nccl') or {}).get('reasons')) or {}
        for name, value in sorted(settings.items()):
            rows.append('<tr><td>%s</td><td><code>%s=%s</code></td><td>%s</td></tr>' % (_e(host), _e(name), _e(value), _e(reasons.get(name))))
    if not rows:
        return ''
    return ('<section id="nccl"><h2>Recommended NCCL settings</h2><p class="note">From each host\'s facts; role nccl_conf writes '
            'them to /etc/nccl.conf.</p><table><thead><tr><th>host</th><th>setting</th><th>why</th></tr></thead><tbody>%s'
            '</tbody></table></section>' % ''.join(rows))


def _drift(report: dict[str, Any]) -> str:
    d = report.get('drift')
    if not d:
        return ''
    rows = ''.join('<tr><td>%s</td><td class="num">%s</td><td class="num">%s</td><td class="num">%s %%</td></tr>' % (
        _e(_pair_name(r) if r['what'] == 'pair' else 'collective busbw'), _fmt(r['before'], 2), _fmt(r['now'], 2), r['change_pct'])
        for r in d.get('regressions') or [])
    return ('<section id="drift"><h2>Drift since %s</h2><p>New findings: %s<br>Cleared findings: %s</p>%s</section>' % (
        _e(d.get('baseline_generated_at')), _e(', '.join(d.get('new_findings') or []) or 'none'),
        _e(', '.join(d.get('cleared_findings') or []) or 'none'),
        ('<table><thead><tr><th>regression</th><th>before</th><th>now</th><th>change</th></tr></thead><tbody>%s</tbody></table>'
         % rows) if rows else '<p>No regression beyond %s %%.</p>' % _e(d.get('regression_pct'))))


# ---------------------------------------------------------------------------- fabric view
# Switches drawn at most (a pod has 6; beyond this the page lists the bad links only).
FABRIC_MAX_SWITCHES = 64
_HEALTH_RANK = {'error': 0, 'warning': 1, 'info': 2, 'ok': 3}


def _fabric_links(fabric: dict[str, Any]) -> tuple[dict[tuple[str, ...], list[str]], list[tuple[str, Any, Any]]]:
    """({(switch, switch): the health of each link between them}, [(health, label, state) of each link not ok])."""
    ids = dict((str(k), str(v)) for k, v in (fabric.get('ids') or {}).items())
    pairs: dict[tuple[str, ...], list[str]] = {}
    bad: list[tuple[str, Any, Any]] = []
    for link in fabric.get('links') or []:
        if not isinstance(link, dict):
            continue
        a, b = ids.get(str(link.get('a')), str(link.get('a'))), ids.get(str(link.get('b')), str(link.get('b')))
        health = str(link.get('health')) if link.get('health') in _HEALTH_RANK else 'error'
        key = tuple(sorted((a, b)))
        pairs.setdefault(key, []).append(health)
        if health != 'ok':
            bad.append((health, link.get('label'), link.get('state')))
    return pairs, bad


def _fabric_svg(spines: list[str], leaves: list[str], pairs: dict[tuple[str, ...], list[str]]) -> str:
    """Spines above, leaves below, a line per leaf-spine pair coloured by its worst link; '' when there
    are none, or too many switches to draw."""
    if not spines or not leaves or len(spines) + len(leaves) > FABRIC_MAX_SWITCHES:
        return ''
    width = max(len(spines), len(leaves)) * 150 + 40
    xs = dict((name, 20 + (index + 0.5) * (width - 40) / len(spines)) for index, name in enumerate(spines))
    xl = dict((name, 20 + (index + 0.5) * (width - 40) / len(leaves)) for index, name in enumerate(leaves))
    lines = []
    for (a, b), healths in sorted(pairs.items()):
        top, low = (a, b) if a in xs else (b, a)
        if top not in xs or low not in xl:
            continue
        worst = min(healths, key=lambda h: _HEALTH_RANK[h])
        colour = STATUS_COLOURS.get(worst, STATUS_COLOURS['error'])
        lines.append('<line x1="%.0f" y1="50" x2="%.0f" y2="190" stroke="%s" stroke-width="%d"><title>%s</title></line>' % (
            xs[top], xl[low], colour, 4 if worst != 'ok' else 2,
            _e('%s - %s: %d link(s), worst %s' % (top, low, len(healths), worst))))
    boxes = ''.join('<rect x="%.0f" y="%d" width="120" height="26" rx="4" fill="#f4f4f4" stroke="#333"/>'
                    '<text x="%.0f" y="%d" text-anchor="middle" font-size="11">%s</text>' % (
                        x - 60, y - 13, x, y + 4, _e(name[:20])) for names, y in ((xs, 50), (xl, 190))
                    for name, x in names.items())
    return ('<svg class="fabric" role="img" aria-label="fabric" viewBox="0 0 %d 220" width="%d" height="220" '
            'xmlns="http://www.w3.org/2000/svg">%s%s</svg>' % (width, width, ''.join(lines), boxes))


def _fabric_view(report: dict[str, Any]) -> str:
    """Spines above, leaves below, one line per leaf-spine pair coloured by its worst link; the
    bad links listed by name. Every name came from another cluster's switches: escaped."""
    fabric = report.get('fabric')
    if not isinstance(fabric, dict):
        return ''
    if fabric.get('status') == 'not_discovered':
        return ('<section id="fabric"><h2>Fabric</h2><p class="bad">Not discovered: switch links, up-links and the subnet '
                'manager are unchecked (gpu_fabric_discover_fabric, infiniband-diags on a node with an InfiniBand port).</p></section>')
    spines = [str(n) for n in fabric.get('spines') or []]
    leaves = [str(n) for n in fabric.get('leaves') or []]
    pairs, bad = _fabric_links(fabric)
    svg = _fabric_svg(spines, leaves, pairs)
    bad.sort(key=lambda item: (_HEALTH_RANK[item[0]], str(item[1])))
    rows = ''.join('<tr class="bad"><td>%s</td><td>%s</td><td>%s</td></tr>' % (_badge(h), _e(label), _e(state))
                   for h, label, state in bad[:200])
    return ('<section id="fabric"><h2>Fabric</h2><p class="note">%d spine(s), %d leaf switch(es), discovered from %s '
            '(%s).</p>%s%s</section>' % (
                len(spines), len(leaves), _e(fabric.get('discovered_by')), _e(fabric.get('status')), svg,
                ('<table><thead><tr><th>health</th><th>link</th><th>state</th></tr></thead><tbody>%s</tbody></table>' % rows)
                if rows else '<p>Every switch-to-switch link is healthy.</p>'))


def render(report: dict[str, Any]) -> str:
    """The whole page (str)."""
    parts = [_summary(report), _hosts(report), _findings(report)]
    parts.append(_fabric_view(report))   # fabric beyond the node
    if report.get('bench'):
        parts.append(_bench(report['bench']))
    if report.get('collective'):
        parts.append(_collective(report['collective']))
    parts.append(_nccl(report))
    parts.append(_drift(report))
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">'
            '<title>GPU fabric report</title><style>%s</style></head><body><header><h1>GPU fabric report</h1>'
            '<div class="meta">%s &middot; schema %s v%s</div></header><main>%s</main><script>%s</script></body></html>\n' % (
                CSS, _e(report.get('generated_at') or ''), _e(report.get('schema')), _e(report.get('schema_version')),
                ''.join(parts), SCRIPT))
