# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Slurm node states from ``scontrol show node -o``, and the plan that drains and resumes nodes on a report's verdicts.

Node side (the host that runs ``scontrol``): the standard library only. The verdicts come from the controller
(plugins/plugin_utils/_quarantine.py reads report.json); this decides, from the live node states, what to change:

- drain a node whose verdict is ``error`` with the reason ``gpu_fabric: <CODE> <subject>``;
- never touch a node that is drained, down or failed for a reason that is not ours (an admin's maintenance, Slurm's
  own "Not responding", NHC's ``NHC:``): the reason's prefix says whose a drain is, as NHC's ``NHC:`` does;
- resume a node only when its drain reason is ours and a report made after the drain re-checked it: its verdict is
  ok or warning, and the report ran the check that found the fault (a benchmark fault needs a benchmark);
- cap the nodes drained by us at once (``quarantine_max``, a share of the Slurm nodes, at least one).

Always DRAIN, never DOWN: Slurm lets the jobs on a drained node run to their end (MIXED+DRAIN or ALLOCATED+DRAIN,
"draining" in sinfo) and schedules nothing new there; DOWN would kill them (scontrol(1), "State=DRAIN").
"""

from __future__ import annotations

import math
import re
import time

# Our drain reasons start with this, and only ours do: what we resume and what we leave alone is decided by it.
PREFIX = 'gpu_fabric: '
# Slurm stores a reason of any length (22.05 took 5,000 characters in tests/lab/slurm.py's cluster) but shows 20
# in `sinfo -R` and 50 in `sinfo -R -l`'s default formats; 100 keeps the code and the device readable in a
# `sinfo -R -o '%100E %N'` and one node's reason short in slurmctld's state file.
REASON_MAX = 100
# A node name we pass to `scontrol update nodename=`: scontrol reads that argument as a hostlist expression, so a
# bracket or a comma in a report's host name ('n[1-99]') would name other nodes: such a name is refused.
NODE_NAME = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$')
# Reason characters we write: printable ASCII less quotes, brackets and backslash (scontrol's parser strips quotes;
# the brackets would read as the ' [user@time]' suffix scontrol appends).
_REASON_CHAR = re.compile(r'[^A-Za-z0-9 _.,:;/@+=#%<>()-]')
# ' [root@2026-11-28T09:17:41]' that scontrol appends to a reason (node_info.c prints "Reason=%s [%s@%s]"); the
# time in SLURM_TIME_FORMAT=standard, which the module sets for its scontrol calls.
_REASON_TAIL = re.compile(r'^(?P<reason>.*) \[(?P<user>[^\s@\[\]]{0,64})@(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\](?P<rest>.*)$')
# A node record's fields: 'Key=value' where a key is a word; values run to the next ' Key=' (OS=Linux 5.14 #1 SMP).
_FIELD = re.compile(r'(?:^|\s)([A-Za-z][A-Za-z0-9_:]*)=')
# Bounds on hostile output: a cluster of 100,000 nodes, and one record of 64 KiB.
MAX_NODES = 100000
MAX_RECORD = 65536
# A node state is BASE[+FLAG...]; slurm 20 and older marked flags with a character ('DOWN*', 'IDLE~'); 21.08 and
# later spell them (DOWN+NOT_RESPONDING; aws/aws-parallelcluster-node pull 350 lists the changes).
_STATE_MARKS = {'*': 'NOT_RESPONDING', '~': 'POWERED_DOWN', '#': 'POWERING_UP', '%': 'POWERING_DOWN', '$': 'MAINTENANCE', '@': 'REBOOT_REQUESTED',
                '^': 'REBOOT_ISSUED', '!': 'POWER_DOWN'}
# States in which a node is out of service for a reason of its own: a drain, a down or a failure.
OUT_OF_SERVICE = ('DRAIN', 'DOWN', 'FAIL', 'FAILING')
# The checks that can clear a fault: a benchmark fault is re-checked only by a report that ran the benchmark, a
# collective fault by one that ran the collective; every other code is a node's facts (docs/report.md, Codes).
STAGE_OF_PREFIX = (('BENCH_', 'bench'), ('COLLECTIVE_', 'collective'))
DEFAULT_SHARE = 0.1


class SlurmOutputError(ValueError):
    """scontrol's output could not be read (too large, or no node record)."""


def _records(text):
    """Each node's record as one line: ``-o`` prints one per line; without it, lines of one record are indented."""
    records = []
    for line in text.splitlines():
        if line.startswith('NodeName='):
            records.append(line)
        elif line.strip() and records and line[:1].isspace():
            records[-1] += ' ' + line.strip()
        if len(records) > MAX_NODES:
            raise SlurmOutputError('scontrol listed more than %d nodes' % MAX_NODES)
    return records


def state_flags(state):
    """('IDLE', {'DRAIN'}) from 'IDLE+DRAIN'; old marks ('DOWN*') read as their flags."""
    words = [word for word in (state or '').upper().split('+') if word]
    if not words:
        return 'UNKNOWN', set()
    base = words[0]
    flags = set(words[1:])
    while base and base[-1] in _STATE_MARKS:
        flags.add(_STATE_MARKS[base[-1]])
        base = base[:-1]
    return base or 'UNKNOWN', flags


def parse_record(record):
    """{'name', 'state', 'base', 'flags', 'reason', 'reason_user', 'reason_time'} of one node record, or None."""
    record = record[:MAX_RECORD]
    reason_at = record.find(' Reason=')
    head = record if reason_at < 0 else record[:reason_at]
    keys = list(_FIELD.finditer(head))
    fields = {}
    for index, match in enumerate(keys):
        end = keys[index + 1].start() if index + 1 < len(keys) else len(head)
        fields.setdefault(match.group(1), head[match.end():end].strip())
    name = fields.get('NodeName', '')
    if not name:
        return None
    base, flags = state_flags(fields.get('State'))
    node = {'name': name, 'state': fields.get('State', ''), 'base': base, 'flags': sorted(flags),
            'reason': None, 'reason_user': None, 'reason_time': None}
    if reason_at >= 0:
        tail = record[reason_at + len(' Reason='):]
        match = _REASON_TAIL.match(tail)
        if match:
            node.update(reason=match.group('reason').strip(), reason_user=match.group('user'), reason_time=match.group('time'))
        else:
            # No ' [user@time]' (a format we do not know): the whole rest is the reason, its time unknown.
            node['reason'] = tail.strip()
    return node


def parse_nodes(text):
    """{name: node} of ``scontrol show node [-o]`` output. Raises SlurmOutputError when no node is found."""
    nodes = {}
    for record in _records(text or ''):
        node = parse_record(record)
        if node:
            nodes.setdefault(node['name'], node)
    if not nodes:
        raise SlurmOutputError('scontrol listed no node')
    return nodes


def out_of_service(node):
    """True when the node is drained, down or failed (whoever did it)."""
    flags = set(node['flags']) | {node['base']}
    return any(state in flags for state in OUT_OF_SERVICE)


def ours(node):
    """True when the node's reason is one we wrote."""
    return (node.get('reason') or '').startswith(PREFIX)


def printable(text, limit):
    """``text`` with every character we do not write replaced by '?', cut to ``limit`` characters."""
    text = _REASON_CHAR.sub('?', ' '.join(str(text or '').split()))
    return text[:limit]


def reason(code, subject, more=0):
    """'gpu_fabric: IB_PORT_DOWN mlx5_1/1 (+2 more)' within REASON_MAX characters."""
    tail = ' (+%d more)' % more if more else ''
    text = printable('%s%s %s' % (PREFIX, code, subject or ''), REASON_MAX - len(tail)).rstrip() + tail
    return text


def reason_code(text):
    """The finding code of one of our reasons ('IB_PORT_DOWN'), or ''."""
    if not (text or '').startswith(PREFIX):
        return ''
    words = text[len(PREFIX):].split()
    return words[0] if words else ''


def stage_of(code):
    """The check that found ``code``: 'bench', 'collective' or 'facts'."""
    for prefix, stage in STAGE_OF_PREFIX:
        if code.startswith(prefix):
            return stage
    return 'facts'


def cap(share, total):
    """How many nodes may be drained by us at once: ``share`` of ``total``, rounded down, at least one."""
    return max(1, int(math.floor(share * total + 1e-9)))


def local_epoch(stamp):
    """Seconds since the epoch of scontrol's local time '2026-11-28T09:17:41', or None."""
    try:
        return time.mktime(time.strptime(stamp, '%Y-%m-%dT%H:%M:%S'))
    except (TypeError, ValueError, OverflowError):
        return None


def _drain_reason(verdict):
    """The verdict's reason as we write it: ours (the prefix), printable, bounded - whoever built the verdict."""
    text = printable(verdict.get('reason'), REASON_MAX)
    return text if text.startswith(PREFIX) and len(text) > len(PREFIX) else reason('ERROR', 'see report.json')


def _resume_check(node, verdict, report_time):
    """(True, why) when a report re-checked our drained node and it passed, else (False, why not)."""
    if verdict is None:
        return False, 'not in the report: not re-checked'
    status = verdict.get('status')
    if status not in ('ok', 'warning'):
        return False, 'still %s in the report' % status
    code = reason_code(node.get('reason'))
    stage = stage_of(code)
    if stage not in (verdict.get('stages') or []):
        return False, 'the report did not run the %s check that found %s: not re-checked' % (stage, code)
    drained_at = local_epoch(node.get('reason_time'))
    if drained_at is None or report_time is None:
        return False, 'the time of the drain or of the report is unknown: not re-checked'
    if report_time <= drained_at:
        return False, 'the report (%s) is not newer than the drain (%s): not re-checked' % (
            time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(report_time)), node.get('reason_time'))
    return True, 'the report made after the drain says %s' % status


def plan(nodes, verdicts, share=DEFAULT_SHARE, report_time=None):
    """What to do: {'actions': [{'node', 'action' (drain|resume), 'reason', 'why'}], 'nodes': [one line per node of
    the report and per node drained by us: {'node', 'outcome', 'why', ...}], 'cap', 'total', 'capped': [names]}.

    ``verdicts``: {node: {'status', 'reason', 'finding', 'stages'}} (plugin_utils/_quarantine.py).
    """
    total = len(nodes)
    limit = cap(share, total)
    outcomes = {}
    actions = []
    held = sorted(name for name, node in nodes.items() if out_of_service(node) and ours(node))
    staying = set(held)
    # Resume first: a node that passed its re-check leaves the quarantine and makes room under the cap.
    for name in held:
        node = nodes[name]
        verdict = verdicts.get(name)
        if verdict is not None and verdict.get('status') == 'error':
            want = _drain_reason(verdict)
            if want != node['reason']:
                actions.append({'node': name, 'action': 'drain', 'reason': want, 'why': 'a new finding: %s' % verdict.get('finding')})
                outcomes[name] = {'outcome': 'drained', 'why': 'already drained by gpu_fabric; the reason updated to the report\'s finding'}
            else:
                outcomes[name] = {'outcome': 'kept', 'why': 'already drained by gpu_fabric for this finding'}
            continue
        passed, why = _resume_check(node, verdict, report_time)
        if passed:
            actions.append({'node': name, 'action': 'resume', 'reason': None, 'why': why})
            outcomes[name] = {'outcome': 'resumed', 'why': why}
            staying.discard(name)
        else:
            outcomes[name] = {'outcome': 'kept', 'why': why}
    room = limit - len(staying)
    capped = []
    # New drains in node name order up to the cap: the same nodes on every run of the same report.
    for name in sorted(verdicts):
        if name in outcomes:
            continue
        verdict = verdicts[name]
        if verdict.get('status') != 'error':
            outcomes[name] = {'outcome': 'left', 'why': 'verdict %s' % verdict.get('status')}
            continue
        node = nodes.get(name)
        if not NODE_NAME.match(name):
            outcomes[name] = {'outcome': 'skipped', 'why': 'not a Slurm node name (a hostlist expression would name other nodes)'}
        elif node is None:
            outcomes[name] = {'outcome': 'skipped', 'why': 'not a node of this Slurm cluster'}
        elif out_of_service(node):
            outcomes[name] = {'outcome': 'untouched', 'why': 'already %s for another reason: %s' % (node['state'], node.get('reason') or '(none)')}
        elif room <= 0:
            capped.append(name)
            outcomes[name] = {'outcome': 'capped', 'why': 'the quarantine cap (%d of %d nodes) is reached' % (limit, total)}
        else:
            room -= 1
            actions.append({'node': name, 'action': 'drain', 'reason': _drain_reason(verdict), 'why': verdict.get('finding')})
            busy = node['base'] in ('ALLOCATED', 'MIXED', 'COMPLETING')
            outcomes[name] = {'outcome': 'drained', 'why': verdict.get('finding'),
                              'note': 'jobs running: DRAINING until they end' if busy else ''}
    lines = []
    for name in sorted(outcomes):
        entry = dict(outcomes[name], node=name)
        entry['finding'] = (verdicts.get(name) or {}).get('finding')
        entry['state_before'] = (nodes.get(name) or {}).get('state')
        entry['reason_before'] = (nodes.get(name) or {}).get('reason')
        lines.append(entry)
    return {'actions': actions, 'nodes': lines, 'cap': limit, 'total': total, 'capped': capped}


def describe(node):
    """One line of a node's state for the diff: 'n1 IDLE+DRAIN gpu_fabric: IB_PORT_DOWN mlx5_1/1'."""
    if node is None:
        return ''
    return ('%s %s %s' % (node['name'], node['state'], node.get('reason') or '')).rstrip()
