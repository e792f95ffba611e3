# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The report stage, from the fleet model to the files and the run's verdict: what the action
fabric_report_write (playbooks/report.yml) runs, and the filters of plugins/filter/report.py
call, one code path for both.

- from_model: the nodes' facts, stage marks, rescued failures and unreachable marks (the fleet model,
  plugin_utils/fleet/_fleet_model.py) -> report.json's content;
- read_bench: the benchmark's verdicts from the bench.json the action fabric_bench_judge wrote;
- read_baseline, with_drift: the drift against a baseline report.json, read bounded, as a regular file;
- render: every file of the report (report.json, report.html, report.md, junit.xml, gpu_fabric.prom);
- verdict: why the run fails (the exit policy matched, nothing was validated), or nothing.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any, Callable, Iterator, Sequence

from ansible.module_utils.common.json import AnsibleJSONEncoder

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _paths, _printable
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _nccl_env, _profile
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _html, _report

# report.json is indented, a line per pair test, up to 100,000 pair tests (a full mesh of 112 nodes x 8
# rails x 2 memories); beyond, one line, the least the file and the memory to write it can be (a 256-node
# full mesh is 230 MB on one line; indented all through, as the standard library indents, it was 473 MB
# and took 2.4 GB more memory to write: tests/bench/controller_scale.py).
INDENT_MAX_PAIRS = 100000
# A baseline is a report.json of an earlier run; one larger than this is no report of ours.
BASELINE_LIMIT = 1 << 30
# Findings that say a node's checks did not all run: a task failed, it did not answer, it left the run.
NOT_CHECKED = F.codes_with('not_checked')
FILES = ('report.json', 'report.html', 'report.md', 'junit.xml', 'gpu_fabric.prom')
# How many ids a failure message names; report.md lists them all.
MATCHED_SHOWN = 20


def from_model(model: dict[str, Any], bench: dict[str, Any] | None = None, collective: dict[str, Any] | None = None,
               generated_at: str | None = None, options: dict[str, Any] | None = None,
               baseline: dict[str, Any] | None = None) -> dict[str, Any]:
    """report.json's content for the nodes of ``model`` (plugin_utils/fleet/_fleet_model.py read(), parts
    facts and run), in its order; ``collective``: the collective's result (None: none ran); ``baseline``: the
    report.json given as gpu_fabric_baseline ({'error': why} where it could not be read), for a lone node's
    comparison with its own earlier run (rules/_differential.py)."""
    nodes: dict[str, dict[str, Any]] = {}
    unreachable: dict[str, Any] = {}
    stages: dict[str, list[Any]] = {}
    failures: dict[str, list[dict[str, Any]]] = {}
    for host in model['hosts']:
        node = model['nodes'][host]
        facts = node['facts']
        # Tasks that failed on the node and were rescued (configure.yml, validate.yml, benchmark.yml); one marked
        # unreachable is the connection check of a node that did not answer, its message the connection's error.
        records = node['failures']
        no_answer = [r for r in records if r.get('unreachable') is True]
        if no_answer and 'ib' not in facts and 'gdr' not in facts:
            records = [r for r in records if r.get('unreachable') is not True]
            unreachable[host] = no_answer[0].get('msg')
        if records:
            failures[host] = records
        if host in unreachable:
            continue
        if 'ib' in facts or 'gdr' in facts or host in failures:
            nodes[host] = {'ib': facts.get('ib'), 'gdr': facts.get('gdr')}
            # Where read: the fabric beyond the node (ib_fabric_facts), RoCE lossless facts (roce_qos_facts), the GPUs'
            # state (gpu_state_facts) and NCCL's settings (nccl_facts).
            nodes[host].update((key, facts[key]) for key in ('fabric', 'roce', 'gpu', 'nccl') if key in facts)
            # Where the node's NCCL settings name HCAs, they say which are its compute rails (module_utils/_rails.py);
            # role fabric_bench passes the same settings to bench_node_plan, so the rails it tests are the ones judged here.
            if node['nccl_ib_hca']:
                nodes[host]['nccl_ib_hca'] = node['nccl_ib_hca']
            if node.get('expected') is not None:   # gpu_fabric_expected (diagnosis/_inventory.py)
                nodes[host]['expected'] = node['expected']
            # The stages each node got through (set at the end of each stage's play on the nodes).
            stages[host] = list(node['stages'])
        else:
            unreachable[host] = None   # no facts and no record: left the run without a word (or marked offline)
    # None: facts from elsewhere (a play without the stage marks), nothing to compare.
    staged = stages if any(stages.values()) else None
    findings = _diagnose.diagnose(nodes, bench or None, collective or None, unreachable, staged, failures, baseline)
    # What NCCL should be told on each node, from the same facts (role nccl_conf writes it) and the
    # same roles as the diagnosis and the benchmark's rails (module_utils/_rails.py node_roles).
    nccl = _nccl_env.advice(nodes)
    # Each node's speed profile (diagnosis/_profile.py), kept so that a later run can compare with this one.
    local = (collective or {}).get('nodes')
    runs = local.get('hosts') if isinstance(local, dict) else None
    profiles = dict((host, _profile.profile(node, runs.get(host) if isinstance(runs, dict) else None)) for host, node in nodes.items())
    report: dict[str, Any] = _report.build(nodes, findings, bench, collective, unreachable, generated_at, options, nccl, profiles)
    return report


def regression_pct(value: Any) -> float:
    """How far a measured value may fall, in %: a number from 0 to 100 (every ``-e key=value`` arrives
    as a string, and float() takes 'nan' and 'inf'). ValueError saying why."""
    try:
        pct = float(value)
    except (TypeError, ValueError):
        raise ValueError('regression_pct must be a number from 0 to 100, got %r' % (value,))
    if isinstance(value, bool) or not math.isfinite(pct) or not 0 <= pct <= 100:
        raise ValueError('regression_pct must be a number from 0 to 100, got %r' % (value,))
    return pct


def with_drift(report: dict[str, Any], baseline: dict[str, Any] | None, pct: float = 10.0) -> dict[str, Any]:
    """``report`` with its drift against the report ``baseline`` (a mapping). ValueError saying why."""
    return dict(report, drift=_report.drift(report, baseline, float(pct)))


def read_baseline(path: str) -> dict[str, Any]:
    """The baseline report.json at ``path``: a regular file (followed through symlinks), at most
    BASELINE_LIMIT bytes, a JSON object. ValueError saying why."""
    try:
        data = _paths.read_regular(path, BASELINE_LIMIT, follow=True)
    except _paths.TooLarge:
        raise ValueError('baseline %s is larger than %s: not a report.json' % (path, _paths.size_text(BASELINE_LIMIT)))
    except (OSError, ValueError) as exc:
        raise ValueError('baseline %s cannot be read: %s' % (path, getattr(exc, 'strerror', None) or exc))
    try:
        baseline = json.loads(data.decode('utf-8'))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError('baseline %s is not JSON: %s' % (path, exc))
    except RecursionError:  # a few kB of '[' nest deeper than Python's parser recurses
        raise ValueError('baseline %s is not a report.json: JSON nested too deep to read' % path)
    if not isinstance(baseline, dict):
        raise ValueError('baseline %s is not a report.json (a JSON %s)' % (path, type(baseline).__name__))
    return baseline


# What the standard library's encoder cannot write (a date, a mapping that is no dict) is written as
# ansible-core's AnsibleJSONEncoder (what to_nice_json uses) writes it. Not that encoder for all of it:
# from ansible-core 2.19 on, it first walks the whole value for data tags, which took more time than
# the encoding itself (bench.json of 16,384 pairs, under a profiler: 5.5 of 7.3 s; the whole judging
# task of tests/bench/controller_scale.py --ansible, 1,024 nodes, went from 8.1 to 3.2 s with the rest below).
_ANSIBLE_ENCODER = AnsibleJSONEncoder()
# Each pair test on a line of its own in an indented file: the standard library indents in pure Python,
# 1.8 s for bench.json of 16,384 pairs; a line per pair is 0.3 s, and one grep per pair.
_PAIR_ENCODER = json.JSONEncoder(sort_keys=True, separators=(', ', ': '), default=_ANSIBLE_ENCODER.default)


def _json_text(value: dict[str, Any], pairs_at: Sequence[str]) -> str:
    """``value`` as JSON text: sorted keys, indented, the pair tests of the list at the keys
    ``pairs_at`` one per line; beyond INDENT_MAX_PAIRS pair tests, all on one line."""
    holder: Any = value
    for key in pairs_at[:-1]:
        holder = holder.get(key) if isinstance(holder, dict) else None
    pairs = holder.get(pairs_at[-1]) if isinstance(holder, dict) else None
    if not isinstance(pairs, list):
        pairs = []
    if len(pairs) > INDENT_MAX_PAIRS:
        return json.dumps(value, sort_keys=True, default=_ANSIBLE_ENCODER.default) + '\n'
    if not pairs:
        return json.dumps(value, indent=4, sort_keys=True, separators=(',', ': '), default=_ANSIBLE_ENCODER.default) + '\n'
    # The document indented with a marker where the pairs go (copies of the mappings on the way to
    # them: the value itself is not changed), then the marker replaced by the pairs, one per line.
    marker = '\x00pairs %s' % uuid.uuid4().hex

    def marked(node: Any, keys: Sequence[str]) -> Any:
        if not keys:
            return marker
        copy = dict(node)
        copy[keys[0]] = marked(node[keys[0]], keys[1:])
        return copy
    text = json.dumps(marked(value, list(pairs_at)), indent=4, sort_keys=True, separators=(',', ': '),
                      default=_ANSIBLE_ENCODER.default)
    head, found, tail = text.partition(json.dumps(marker))
    if not found or json.dumps(marker) in tail:     # never: the marker is random, and \x00 is written escaped
        return json.dumps(value, indent=4, sort_keys=True, separators=(',', ': '), default=_ANSIBLE_ENCODER.default) + '\n'
    inner, outer = ' ' * 4 * (len(pairs_at) + 1), ' ' * 4 * len(pairs_at)
    lines = ',\n'.join(inner + _PAIR_ENCODER.encode(pair) for pair in pairs)
    return '%s[\n%s\n%s]%s\n' % (head, lines, outer, tail)


def report_json(report: dict[str, Any]) -> str:
    """report.json's text: indented, a line per pair test, or one line beyond INDENT_MAX_PAIRS pair tests."""
    return _json_text(report, ('bench', 'pairs'))


def bench_json(bench: dict[str, Any]) -> str:
    """bench.json's text (the benchmark's verdicts, as report.json's ``bench``): indented, a line per
    pair test, or one line beyond INDENT_MAX_PAIRS pair tests, as report.json."""
    return _json_text(bench, ('pairs',))


def read_bench(path: str) -> dict[str, Any]:
    """The benchmark's verdicts from the bench.json at ``path`` (the action fabric_bench_judge wrote
    it in this run): a regular file (followed through symlinks), at most BASELINE_LIMIT bytes, a JSON
    object. ValueError saying why."""
    try:
        data = _paths.read_regular(path, BASELINE_LIMIT, follow=True)
    except _paths.TooLarge:
        raise ValueError('%s is larger than %s: not a bench.json' % (path, _paths.size_text(BASELINE_LIMIT)))
    except (OSError, ValueError) as exc:
        raise ValueError('the benchmark results %s cannot be read: %s' % (path, getattr(exc, 'strerror', None) or exc))
    try:
        bench = json.loads(data.decode('utf-8'))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError('the benchmark results %s are not JSON: %s' % (path, exc))
    except RecursionError:  # a few kB of '[' nest deeper than Python's parser recurses
        raise ValueError('the benchmark results %s are not a bench.json: JSON nested too deep to read' % path)
    if not isinstance(bench, dict) or not isinstance(bench.get('pairs', []), list):
        raise ValueError('%s holds no benchmark results (a JSON %s)' % (path, type(bench).__name__))
    return bench


def render(report: dict[str, Any], html_path: str | None = None, timestamp: float | None = None) -> Iterator[tuple[str, bytes]]:
    """(file name, its content as UTF-8 bytes) of every file of the report, in FILES' order, each
    rendered when asked for (its text is dropped once encoded: never the text and the bytes of
    every file at once; a 256-node full mesh's report.json alone is about 230 MB); ``html_path``:
    where report.md says report.html is; ``timestamp``: the Prometheus textfile's time (seconds
    since the epoch)."""
    renderers: dict[str, Callable[[], str]] = {
        'report.json': lambda: report_json(report), 'report.html': lambda: _html.render(report),
        'report.md': lambda: _report.markdown(report, html_path), 'junit.xml': lambda: _report.junit(report),
        'gpu_fabric.prom': lambda: _report.prometheus(report, timestamp)}
    for name in FILES:
        yield name, renderers[name]().encode('utf-8', 'surrogateescape')


def _one_line(text: object, limit: int = 200) -> str:
    line = _printable.printable(' '.join(('%s' % (text,)).split()))
    return line if len(line) <= limit else line[:limit - 3] + '...'


def console_lines(report: dict[str, Any], html_path: str | None = None, roots_shown: int = 10) -> list[str]:
    """A short summary for the console: the counts, the root causes (one line each, the first
    ``roots_shown``), where the full report is."""
    summary = report['summary']
    lines = ['%d host(s): %d ok, %d with errors, %d unreachable; %d error(s), %d warning(s), %d root cause(s).'
             % (summary['hosts'], summary['hosts_ok'], summary['hosts_failed'], summary['hosts_unreachable'],
                summary['errors'], summary['warnings'], summary['roots'])]
    roots = [f for f in report['findings'] if f['explained_by'] is None and f['severity'] != 'info']
    for item in roots[:roots_shown]:
        lines.append(_one_line('%s %s on %s: %s' % (item['severity'], item['code'], item['host'] or 'the fleet', item['cause'])))
    if len(roots) > roots_shown:
        lines.append('... and %d more root cause(s) in report.md' % (len(roots) - roots_shown))
    if html_path:
        lines.append('Full report: %s' % html_path)
    # Host names, codes and causes are other people's text: nothing of it drives the terminal.
    return _printable.printable_lines(lines)


def not_checked(report: dict[str, Any]) -> list[str]:
    """The hosts whose checks did not all run (NOT_CHECKED findings), in report order."""
    seen: list[str] = []
    for item in report['findings']:
        if item['code'] in NOT_CHECKED and item.get('host') and item['host'] not in seen:
            seen.append(item['host'])
    return seen


def matched_ids(matched: Any) -> list[Any]:
    """What the exit policy matched, as the ids of the findings (other values as they are)."""
    items = matched if isinstance(matched, list) else [matched]
    return [item['id'] if isinstance(item, dict) and 'id' in item else item for item in items]


def verdict(report: dict[str, Any], expression: str | None = None) -> tuple[Any, list[str]]:
    """(matched, reasons): what the exit policy (a JMESPath expression over report.json; None or '':
    the default, any root-cause error) matched, and why the run fails - the policy matched, or no
    node was validated, which fails the run whatever the policy. No reason: the run passes.
    ValueError for an expression that is not JMESPath."""
    matched = _report.policy(report, expression or _report.DEFAULT_POLICY)
    reasons: list[str] = []
    ids: list[Any] = []
    if matched:
        ids = matched_ids(matched)
        shown = ids[:MATCHED_SHOWN]
        # Plain text, not a Python list: ansible-core 2.19 prints a failed task's message twice
        # (its error line and the result), and YAML doubled every quote of the list's repr.
        reasons.append('exit policy %s matched: %s%s' % (
            expression or '(default: any root-cause error)', ', '.join(str(item) for item in shown),
            ' and %d more (report.md lists them)' % (len(ids) - len(shown)) if len(ids) > len(shown) else ''))
    nothing = [f for f in report['findings'] if f['code'] == F.RUN_NOTHING_VALIDATED]
    if nothing and nothing[0]['id'] not in ids:   # said once: the policy's match names it already
        reasons.append(nothing[0]['cause'])
    return matched, reasons
