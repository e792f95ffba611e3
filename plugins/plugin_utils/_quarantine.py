# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The verdicts a scheduler acts on, from a report.json (docs/report.md), and the lines that say what was done.

Controller side: role fabric_quarantine reads the report with ``read``, hands ``verdicts`` to the module
slurm_node_state (which decides against the live node states, plugins/module_utils/_slurm.py), and writes the
module's outcome to quarantine.json beside the report with ``record``.

A node's verdict is its ``hosts.<name>.status``. Its drain reason names the finding that is most to blame: the
first of its root causes (``roots``) of severity error in the report's order (bottom-up: a port before the
benchmark it slowed), else its first error finding; ``(+N more)`` counts the other error roots.
"""

from __future__ import annotations

import datetime
import json

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _paths, _slurm

SCHEMA = 'hpc.gpu_fabric/report'
# A report.json of ours for 10,000 nodes is far below this; a larger file is no report.
REPORT_LIMIT = 1 << 30
# The hosts of one report we act on.
MAX_HOSTS = _slurm.MAX_NODES


class ReportError(ValueError):
    """The report cannot be acted on (missing, not ours, too large)."""


def load(path):
    """The report at ``path``: a regular file of ours, read bounded."""
    try:
        data = _paths.read_regular(path, REPORT_LIMIT, follow=True)
    except _paths.TooLarge:
        raise ReportError('%s is larger than %d bytes: no report of ours' % (path, REPORT_LIMIT))
    except (OSError, ValueError) as error:
        raise ReportError('cannot read the report %s: %s' % (path, getattr(error, 'strerror', None) or error))
    try:
        report = json.loads(data.decode('utf-8'))
    except (UnicodeDecodeError, ValueError) as error:
        raise ReportError('%s is not JSON: %s' % (path, error))
    except RecursionError:  # a few kB of '[' nest deeper than Python's parser recurses
        raise ReportError('%s is not a report of hpc.gpu_fabric: JSON nested too deep to read' % path)
    if not isinstance(report, dict) or report.get('schema') != SCHEMA:
        raise ReportError('%s is not a report of hpc.gpu_fabric (schema %s)' % (path, SCHEMA))
    return report


def report_epoch(report):
    """report.json's generated_at (ISO 8601, UTC, no offset) in seconds since the epoch, or None."""
    stamp = report.get('generated_at')
    if not isinstance(stamp, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(stamp.replace('Z', '+00:00'))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def _stages(report, host):
    """The checks the report ran for ``host``: facts (when it answered), bench, collective (when they ran)."""
    stages = []
    if host.get('status') != 'unreachable':
        stages.append('facts')
    if report.get('bench'):
        stages.append('bench')
    if report.get('collective'):
        stages.append('collective')
    return stages


def verdicts(report):
    """{node: {'status', 'reason', 'finding', 'stages'}} of every host of the report."""
    hosts = report.get('hosts')
    if not isinstance(hosts, dict):
        raise ReportError('the report has no hosts')
    findings = {}
    order = {}
    for index, finding in enumerate(report.get('findings') or []):
        if isinstance(finding, dict) and isinstance(finding.get('id'), str):
            findings[finding['id']] = finding
            order[finding['id']] = index
    found = {}
    for name, host in list(hosts.items())[:MAX_HOSTS]:
        if not isinstance(host, dict):
            continue
        status = host.get('status') if host.get('status') in ('ok', 'warning', 'error', 'unreachable') else 'unknown'
        entry = {'status': status, 'reason': '', 'finding': None, 'stages': _stages(report, host)}
        if status == 'error':
            def errors(ids):
                listed = [findings[i] for i in ids if isinstance(i, str) and i in findings and findings[i].get('severity') == 'error']
                return sorted(listed, key=lambda f: order[f['id']])
            blamed = errors(host.get('roots') or []) or errors(host.get('findings') or [])
            if blamed:
                first = blamed[0]
                entry['finding'] = first['id']
                entry['reason'] = _slurm.reason(str(first.get('code') or 'ERROR'), str(first.get('subject') or ''), len(blamed) - 1)
            else:
                entry['reason'] = _slurm.reason('ERROR', 'see report.json')
        found[str(name)] = entry
    return found


def read(path):
    """{'verdicts', 'report_time', 'generated_at'} of the report at ``path``."""
    report = load(path)
    return {'verdicts': verdicts(report), 'report_time': report_epoch(report), 'generated_at': report.get('generated_at')}


def lines(result, scheduler='slurm', check_mode=False):
    """The console lines of a run of the module: one per node acted on or left, then the cap."""
    would = 'would be ' if check_mode else ''
    out = []
    for entry in result.get('nodes') or []:
        outcome = entry.get('outcome')
        words = {'drained': 'drained', 'resumed': 'resumed', 'kept': 'kept drained', 'capped': 'NOT drained (cap)',
                 'untouched': 'left alone', 'skipped': 'skipped', 'left': 'in service'}.get(outcome, outcome)
        if outcome == 'left':
            continue
        if check_mode and outcome in ('drained', 'resumed'):
            words = would + words
        note = entry.get('note') or ''
        text = '%s: %s - %s%s' % (entry.get('node'), words, entry.get('why') or '', ' (%s)' % note if note else '')
        after = entry.get('state_after')
        if after and not check_mode:
            text += ' [%s now %s]' % (scheduler, after)
        out.append(text)
    capped = result.get('capped') or []
    out.append('quarantine cap: %d of %d %s nodes may be drained at once%s' % (
        result.get('cap', 0), result.get('total', 0), scheduler,
        '; %d node(s) with an error verdict NOT drained: %s' % (len(capped), ', '.join(capped)) if capped else ''))
    if not out[:-1]:
        out.insert(0, 'no node to drain or resume')
    return out


def record(result, report_path, generated_at, scheduler='slurm', share=None, check_mode=False):
    """quarantine.json's content: what was done (or would be, in check mode) and why."""
    return {
        'schema': 'hpc.gpu_fabric/quarantine', 'schema_version': 1,
        'scheduler': scheduler, 'report': report_path, 'report_generated_at': generated_at,
        'check_mode': bool(check_mode), 'quarantine_max': share,
        'cap': result.get('cap'), 'total': result.get('total'), 'capped': result.get('capped') or [],
        'nodes': [{key: entry.get(key) for key in ('node', 'outcome', 'why', 'finding', 'note', 'state_before', 'reason_before',
                                                   'state_after', 'reason_after')}
                  for entry in result.get('nodes') or [] if entry.get('outcome') != 'left'],
    }
