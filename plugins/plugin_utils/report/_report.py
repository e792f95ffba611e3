# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""report.json (the one source of truth, versioned) and what is rendered from it: a
Markdown summary, JUnit XML, a Prometheus textfile; drift against a baseline report and
the exit policy (a JMESPath expression over the report).

Schema (SCHEMA_VERSION 1; docs/report.md describes every field):
  schema, schema_version, generated_at, options
  summary: hosts, hosts_ok, hosts_failed, hosts_unreachable, errors, warnings, roots
  hosts: {host: {status: ok|warning|error|unreachable, ports_active, ports, gpus, gdr_ready, roots: [ids], nccl, profile}}
  findings: [{id, code, layer, severity, host, hosts?, subject, evidence, cause, remedy, at, path, explained_by}]
  bench: bench_report's output or null;  collective: fabric_collective's outcome or null
  drift: null, or {baseline_generated_at, new_findings, cleared_findings, regressions}
"""

from __future__ import annotations

import re
from typing import Any, Iterable
from xml.sax.saxutils import escape as _xml_escape, quoteattr as _xml_quoteattr

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _printable
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _culprit_search
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _fabric

SCHEMA = 'hpc.gpu_fabric/report'
SCHEMA_VERSION = 1
CHECKS = ('ib', 'ib_gpu', 'host', 'benchmark', 'collective')
# Default exit policy: the run fails on any error that is a root cause; the symptoms it explains
# do not count again (docs/report.md, "Exit policy").
DEFAULT_POLICY = "findings[?severity=='error' && explained_by==null]"
# A finding as the diagnosis makes it (plugin_utils/diagnosis/_findings.py finding()).
Finding = dict[str, Any]


def _host_summary(ib: Any, gdr: Any) -> dict[str, Any]:
    ports = [p for d in (ib or {}).get('devices') or [] for p in d.get('ports') or []]
    return {'ports': len(ports), 'ports_active': sum(1 for p in ports if p.get('state') == 'ACTIVE'),
            'gpus': len((gdr or {}).get('gpus') or []), 'gdr_ready': (gdr or {}).get('gdr_ready')}


def _concerns(item: Finding, host: str, by_id: dict[str, Finding]) -> bool:
    """Does finding ``item`` concern ``host``? A pair's symptom counts against both nodes until a
    root on one of them explains it: then only that node is to blame (a healthy peer of a broken
    node stays ok)."""
    if host == item.get('host'):
        return True
    if host not in (item.get('hosts') or []):
        return False
    root = by_id.get(item['explained_by']) if item['explained_by'] else None
    return root is None or root.get('host') in (None, host) or host in (root.get('hosts') or [])


def _status(mine: list[Finding], unreachable: bool) -> str:
    severities = set(f['severity'] for f in mine)
    if unreachable:
        return 'unreachable'
    return 'error' if 'error' in severities else 'warning' if 'warning' in severities else 'ok'


def _summary(hosts: dict[str, dict[str, Any]], findings: list[Finding]) -> dict[str, int]:
    statuses = [h['status'] for h in hosts.values()]
    return {'hosts': len(hosts), 'hosts_ok': statuses.count('ok'), 'hosts_failed': statuses.count('error'),
            'hosts_unreachable': statuses.count('unreachable'),
            'errors': sum(1 for f in findings if f['severity'] == 'error'),
            'warnings': sum(1 for f in findings if f['severity'] == 'warning'),
            'roots': sum(1 for f in findings if f['explained_by'] is None and f['severity'] != 'info')}


def build(nodes: dict[str, Any], findings: list[Finding], bench: dict[str, Any] | None = None, collective: dict[str, Any] | None = None,
          unreachable: Iterable[str] | None = None, generated_at: str | None = None, options: dict[str, Any] | None = None,
          nccl: dict[str, Any] | None = None, profiles: dict[str, Any] | None = None) -> dict[str, Any]:
    """``nodes``: {host: {'ib', 'gdr'}} of the hosts that answered; ``findings`` from _diagnose;
    ``nccl``: {host: _nccl_env.recommend(...)}; ``profiles``: {host: diagnosis/_profile.py profile()}."""
    hosts = {}
    by_id = dict((f['id'], f) for f in findings)
    lost = set(unreachable or [])
    for host in sorted(set(nodes) | lost):
        entry = _host_summary((nodes.get(host) or {}).get('ib'), (nodes.get(host) or {}).get('gdr'))
        mine = [f for f in findings if _concerns(f, host, by_id)]
        entry['status'] = _status(mine, host in lost)
        entry['roots'] = [f['id'] for f in mine if f['explained_by'] is None and f['severity'] != 'info']
        # The one place that says which findings concern a host: its status above, and every
        # rendering's per-host view (junit's cases) read this list, never a rule of their own.
        entry['findings'] = [f['id'] for f in mine]
        if (nccl or {}).get(host) is not None:
            entry['nccl'] = (nccl or {})[host]
        if (profiles or {}).get(host) is not None:
            entry['profile'] = (profiles or {})[host]
        hosts[host] = entry
    return {'schema': SCHEMA, 'schema_version': SCHEMA_VERSION, 'generated_at': generated_at, 'options': options or {},
            'summary': _summary(hosts, findings), 'hosts': hosts, 'findings': findings, 'bench': bench or None,
            'fabric': _fabric.summary(nodes, findings),   # fabric beyond the node
            'collective': collective or None, 'drift': None}


def drift(report: dict[str, Any], baseline: dict[str, Any] | None, regression_pct: float = 10.0) -> dict[str, Any] | None:
    """New and cleared findings (by id) and measured values that fell by more than
    ``regression_pct`` % since the baseline report: pair bandwidth per (server, client,
    rail, memory), the collective's peak busbw."""
    if not baseline:
        return None
    if baseline.get('schema') != SCHEMA:
        raise ValueError('the baseline is not a %s report (schema %r)' % (SCHEMA, baseline.get('schema')))
    now = dict((f['id'], f) for f in report.get('findings') or [])
    then = dict((f['id'], f) for f in baseline.get('findings') or [])
    regressions: list[dict[str, Any]] = []

    def pairs(rep: dict[str, Any]) -> dict[tuple[Any, ...], Any]:
        return dict(((p['server'], p['client'], p.get('rail'), p.get('memory')), p.get('bw_avg_gbps'))
                    for p in ((rep.get('bench') or {}).get('pairs') or []))

    old_pairs = pairs(baseline)
    for key, value in sorted(pairs(report).items(), key=lambda item: str(item[0])):
        before = old_pairs.get(key)
        if before and value is not None and value < before * (1 - regression_pct / 100.0):
            regressions.append({'what': 'pair', 'server': key[0], 'client': key[1], 'rail': key[2], 'memory': key[3],
                                'before': before, 'now': value, 'change_pct': round(100.0 * (value - before) / before, 1)})
    busbw = [((rep.get('collective') or {}).get('fleet') or {}).get('max_busbw_gbs') for rep in (baseline, report)]
    if busbw[0] and busbw[1] is not None and busbw[1] < busbw[0] * (1 - regression_pct / 100.0):
        regressions.append({'what': 'collective', 'before': busbw[0], 'now': busbw[1],
                            'change_pct': round(100.0 * (busbw[1] - busbw[0]) / busbw[0], 1)})
    return {'baseline_generated_at': baseline.get('generated_at'), 'regression_pct': regression_pct,
            'new_findings': sorted(i for i in now if i not in then), 'cleared_findings': sorted(i for i in then if i not in now),
            'regressions': regressions}


def policy(report: dict[str, Any], expression: str = DEFAULT_POLICY) -> Any:
    """What the exit policy matched (empty, null or false: the run passes)."""
    import jmespath  # controller-side only (requirements: jmespath)
    try:
        return jmespath.search(expression, report)
    except jmespath.exceptions.JMESPathError as exc:
        raise ValueError('exit policy %r is not a valid JMESPath expression: %s' % (expression, exc))


# ---------------------------------------------------------------------------- renderers

# Host names, subjects and causes carry what nodes and tools printed (an ANSI colour code, a
# NUL, a U+202E, a '<script>' in a perftest log): every renderer makes them printable first
# (module_utils/_printable.py: controls, format and bidirectional characters and lone surrogates
# as their visible escapes, which XML 1.0 section 2.2 'Char' then admits too), then escapes them
# for its own format.
# What CommonMark gives a meaning to inside a paragraph or a table cell ('|' ends a GFM cell);
# '<', '>' and '&' become entities, so no HTML inside the Markdown survives either.
# An '_' between two letters or digits opens no emphasis (CommonMark 6.2, left-flanking '_'),
# so GDR_ACS_REDIRECT stays readable. '(' and '!' only mean something next to '[' or ']', which
# are escaped, so '1 GPU(s)' stays as written.
_MD_SPECIAL_RE = re.compile(r'([\\`*\[\]#|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))')
_CODE_RE = re.compile(r'^[\w.:-]+$')


def _clean(value: object) -> str:
    return _printable.printable('%s' % (value,), _printable.LINES)


def escape(value: object) -> str:
    return _xml_escape(_clean(value))


def quoteattr(value: object) -> str:
    return _xml_quoteattr(_clean(value))


def _md(value: object) -> str:
    """Text for a Markdown paragraph or table cell: one line, nothing taken as markup."""
    text = _clean(value).replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')
    return _MD_SPECIAL_RE.sub(r'\\\1', ' '.join(text.split()))


def _md_code(value: object) -> str:
    return '`%s`' % value if _CODE_RE.match('%s' % (value,)) else _md(value)


def _md_hosts(report: dict[str, Any]) -> list[str]:
    lines = ['| host | status | ports active | GPUs | GPUDirect RDMA |', '|---|---|---|---|---|']
    for host, entry in sorted(report['hosts'].items()):
        gdr = {True: 'ready', False: 'not ready', None: '-'}[entry['gdr_ready']]
        lines.append('| %s | %s | %s/%s | %s | %s |' % tuple(_md(v) for v in (
            host, entry['status'], entry['ports_active'], entry['ports'], entry['gpus'], gdr)))
    return lines


def _md_roots(report: dict[str, Any]) -> list[str]:
    roots = [f for f in report['findings'] if f['explained_by'] is None and f['severity'] != 'info']
    if not roots:
        return []
    lines = ['', '## Root causes', '']
    for item in roots:
        symptoms = [f for f in report['findings'] if f['explained_by'] == item['id']]
        lines.append('- **%s** %s %s on %s %s: %s. Fix: %s.%s' % (
            _md(item['severity']), _md(item['layer']), _md_code(item['code']), _md(item['host'] or 'the fleet'),
            _md(item['subject'] or ''), _md(item['cause']), _md(item['remedy']),
            (' Explains %d symptom(s): %s.' % (len(symptoms), ', '.join(
                _md(code) for code in sorted(set('%s' % s['code'] for s in symptoms))))) if symptoms else ''))
    return lines


def _md_fabric(report: dict[str, Any]) -> list[str]:
    """Fabric beyond the node: which cable or switch port to look at."""
    lines = []
    fabric = [f for f in report['findings'] if str(f.get('code', '')).startswith('FABRIC_') and f['severity'] != 'info']
    if (report.get('fabric') or {}).get('status') == 'not_discovered':
        lines += ['', 'Fabric beyond the nodes (switch links, up-links, subnet manager): not discovered, unchecked.']
    if fabric:
        lines += ['', '## Fabric links and switch ports', '']
        lines += ['- %s %s: %s' % (_md_code(f['code']), _md(f['subject'] or ''), _md(f['cause'])) for f in fabric[:50]]
    return lines


def _md_drift(drift_of: dict[str, Any] | None) -> list[str]:
    if not drift_of:
        return []
    return ['', '## Drift since %s' % _md(drift_of['baseline_generated_at']), '',
            '- new findings: %s' % (', '.join(_md(f) for f in drift_of['new_findings']) or 'none'),
            '- cleared findings: %s' % (', '.join(_md(f) for f in drift_of['cleared_findings']) or 'none'),
            '- regressions beyond %g %%: %d' % (drift_of['regression_pct'], len(drift_of['regressions']))]


def markdown(report: dict[str, Any], html_path: str | None = None) -> str:
    summary = report['summary']
    lines = ['# GPU fabric report', '',
             '%d host(s): %d ok, %d with errors, %d unreachable; %d error(s), %d warning(s), %d root cause(s).'
             % (summary['hosts'], summary['hosts_ok'], summary['hosts_failed'], summary['hosts_unreachable'],
                summary['errors'], summary['warnings'], summary['roots']), '']
    if html_path:
        lines += ['Full report: %s' % _md(html_path), '']
    lines += _md_hosts(report) + _md_roots(report) + _md_fabric(report)
    search = _culprit_search.report_line(((report.get('collective') or {}).get('search')))
    if search:
        lines += ['', '## Culprit search', '', _md(search)]
    lines += _md_drift(report.get('drift'))
    return '\n'.join(lines) + '\n'


def _junit_body(report: dict[str, Any], host: str, concerning: list[Finding], check: str) -> str:
    """The body of host ``host``'s test case of ``check``: '', a failure or an error."""
    mine = [f for f in concerning if f['layer'] == check and f['severity'] in ('error', 'warning')]
    if host != 'fleet' and report['hosts'][host]['status'] == 'unreachable':
        # Why, where the run kept it (HOST_UNREACHABLE's cause names the connection's error).
        why = [f['cause'] for f in concerning if f['code'] == 'HOST_UNREACHABLE'] or ['no facts came back from %s' % host]
        return '<error message="host unreachable">%s</error>' % escape(why[0])
    if not mine:
        return ''
    text = '\n'.join('%s %s %s: %s' % (f['severity'], f['code'], f['subject'] or '', f['cause']) for f in mine)
    return '<failure message=%s>%s</failure>' % (quoteattr('%d finding(s): %s' % (
        len(mine), ', '.join(sorted(set(f['code'] for f in mine))))), escape(text))


def junit(report: dict[str, Any]) -> str:
    """One test case per host x check (layer); fleet-wide findings under the host 'fleet'.
    A case fails when it has an error or warning finding; unreachable hosts error. Which findings
    concern a host is build()'s decision (hosts.<name>.findings, which its status is made of): a
    host that report.md and report.html call ok passes every case here."""
    cases = []
    by_id = dict((f['id'], f) for f in report['findings'])
    hosts = sorted(report['hosts']) + ['fleet']
    for host in hosts:
        if host == 'fleet':
            concerning = [f for f in report['findings'] if not f.get('host') and not f.get('hosts')]
        else:
            concerning = [by_id[i] for i in report['hosts'][host].get('findings') or [] if i in by_id]
        for check in CHECKS:
            body = _junit_body(report, host, concerning, check)
            cases.append('  <testcase classname=%s name=%s>%s</testcase>' % (quoteattr('gpu_fabric.' + host), quoteattr(check), body))
    failures = sum(1 for c in cases if '<failure' in c)
    errors = sum(1 for c in cases if '<error' in c)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="gpu_fabric" tests="%d" failures="%d" errors="%d">\n%s\n'
            '</testsuite>\n' % (len(cases), failures, errors, '\n'.join(cases)))


def _label(value: object) -> str:
    # Text exposition format 0.0.4: a label value is UTF-8 with '\\', '"' and line feed escaped
    # as '\\\\', '\\"' and '\\n' (prometheus docs, exposition_formats.md 'Text format details').
    return '"%s"' % _clean(value).replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')


def _labels(**labels: object) -> str:
    return '{%s}' % ','.join('%s=%s' % (k, _label(v)) for k, v in sorted(labels.items()) if v is not None)


def prometheus(report: dict[str, Any], timestamp: float | None = None) -> str:
    """Textfile for node_exporter's textfile collector (text exposition format 0.0.4)."""
    out = ['# HELP gpu_fabric_host_status 0 ok, 1 warning, 2 error, 3 unreachable.', '# TYPE gpu_fabric_host_status gauge']
    codes = {'ok': 0, 'warning': 1, 'error': 2, 'unreachable': 3}
    for host, entry in sorted(report['hosts'].items()):
        out.append('gpu_fabric_host_status%s %d' % (_labels(host=host), codes[entry['status']]))
    out += ['# HELP gpu_fabric_findings Findings by host, code and severity (root causes and symptoms).',
            '# TYPE gpu_fabric_findings gauge']
    counted: dict[tuple[str, str, str, str], int] = {}
    for item in report['findings']:
        key = (item.get('host') or 'fleet', item['code'], item['severity'], 'root' if item['explained_by'] is None else 'symptom')
        counted[key] = counted.get(key, 0) + 1
    for (host, code, severity, kind), count in sorted(counted.items()):
        out.append('gpu_fabric_findings%s %d' % (_labels(host=host, code=code, severity=severity, kind=kind), count))
    pairs = ((report.get('bench') or {}).get('pairs')) or []
    if pairs:
        out += ['# HELP gpu_fabric_pair_bandwidth_gbps perftest average bandwidth of each pair, rail and memory.',
                '# TYPE gpu_fabric_pair_bandwidth_gbps gauge']
        for pair in pairs:
            if pair.get('bw_avg_gbps') is not None:
                labels = _labels(server=pair['server'], client=pair['client'], rail=pair.get('rail'), memory=pair.get('memory'))
                out.append('gpu_fabric_pair_bandwidth_gbps%s %s' % (labels, repr(float(pair['bw_avg_gbps']))))
    fleet = ((report.get('collective') or {}).get('fleet')) or {}
    if fleet.get('max_busbw_gbs') is not None:
        out += ['# HELP gpu_fabric_collective_busbw_gbs Peak bus bandwidth of the fleet-wide collective run.',
                '# TYPE gpu_fabric_collective_busbw_gbs gauge',
                'gpu_fabric_collective_busbw_gbs%s %s' % (_labels(benchmark=fleet.get('benchmark')), repr(float(fleet['max_busbw_gbs'])))]
    if timestamp is not None:
        out += ['# HELP gpu_fabric_report_timestamp_seconds When the report was made.',
                '# TYPE gpu_fabric_report_timestamp_seconds gauge', 'gpu_fabric_report_timestamp_seconds %d' % int(timestamp)]
    return '\n'.join(out) + '\n'
