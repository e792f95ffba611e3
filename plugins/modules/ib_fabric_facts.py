#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: ib_fabric_facts
short_description: The InfiniBand fabric beyond the node (switches, links, subnet manager, switch port counters)
version_added: 0.2.0
description:
  - Runs on ONE node with an InfiniBand port the infiniband-diags views of the whole fabric - C(iblinkinfo)
    and C(ibnetdiscover) (switches, CAs and the links between their ports with width, speed and state),
    C(sminfo) (the master subnet manager, and every SM LID given in O(sm_lids)), C(saquery SMIR) (the
    SMInfoRecord of every subnet manager the master knows, standbys included, each then asked with C(sminfo)),
    and C(perfquery -x -l) of every switch twice, O(interval) seconds apart (the switch port counters, with
    the time of each read).
  - C(ibqueryerrors) over the whole subnet with each counter read (every port of every switch and CA
    with a non-zero error counter), so that the error counters of every port are judged over the window,
    not only those of the links the pair tests crossed; with the node's time since boot and O(link_grace),
    the bring-up window in which counter rises are information. Where C(ibqueryerrors) is not installed
    (or not saved), the subnet is not read and the C(perfquery) sweep of the switches stands for it.
  - Every line of a tool's output that no pattern read is counted in RV(ansible_facts.gpu_fabric_ib_fabric.unread)
    and makes the status C(partial) - a fabric built from input that was not read is never C(ok).
  - Records past what a subnet holds (SM records past 64, port lines past 8 per unicast LID, nodes past the 0xBFFF
    unicast LIDs, error lines past 50, a port's second counter block; module_utils/_ibdiag.py) are not kept;
    they are counted in RV(ansible_facts.gpu_fabric_ib_fabric.unread) (C(dropped), and a line that names them),
    and make the status C(partial). The byte cap (64 MiB a saved output) is no cap on records.
  - Each tool runs with an argument list and a timeout. A tool that is not installed, fails or times out is
    said in RV(ansible_facts.gpu_fabric_ib_fabric.tools); a node without an InfiniBand port returns
    C(status=no_ib_port). Neither fails the task.
  - With O(from_log), reads saved outputs from a directory instead of running anything.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - hpc.gpu_fabric.root
  - hpc.gpu_fabric.root.facts
options:
  sm_lids:
    description:
      - LIDs of subnet managers to ask besides the one this node's ports see (for example every C(sm_lid)
        the nodes' C(gpu_fabric_ib) facts name), so that a second master is found.
    type: list
    elements: int
    default: []
  interval:
    description:
      - Seconds between the two counter reads (rates need two reads); C(0) reads once. At most 3600; NaN and infinity are refused.
    type: float
    default: 5
  timeout:
    description:
      - Seconds each tool may run.
    type: int
    default: 120
  link_grace:
    description:
      - Minutes after this node booted in which rises of the port error counters are bring-up (links
        training), reported as information; after it they are judged at their steady-state rate
        (module_utils/_rates.py, which says where the default comes from). From 0 to 1440.
    type: float
    default: 10
  save_to:
    description:
      - An existing directory where each tool's output is saved under the names O(from_log) reads, so that
        the same facts come back offline. Nothing is written in check mode.
    type: path
  from_log:
    description:
      - A directory with saved outputs C(iblinkinfo.txt), C(ibnetdiscover.txt) (the topology file or the ports
        report of C(ibnetdiscover -p)), C(sminfo.txt) (one or more records), C(saquery_smir.txt) (C(saquery SMIR)),
        C(perfquery.1.txt) and C(perfquery.2.txt) (the second read O(interval) seconds after the first),
        C(ibqueryerrors.1.txt) and C(ibqueryerrors.2.txt) (read with them), C(uptime.txt) (the node's
        C(/proc/uptime) when the first read was taken) and C(read_at.txt) (the epoch seconds of each read, one a line).
      - Where the fabric could not be read when the outputs were saved (C(no_tools), C(no_ib_port)), O(save_to) writes
        C(not_read.txt) (that status, then why) instead; from it O(from_log) returns that status, with why.
      - Only regular files are read (no symlink, FIFO or device), each up to 64 MiB.
    type: path
notes:
  - The counters are read from the switches, so a host link's errors are seen at the switch port at its other end.
'''

EXAMPLES = r'''
- name: Discover the fabric from the first node with an InfiniBand port
  hpc.gpu_fabric.ib_fabric_facts:
    sm_lids: [1, 2]
  run_once: true

- name: Analyse saved outputs of a customer's fabric
  hpc.gpu_fabric.ib_fabric_facts:
    from_log: /srv/tickets/4711/ibdiags
  delegate_to: localhost
'''

RETURN = r'''
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpu_fabric_ib_fabric:
      description: The fabric as this node sees it.
      type: dict
      returned: always
      contains:
        status:
          description: C(ok), C(partial) (a tool missing or failed), C(no_tools) or C(no_ib_port).
          type: str
          returned: always
          sample: ok
        reason:
          description: Why the status is not C(ok).
          type: str
          returned: always
          sample: ""
        tools:
          description: Per tool C(used), C(not installed), C(failed ...) or C(timed out ...).
          type: dict
          returned: always
          sample: {iblinkinfo: used, sminfo: used}
        topology:
          description: Nodes (by GUID) and links (both ends, width, speed, state, C(could_be)), see module_utils/_ibdiag.py.
          type: dict
          returned: always
          sample: {nodes: {}, links: [], unparsed: []}
        sm:
          description: C(sms) (one record per SM asked or listed by C(saquery SMIR), with priority, state and
            C(asked)) and C(errors).
          type: dict
          returned: always
          sample: {sms: [{lid: 1, guid: "0x0000000000500001", priority: 14, state: 3, state_name: SMINFO_MASTER}], errors: []}
        counters:
          description: C(reads), each with C(read_at) (epoch seconds) and C(ports) (lid, port, counters); C(interval_s).
          type: dict
          returned: always
          sample: {reads: [], interval_s: 5}
        unread:
          description: C(count) of the lines of the tools' outputs that no pattern read or records past a cap, C(lines)
            (the first 50, each with C(tool), C(line) number and C(text)) and, where records were past a cap,
            C(dropped) ({tool - {C(sms), C(errors), C(links), C(nodes) or C(ports) - count}}).
          type: dict
          returned: always
          sample: {count: 0, lines: []}
        subnet:
          description: C(reads) of C(ibqueryerrors), each with C(read_at), C(ports) (guid, port, node_guid, desc, switch,
            lid, counters, saturated), C(summary) and C(errors); C(uptime_s) (this node's time since boot at the
            first read) and C(grace_min) (O(link_grace)).
          type: dict
          returned: always
          sample: {reads: [], uptime_s: 86400.0, grace_min: 10}
        local:
          description: This node's InfiniBand ports (device, port, lid, sm_lid).
          type: list
          elements: dict
          returned: always
          sample: [{device: mlx5_0, port: 1, lid: 100, sm_lid: 1}]
'''

import math
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _ibdiag, _paths, _process
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._argv import check_args
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import without_surrogates
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot

TOOLS = ('iblinkinfo', 'ibnetdiscover', 'sminfo', 'saquery', 'perfquery', 'ibqueryerrors')
# Tools whose absence leaves only their own part unread (ibqueryerrors: the perfquery sweep of the
# switches stands for it), said in ``tools`` but no reason for a partial status.
OPTIONAL = ('ibqueryerrors',)
UNREAD_OPTIONAL = ('not installed', 'no saved output')
# IB LIDs are 16 bit; unicast LIDs 0x0001-0xBFFF (IBTA Vol 1, 4.1.3): module_utils/_ibdiag.py.
MAX_UNICAST_LID = _ibdiag.MAX_UNICAST_LID
# The bring-up grace window's default and bound, minutes (module_utils/_rates.py owns them: modules may
# not import it, tests/unit/plugins/test_import_graph.py, so the two numbers are repeated here and
# tests/unit/plugins/module_utils/test__ibqueryerrors.py checks that they agree).
_LINK_GRACE_MIN = 10
_LINK_GRACE_MAX_MIN = 1440
# A saved output's cap (module_utils/_ibdiag.py says why).
LOG_LIMIT = _ibdiag.SAVED_LIMIT


def read_log(path):
    """Bytes of the saved output ``path``: a regular file (no symlink, opened non-blocking so that a
    FIFO does not wait for a writer), at most LOG_LIMIT bytes. Raises OSError or ValueError."""
    return _paths.read_regular(path, LOG_LIMIT)


def local_ports(sysroot):
    return [{'device': d['name'], 'port': p.get('port'), 'lid': p.get('lid'), 'sm_lid': p.get('sm_lid'),
             'state': p.get('state')}
            for d in read_ib(sysroot) for p in d.get('ports') or [] if p.get('link_layer') == 'InfiniBand']


class Runner(object):
    """Runs the tools (or reads their saved outputs) and says how each went."""

    def __init__(self, module, timeout, from_log, save_to=None):
        self.module, self.timeout, self.from_log, self.save_to = module, timeout, from_log, save_to
        self.tools = {}
        self.paths = {}

    def available(self, tool):
        if self.from_log:
            return True
        if tool not in self.paths:
            self.paths[tool] = self.module.get_bin_path(tool)
            if self.paths[tool] is None:
                self.tools[tool] = 'not installed'
        return self.paths[tool] is not None

    def run(self, tool, args=(), log_name=None):
        """(stdout, stderr) or None; the outcome is kept in ``tools``."""
        if self.from_log:
            path = os.path.join(self.from_log, log_name or tool + '.txt')
            if not os.path.lexists(path):
                self.tools.setdefault(tool, 'no saved output (%s)' % os.path.basename(path))
                return None
            try:
                data = read_log(path)
            except (OSError, ValueError) as exc:
                self.tools[tool] = 'not read (%s: %s)' % (os.path.basename(path), getattr(exc, 'strerror', None) or exc)
                return None
            self.tools.setdefault(tool, 'read from log')
            return data.decode('utf-8', 'replace'), ''
        if not self.available(tool):
            return None
        argv = [self.paths[tool]] + [str(a) for a in args]
        check_args(argv, tool)
        launched = _process.run(argv, self.timeout, name=tool)
        out, err = launched.output()
        keep_output(self.save_to, log_name or tool + '.txt', out)
        if launched.timed_out:
            self.tools[tool] = 'timed out after %ds' % self.timeout
            return out, err
        if launched.rc != 0:
            last = (err or out).strip().splitlines()
            self.tools[tool] = 'failed: rc=%s %s' % (launched.rc, last[-1][:200] if last else '')
            return out, err
        self.tools.setdefault(tool, 'used')
        return out, err


def keep_output(save_to, name, text):
    """Append ``text`` to ``name`` in the directory ``save_to`` (None: nothing), created 0600 and never
    through a link: a file from_log reads back."""
    if not save_to or text is None:
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, 'O_NOFOLLOW', 0)
    handle = os.open(os.path.join(save_to, os.path.basename(name)), flags, 0o600)
    try:
        os.write(handle, text.encode('utf-8', 'surrogateescape'))
    finally:
        os.close(handle)


def _ask_sm(runner, args, asked, sms, errors, unread, log_name=None):
    """sminfo [LID]: its records and errors added (each marked with who was asked); False when the tool
    is missing (no use asking again)."""
    text = runner.run('sminfo', args, log_name=log_name)
    if text is None:
        return False
    parsed = _ibdiag.parse_sminfo('\n'.join(text))
    sms.extend(dict(sm, asked=asked) for sm in parsed['sms'])
    errors.extend({'asked': asked, 'error': e} for e in parsed['errors'])
    _add_unread(unread, 'sminfo', parsed)
    if not parsed['sms'] and not parsed['errors']:
        errors.append({'asked': asked, 'error': 'no SMInfo record in the output'})
    return True


def _add_unread(unread, tool, parsed):
    unread['count'] += parsed.get('unparsed_count', len(parsed.get('unparsed') or []))
    for item in parsed.get('unparsed') or []:
        if len(unread['lines']) < _ibdiag.UNREAD_KEPT:
            unread['lines'].append(dict(item, tool=tool))
    _add_dropped(unread, tool, parsed.get('dropped'))


# What each cap of module_utils/_ibdiag.py stands for, as the facts name what was dropped.
_CAPS = {'sms': ('SM record(s)', _ibdiag.SMS_MAX), 'errors': ('error line(s)', _ibdiag.ERRORS_MAX),
         'links': ('port line(s)', _ibdiag.LINKS_MAX), 'nodes': ('node(s)', _ibdiag.NODES_MAX),
         'ports': ('port counter block(s)', _ibdiag.LINKS_MAX)}


def _add_dropped(unread, tool, dropped):
    """Records past a cap (module_utils/_ibdiag.py): counted per tool and kind, and, as lines
    the report names (FABRIC_INPUT_UNREAD), first among the lines not read."""
    for kind, count in sorted((dropped or {}).items()):
        if not count:
            continue
        mine = unread.setdefault('dropped', {}).setdefault(tool, {})
        mine[kind] = mine.get(kind, 0) + count
        what, cap = _CAPS.get(kind, (kind, None))
        unread['count'] += count
        note = {'line': None, 'tool': tool, 'text': '%d %s past the first %s not kept: more than a subnet holds (%s)'
                % (count, what, cap, 'module_utils/_ibdiag.py'), 'reason': 'over the cap on records'}
        unread['lines'].insert(0, note)
        del unread['lines'][_ibdiag.UNREAD_KEPT:]


def uptime(runner, sysroot):
    """Seconds since this node booted (/proc/uptime; from_log: uptime.txt), or None."""
    if runner.from_log:
        text = runner.run('uptime', log_name='uptime.txt')
        text = text[0] if text else None
        runner.tools.pop('uptime', None)
    else:
        text = sysroot.text('proc/uptime', quiet=True) if sysroot is not None else None
        keep_output(runner.save_to, 'uptime.txt', text)
    try:
        value = float((text or '').split()[0])
    except (ValueError, IndexError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _read_subnet(runner, number, unread):
    """One ibqueryerrors read of the subnet -> {'ports', 'summary', 'errors'} or None (not installed, not saved)."""
    text = runner.run('ibqueryerrors', log_name='ibqueryerrors.%d.txt' % number)
    if text is None:
        return None
    parsed = _ibdiag.parse_ibqueryerrors(text[0])
    if parsed['summary'] and runner.tools.get('ibqueryerrors', '').startswith('failed: rc='):
        # ibqueryerrors exits with the number of ports past their thresholds (ibqueryerrors.c: main()
        # returns print_summary(), which returns summary.bad_ports): a whole output with its summary.
        runner.tools['ibqueryerrors'] = 'used'
    elif runner.tools.get('ibqueryerrors') not in ('used', 'read from log'):
        return None
    _add_unread(unread, 'ibqueryerrors', parsed)
    return {'ports': parsed['ports'], 'summary': parsed['summary'], 'errors': parsed['errors']}


def _read_times(runner, count):
    """The saved epoch seconds of each read (read_at.txt), else None."""
    text = runner.run('read_at', log_name='read_at.txt') if runner.from_log else None
    runner.tools.pop('read_at', None)
    try:
        times = [float(v) for v in (text[0] if text else '').split()[:count]]
    except ValueError:
        return None
    return times if len(times) == count and all(math.isfinite(t) for t in times) else None


def _counter_reads(runner, topology, interval, unread, subnet):
    """The counter reads, ``interval`` seconds apart: perfquery of every switch (returned) and ibqueryerrors
    of the subnet (into ``subnet['reads']``), each with the time it was taken (from_log: read_at.txt)."""
    switch_lids = sorted(set(lid for node in topology['nodes'].values() if node['type'] == 'switch' for lid in node['lids']))
    reads = []
    for number in (1, 2) if interval > 0 else (1,):
        if number == 2 and not runner.from_log:
            time.sleep(interval)
        read_at, blocks = time.time(), []
        counted = {'count': 0, 'lines': []}
        read = _read_subnet(runner, number, unread) if number == 1 or subnet['reads'] else None
        if read is not None:
            subnet['reads'].append(dict(read, read_at=read_at))
        if runner.from_log:
            text = runner.run('perfquery', log_name='perfquery.%d.txt' % number)
            blocks = _ibdiag.parse_perfquery(text[0], counted) if text else []
        else:
            for lid in switch_lids:
                text = runner.run('perfquery', ['-x', '-l', lid], log_name='perfquery.%d.txt' % number)
                if text is None:
                    break
                blocks.extend(_ibdiag.parse_perfquery(text[0], counted))
        _add_unread(unread, 'perfquery', {'unparsed': counted['lines'], 'unparsed_count': counted['count'],
                                          'dropped': counted.get('dropped')})
        if blocks or not runner.from_log:
            reads.append({'read_at': read_at, 'ports': blocks})
        keep_output(runner.save_to, 'read_at.txt', repr(read_at) + '\n')
    times = _read_times(runner, len(subnet['reads']) or len(reads)) if runner.from_log else None
    for part in (subnet['reads'], reads):
        for read, when in zip(part, times or []):
            read['read_at'] = when
    return reads


def discover(module, runner, sm_lids, interval, ports, sysroot=None, grace_min=_LINK_GRACE_MIN):
    """The fabric facts from the tools' outputs."""
    unread = {'count': 0, 'lines': []}
    text = runner.run('iblinkinfo')
    linkinfo = _ibdiag.parse_iblinkinfo(text[0]) if text else None
    text = runner.run('ibnetdiscover')
    netdiscover = _ibdiag.parse_ibnetdiscover(text[0]) if text else None
    topology = _ibdiag.topology(linkinfo, netdiscover)
    for tool in ('ibnetdiscover', 'iblinkinfo'):
        _add_unread(unread, tool, {'unparsed': [dict((k, v) for k, v in item.items() if k != 'tool')
                                                for item in topology['unparsed'] if item['tool'] == tool],
                                   'unparsed_count': topology['unparsed_counts'].get(tool, 0),
                                   'dropped': topology['dropped'].get(tool)})
    for key in ('unparsed_counts', 'dropped'):
        topology.pop(key, None)

    sms, errors = [], []
    _ask_sm(runner, [], 'local port', sms, errors, unread)
    # Every SM the master's SA knows (opensm answers SMInfoRecord with its own record and one per remote
    # SM it found: osm_sa_sminfo_record.c), so that a standby nobody's sm_lid names is read too.
    text = runner.run('saquery', ['SMIR'], log_name='saquery_smir.txt')
    if text is not None:
        parsed = _ibdiag.parse_saquery_sminfo('\n'.join(text))
        sms.extend(dict(sm, asked='saquery SMIR') for sm in parsed['sms'])
        errors.extend({'asked': 'saquery SMIR', 'error': e} for e in parsed['errors'])
        _add_unread(unread, 'saquery', parsed)
    asked = set(sm['lid'] for sm in sms if sm['asked'] != 'saquery SMIR')
    listed = [sm['lid'] for sm in sms if sm['asked'] == 'saquery SMIR']
    wanted = sorted(set(lid for lid in list(sm_lids) + [p.get('sm_lid') for p in ports] + listed
                        if isinstance(lid, int) and not isinstance(lid, bool) and 0 < lid <= MAX_UNICAST_LID) - asked)
    # Each SM's own answer: the SA's record of a remote SM is what the master last polled.
    for lid in wanted if not runner.from_log else []:
        if not _ask_sm(runner, [lid], 'lid %d' % lid, sms, errors, unread):
            break

    subnet = {'reads': [], 'uptime_s': uptime(runner, sysroot), 'grace_min': grace_min}
    reads = _counter_reads(runner, topology, interval, unread, subnet)
    return {'topology': topology, 'sm': {'sms': sms, 'errors': errors}, 'subnet': subnet,
            'counters': {'reads': reads, 'interval_s': reads[1]['read_at'] - reads[0]['read_at'] if len(reads) > 1 else None},
            'unread': unread}


# The statuses in which no tool ran: save_to records them (not_read.txt), from_log gives them back.
NOT_READ_STATUSES = ('no_tools', 'no_ib_port')


def saved_not_read(from_log):
    """(status, reason) that the saved ``not_read.txt`` records (the fabric could not be read when the
    outputs were saved: save_to), or None where there is none."""
    path = os.path.join(from_log, _ibdiag.NOT_READ)
    if not os.path.lexists(path):
        return None
    try:
        lines = read_log(path).decode('utf-8', 'replace').splitlines()
    except (OSError, ValueError) as exc:
        return 'no_tools', 'not read when the outputs were saved, and %s is not readable (%s)' % (
            _ibdiag.NOT_READ, getattr(exc, 'strerror', None) or exc)
    status = lines[0].strip() if lines else ''
    why = ' '.join(line.strip() for line in lines[1:] if line.strip())[:500] or 'no reason saved'
    return status if status in NOT_READ_STATUSES else 'no_tools', 'not read when the outputs were saved: ' + why


def judge_status(facts, tools):
    """status/reason of the facts from how each tool went and what was left unread."""
    bad = sorted(tool for tool, how in tools.items() if how not in ('used', 'read from log')
                 and not (tool in OPTIONAL and how.split(' (')[0] in UNREAD_OPTIONAL))
    reasons = ['%s: %s' % (tool, tools[tool]) for tool in bad]
    unread = facts.get('unread') or {}
    if unread.get('count'):
        reasons.append('%d line(s) of the tools\' output not read (%s)' % (
            unread['count'], ', '.join(sorted(set(item['tool'] for item in unread.get('lines') or [])))))
    if reasons:
        facts.update(status='partial', reason='; '.join(reasons))
    return facts


# The longest wait between the two counter reads: a rate over more than an hour says nothing
# of a link now, and a task that sleeps for days looks hung.
MAX_INTERVAL_S = 3600


def params_problem(params):
    """What is wrong with interval or timeout (a sentence), or None. Every -e value arrives as a
    string and Ansible's float conversion takes 'nan' and 'inf': a NaN interval passes any < or >
    test and sleep() refuses it only after the first read."""
    interval = params['interval']
    if not math.isfinite(interval) or not 0 <= interval <= MAX_INTERVAL_S:
        return 'interval must be a number of seconds from 0 (one read) to %d, got %s' % (MAX_INTERVAL_S, interval)
    grace = params.get('link_grace', _LINK_GRACE_MIN)
    if not isinstance(grace, (int, float)) or not math.isfinite(grace) or not 0 <= grace <= _LINK_GRACE_MAX_MIN:
        return 'link_grace must be a number of minutes from 0 to %d, got %s' % (_LINK_GRACE_MAX_MIN, grace)
    if params['timeout'] < 1:
        return 'timeout must be 1 or more seconds, got %d' % params['timeout']
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type='path', default='/'),
            sm_lids=dict(type='list', elements='int', default=[]),
            interval=dict(type='float', default=5),
            timeout=dict(type='int', default=120),
            from_log=dict(type='path'),
            link_grace=dict(type='float', default=_LINK_GRACE_MIN),
            save_to=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    root = params['root']
    if not os.path.isdir(root):
        module.fail_json(msg='root %s is not a directory: give / or the path of an unpacked node snapshot' % root)
    problem = params_problem(params)
    if problem:
        module.fail_json(msg=problem)
    if params['save_to'] is not None and not os.path.isdir(params['save_to']):
        module.fail_json(msg='save_to %s is not an existing directory' % params['save_to'])
    if params['from_log'] is not None and not os.path.isdir(params['from_log']):
        module.fail_json(msg='from_log %s is not a directory of saved outputs' % params['from_log'])
    sysroot = SysRoot(root)
    ports = local_ports(sysroot)
    facts = {'status': 'ok', 'reason': '', 'tools': {}, 'topology': {'nodes': {}, 'links': [], 'unparsed': []},
             'sm': {'sms': [], 'errors': []}, 'counters': {'reads': [], 'interval_s': None}, 'unread': {'count': 0, 'lines': []},
             'subnet': {'reads': [], 'uptime_s': None, 'grace_min': params['link_grace']},
             'local': ports}
    runner = Runner(module, params['timeout'], params['from_log'], None if module.check_mode else params['save_to'])
    not_read = saved_not_read(params['from_log']) if params['from_log'] else None
    if not_read:
        facts.update(status=not_read[0], reason=not_read[1])
    elif not ports and not params['from_log']:
        facts.update(status='no_ib_port', reason='this node has no InfiniBand port: the fabric is discovered from a node that has one')
    elif not params['from_log'] and not any(runner.available(tool) for tool in TOOLS):
        facts.update(status='no_tools', reason='infiniband-diags is not installed (%s not found)' % ', '.join(TOOLS),
                     tools=dict(runner.tools))
    else:
        try:
            facts.update(discover(module, runner, params['sm_lids'], params['interval'], ports, sysroot, params['link_grace']))
        except _process.Terminated as exc:
            module.fail_json(msg='stopped while the fabric tools ran (%s); all of them were reaped' % exc)
        facts['tools'] = dict(runner.tools)
        judge_status(facts, runner.tools)
    if facts['status'] in NOT_READ_STATUSES and not params['from_log']:
        keep_output(runner.save_to, _ibdiag.NOT_READ, '%s\n%s\n' % (facts['status'], facts['reason']))
    for warning in sysroot.warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={'gpu_fabric_ib_fabric': without_surrogates(facts, module.warn, 'gpu_fabric_ib_fabric')})


if __name__ == '__main__':
    main()
