# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Stand-ins for iblinkinfo, ibnetdiscover, sminfo, saquery and perfquery over the simulated fabric
($GF_SIM_FABRIC, written by tests/sim/fabric.py), printing the real tools' formats:

  iblinkinfo     rdma-core infiniband-diags/iblinkinfo.c print_node_header()/print_port():
                 "Switch: 0x%016x %s:" / "CA: %s:", then "      [0x%016x ]%6d %4d[%2s] ==(%3s %18s %6s/%8s)==>  %6d %4d[%2s] \"%s\" (%s %s)"
                 (tests/fixtures/public/iblinkinfo/linpack_edr_sb7700.txt)
  ibnetdiscover  the topology file of ibnetdiscover(8) (tests/fixtures/public/ibnetdiscover/); with -p
                 (--ports) the ports report of ibnetdiscover.c dump_ports_report(): "%2s %5d %2d 0x%016x %s %s"
                 then " - %2s %5d %2d 0x%016x ( '%s' - '%s' )" or "%36s'%s'"
                 (tests/fixtures/public/ibnetdiscover/infiniband_exporter_ports_edr.txt)
  sminfo         "sminfo: sm lid %d sm guid 0x%x, activity count %u priority %d state %d %s"
                 (tests/fixtures/public/sminfo/); a dead SM: "sminfo: iberror: failed: query"
  saquery        SMIR: saquery.c dump_sm_info_record() blocks, the master's own record then every other
                 live SM (opensm osm_sa_sminfo_record.c); no live master: "Query SA failed: ..." (saquery.c
                 get_any_records()) (tests/fixtures/public/saquery/)
  perfquery      -x [-l] LID [PORT]: "# Port extended counters: Lid %d port %d (CapMask: ...)"
                 blocks (tests/fixtures/public/perfquery/infiniband_diags_16_rhel75_x.txt)
  ibqueryerrors  ibqueryerrors.c print_results()/print_summary(): 'Errors for 0x%x "%s"' per switch with a
                 non-zero error counter, '   GUID 0x%x port %d: [%s == %u] ...' per such port, then
                 '## Summary: ...' (tests/fixtures/public/ibqueryerrors/); every call is one more read
                 (the counters of a faulted port step up by their fault's step per read); exits with the
                 number of ports printed, as the real tool does

Usage: tools_ibdiags.py TOOL [ARGS...] (the bin/ wrappers pass their own name).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys

try:
    from tests.sim import fabric as _fabric
except ImportError:  # run as a script from tests/sim/bin
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fabric as _fabric

_STATE_NAMES = {0: 'SMINFO_NOTACTIVE', 1: 'SMINFO_DISCOVERING', 2: 'SMINFO_STANDBY', 3: 'SMINFO_MASTER'}


def _speed(lane):
    return ('%f' % lane).rstrip('0').rstrip('.') + ' Gbps' if lane != int(lane) else '%.1f Gbps' % lane


def _ends(fab):
    """{(kind, name[, hca]): [(port, link, other end, other port)]}."""
    ends = {}
    for link in fab['links']:
        ends.setdefault(tuple(link['a']), []).append((link['a_port'], link, tuple(link['b']), link['b_port']))
        ends.setdefault(tuple(link['b']), []).append((link['b_port'], link, tuple(link['a']), link['a_port']))
    return ends


def _describe(fab, end):
    if end[0] == 'switch':
        sw = fab['switches'][end[1]]
        return sw['guid'], sw['lid'], sw['desc']
    hca = [h for h in fab['hosts'][end[1]]['hcas'] if h['name'] == end[2]][0]
    return hca['guid'], hca['lid'], '%s %s' % (end[1], end[2])


def _link_str(fab, link):
    if link['state'] == 'Down':
        return '(              %6s/%8s)' % ('Down', link['phys'])
    return '(%3s %18s %6s/%8s)' % ('%dX' % link['width'], _speed(fab['lane_gbps']), link['state'], link['phys'])


def _port_line(fab, lid, port, link, other, other_port):
    if link['state'] == 'Down':
        remote = '           [  ] "" ( )'
    else:
        _guid, olid, odesc = _describe(fab, other)
        could = 'Could be %dX' % link['could_width'] if link.get('could_width') else ''
        remote = '%6d %4d[%2s] "%s" (%s %s)' % (olid, other_port, '', odesc, could, '')
    return '%6d %4d[%2s] ==%s==>  %s' % (lid, port, '', _link_str(fab, link), remote)


def iblinkinfo(fab, args):
    lines = []
    ends = _ends(fab)
    for name in sorted(fab['hosts']):
        for hca in fab['hosts'][name]['hcas']:
            end = ('host', name, hca['name'])
            lines.append('CA: %s %s:' % (name, hca['name']))
            for port, link, other, other_port in sorted(ends.get(end, []), key=lambda item: item[0]):
                lines.append('      0x%016x %s' % (int(hca['guid'], 16), _port_line(fab, hca['lid'], port, link, other, other_port)))
    for name in sorted(fab['switches']):
        sw = fab['switches'][name]
        lines.append('Switch: 0x%016x %s:' % (int(sw['guid'], 16), sw['desc']))
        for port, link, other, other_port in sorted(ends.get(('switch', name), []), key=lambda item: item[0]):
            lines.append('      ' + _port_line(fab, sw['lid'], port, link, other, other_port))
    return 0, '\n'.join(lines) + '\n', ''


def _ports_report(fab):
    """ibnetdiscover -p: every port of every node, from the highest port number down (dump_ports_report()
    walks node->ports from numports to 1), switches and CAs in the order the tool met them."""
    ends = _ends(fab)
    out = []
    nodes = [('switch', name) for name in sorted(fab['switches'])] + \
        [('host', name, hca['name']) for name in sorted(fab['hosts']) for hca in fab['hosts'][name]['hcas']]
    for node in nodes:
        node_guid, lid, desc = _describe(fab, node)
        kind = 'SW' if node[0] == 'switch' else 'CA'
        for port, link, other, other_port in sorted(ends.get(node, []), key=lambda item: -item[0]):
            if link['state'] == 'Down':
                out.append("%2s %5d %2d 0x%016x %s %s%36s'%s'" % (kind, lid, port, int(node_guid, 16), '4x', 'SDR', '', desc))
                continue
            pguid, plid, pdesc = _describe(fab, other)
            out.append("%2s %5d %2d 0x%016x %s %s - %2s %5d %2d 0x%016x ( '%s' - '%s' )" % (
                kind, lid, port, int(node_guid, 16), '%dx' % link['width'], 'NDR', 'SW' if other[0] == 'switch' else 'CA',
                plid, other_port, int(pguid, 16), desc, pdesc))
    return 0, '\n'.join(out) + '\n', ''


def ibnetdiscover(fab, args):
    if '-p' in args or '--ports' in args:
        return _ports_report(fab)
    ends = _ends(fab)
    first = fab['hosts'][sorted(fab['hosts'])[0]]['hcas'][0]['guid'][2:]
    out = ['#', '# Topology file: generated on Tue Nov 24 12:00:00 2026', '#',
           '# Initiated from node %s port %s' % (first, first), '']
    for name in sorted(fab['switches']):
        sw = fab['switches'][name]
        digits = sw['guid'][2:]
        out += ['vendid=0x2c9', 'devid=0xd2f0', 'sysimgguid=0x%x' % int(digits, 16),
                'switchguid=0x%x(%x)' % (int(digits, 16), int(digits, 16)),
                'Switch\t%d "S-%s"\t\t# "%s" base port 0 lid %d lmc 0' % (sw['ports'], digits, sw['desc'], sw['lid'])]
        for port, link, other, other_port in sorted(ends.get(('switch', name), []), key=lambda item: item[0]):
            if link['state'] == 'Down':
                continue
            oguid, olid, odesc = _describe(fab, other)
            kind = 'S' if other[0] == 'switch' else 'H'
            pguid = '' if other[0] == 'switch' else '(%x)' % int(oguid, 16)
            out.append('[%d]\t"%s-%s"[%d]%s\t\t# "%s" lid %d %dx%s' % (
                port, kind, oguid[2:], other_port, pguid, odesc, olid, link['width'], 'NDR'))
        out.append('')
    for name in sorted(fab['hosts']):
        for hca in fab['hosts'][name]['hcas']:
            digits = hca['guid'][2:]
            out += ['vendid=0x2c9', 'devid=0x1021', 'sysimgguid=0x%x' % int(digits, 16), 'caguid=0x%x' % int(digits, 16),
                    'Ca\t1 "H-%s"\t\t# "%s %s"' % (digits, name, hca['name'])]
            for port, link, other, other_port in ends.get(('host', name, hca['name']), []):
                if link['state'] == 'Down':
                    continue
                oguid, olid, odesc = _describe(fab, other)
                out.append('[%d](%x) \t"S-%s"[%d]\t\t# lid %d lmc 0 "%s" lid %d %dx%s' % (
                    port, int(digits, 16), oguid[2:], other_port, hca['lid'], odesc, olid, link['width'], 'NDR'))
            out.append('')
    return 0, '\n'.join(out) + '\n', ''


def sminfo(fab, args):
    lids = [a for a in args if not a.startswith('-')]
    want = int(lids[0], 0) if lids else None
    if want is None:
        me = sorted(fab['hosts'])[0]
        try:
            with open(os.path.join(os.environ.get('GF_SIM_ROOT', ''), 'etc/hostname')) as handle:
                me = handle.read().strip() or me
        except OSError:
            pass
        want = fab['sm_lid_of'].get(me, 1)
    for sm in fab['sms']:
        if sm['lid'] == want and sm['alive']:
            return 0, 'sminfo: sm lid %d sm guid 0x%x, activity count %d priority %d state %d %s\n' % (
                sm['lid'], int(sm['guid'], 16), sm['activity'], sm['priority'], sm['state'], _STATE_NAMES[sm['state']]), ''
    return 255, '', 'ibwarn: [4711] _do_madrpc: recv failed: Connection timed out\nsminfo: iberror: failed: query\n'


_SMIR = ('SMInfoRecord dump:\n\t\tRID\n\t\tLID...................%u\n\t\tSMInfo dump:\n\t\tGUID..................0x%016x\n'
         '\t\tSM_Key................0x%016x\n\t\tActCount..............%u\n\t\tPriority..............%u\n'
         '\t\tSMState...............%u\n')


def saquery(fab, args):
    """saquery SMIR: the SA (the live master) answers with its own record, then every other live SM."""
    if not any(a.upper() in ('SMIR', 'SMINFORECORD') for a in args):
        return 2, '', 'tools_ibdiags: only the SMIR query is simulated\n'
    masters = [sm for sm in fab['sms'] if sm['alive'] and sm['state'] == 3]
    if not masters:
        return 255, '', 'ibwarn: [4711] sa_query: umad_recv failed: attr 0x18: Connection timed out\nQuery SA failed: Connection timed out\n'
    master = masters[0]
    others = [sm for sm in fab['sms'] if sm['alive'] and sm is not master]
    out = ''.join(_SMIR % (sm['lid'], int(sm['guid'], 16), 0, sm['activity'], sm['priority'], sm['state'])
                  for sm in [master] + others)
    return 0, out, ''


_PQ_FIELDS = (('PortXmitData', 'port_xmit_data'), ('PortRcvData', 'port_rcv_data'), ('PortXmitPkts', None),
              ('PortRcvPkts', None), ('PortUnicastXmitPkts', None), ('PortUnicastRcvPkts', None),
              ('PortMulticastXmitPkts', None), ('PortMulticastRcvPkts', None))
_PQ_ERRORS = (('SymbolErrorCounter', 'symbol_error'), ('LinkErrorRecoveryCounter', 'link_error_recovery'),
              ('LinkDownedCounter', 'link_downed'), ('PortRcvErrors', None), ('PortRcvRemotePhysicalErrors', None),
              ('PortRcvSwitchRelayErrors', None), ('PortXmitDiscards', None), ('PortXmitConstraintErrors', None),
              ('PortRcvConstraintErrors', None), ('LocalLinkIntegrityErrors', None),
              ('ExcessiveBufferOverrunErrors', None), ('VL15Dropped', None), ('PortXmitWait', None), ('QP1Dropped', None))


def _field(name, value):
    return '%s:%s%s' % (name, '.' * max(1, 33 - len(name) - 1), value)


def _reads(path, key):
    """Count this port's reads (a file lock: the module may run several perfquery at once)."""
    state = path + '.state'
    with open(state, 'r+') as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        data = json.load(handle)
        count = data['perfquery_reads'].get(key, 0)
        data['perfquery_reads'][key] = count + 1
        handle.seek(0)
        handle.truncate()
        json.dump(data, handle)
    return count


def perfquery(fab, args, path, reads=None):
    numbers = [a for a in args if not a.startswith('-')]
    if not numbers:
        return 255, '', 'perfquery: iberror: failed: can\'t resolve self port\n'
    lid = int(numbers[0], 0)
    port = int(numbers[1], 0) if len(numbers) > 1 else None
    owner = [name for name, sw in fab['switches'].items() if sw['lid'] == lid]
    if not owner:
        return 255, '', 'ibwarn: [4711] mad_rpc: _do_madrpc failed; dport (Lid %d)\nperfquery: iberror: failed: perfquery\n' % lid
    ends = _ends(fab)
    ports = sorted(p for p, link, _o, _op in ends.get(('switch', owner[0]), []) if link['state'] != 'Down')
    if port is not None:
        ports = [port]
    elif '-l' not in args and '--loop_ports' not in args:
        ports = ports[:1]
    out = []
    for number in ports:
        key = '%s:%d' % (owner[0], number)
        if reads is None:
            count = _reads(path, key)
        else:                      # in-process: the counts kept in memory
            count = reads.get(key, 0)
            reads[key] = count + 1
        values = {}
        for counter, step in _fabric.counter_steps(fab, key).items():
            values[counter] = step * count
        out.append('# Port extended counters: Lid %d port %d (CapMask: 0x5300 CapMask2: 0x0000002)' % (lid, number))
        out.append(_field('PortSelect', number))
        out.append(_field('CounterSelect', '0x0000'))
        for name, key_name in _PQ_FIELDS:
            out.append(_field(name, 1000000 * (count + 1) if key_name else 0))
        out.append(_field('CounterSelect2', '0x00000000'))
        for name, key_name in _PQ_ERRORS:
            out.append(_field(name, values.get(key_name, 0) if key_name else 0))
    return 0, '\n'.join(out) + '\n', ''


_IQE_NAMES = dict((key, name) for name, key in _PQ_ERRORS if key)


def _count_read(path, key, reads):
    if reads is None:
        return _reads(path, key)
    count = reads.get(key, 0)
    reads[key] = count + 1
    return count


def ibqueryerrors(fab, args, path, reads=None):
    """The subnet's error counters: switches only carry faults here, CAs read 0 (not printed)."""
    count = _count_read(path, 'ibqueryerrors', reads)
    out, bad_nodes, bad_ports, ports_checked = [], 0, 0, 0
    ends = _ends(fab)
    for name in sorted(fab['switches']):
        switch = fab['switches'][name]
        ports = sorted(p for p, link, _o, _op in ends.get(('switch', name), []) if link['state'] != 'Down')
        ports_checked += len(ports)
        lines = []
        for number in ports:
            steps = _fabric.counter_steps(fab, '%s:%d' % (name, number))
            items = ''.join(' [%s == %d]' % (_IQE_NAMES[c], min(step * count, 65535 if c == 'symbol_error' else 255))
                            for c, step in sorted(steps.items(), key=lambda item: list(_IQE_NAMES).index(item[0])) if step * count)
            if items:
                lines.append('   GUID 0x%x port %d:%s' % (int(switch['guid'], 16), number, items))
        if lines:
            bad_nodes += 1
            bad_ports += len(lines)
            out.append('Errors for 0x%x "%s"' % (int(switch['guid'], 16), switch['desc']))
            out.extend(lines)
    nodes = len(fab['switches']) + sum(len(h['hcas']) for h in fab['hosts'].values())
    ports_checked += sum(len(h['hcas']) for h in fab['hosts'].values())
    out.extend(['', '## Summary: %d nodes checked, %d bad nodes found' % (nodes, bad_nodes),
                '##          %d ports checked, %d ports have errors beyond threshold' % (ports_checked, bad_ports),
                '## Thresholds: ', '## Suppressed:'])
    return bad_ports & 0xFF, '\n'.join(out) + '\n', ''


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    tool = os.path.basename(argv.pop(0)) if argv else ''
    path = os.environ.get('GF_SIM_FABRIC')
    if not path or not os.path.isfile(path):
        # No fabric on this node (like a node without umad access): what the real tools say.
        sys.stderr.write('ibwarn: [4711] umad_init: can\'t read ABI version from /sys/class/infiniband_mad/abi_version (2): '
                         'maybe ib_umad is not loaded\n%s: iberror: failed: discover failed\n' % tool)
        return 255
    fab = _fabric.load(path)
    if tool == 'iblinkinfo':
        rc, out, err = iblinkinfo(fab, argv)
    elif tool == 'ibnetdiscover':
        rc, out, err = ibnetdiscover(fab, argv)
    elif tool == 'sminfo':
        rc, out, err = sminfo(fab, argv)
    elif tool == 'saquery':
        rc, out, err = saquery(fab, argv)
    elif tool == 'perfquery':
        rc, out, err = perfquery(fab, argv, path)
    elif tool == 'ibqueryerrors':
        rc, out, err = ibqueryerrors(fab, argv, path)
    else:
        sys.stderr.write('tools_ibdiags: unknown tool %r\n' % tool)
        return 2
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


if __name__ == '__main__':
    sys.exit(main())


class InProcessRunner(object):
    """ib_fabric_facts' Runner over the simulated fabric, without processes: what the module
    gets from the stand-ins, for the accuracy and scale benchmarks (thousands of nodes)."""

    from_log = None

    def __init__(self, path, save_to=None):
        self.path = path
        self.fab = _fabric.load(path)
        self.tools = {}
        self.reads = {}
        self.save_to = save_to

    def text(self, rel, quiet=False):
        """The discovering node's /proc/uptime, as SysRoot.text gives it."""
        return '%.2f %.2f' % (self.fab.get('uptime_s', _fabric.UPTIME_S), 0) if rel == 'proc/uptime' else None

    def available(self, tool):
        return True

    def run(self, tool, args=(), log_name=None):
        args = [str(a) for a in args]
        if tool == 'perfquery':
            rc, out, err = perfquery(self.fab, args, self.path, self.reads)
        elif tool == 'ibqueryerrors':
            rc, out, err = ibqueryerrors(self.fab, args, self.path, self.reads)
        else:
            rc, out, err = {'iblinkinfo': iblinkinfo, 'ibnetdiscover': ibnetdiscover, 'sminfo': sminfo,
                            'saquery': saquery}[tool](self.fab, args)
        from ansible_collections.hpc.gpu_fabric.plugins.modules import ib_fabric_facts as module
        module.keep_output(self.save_to, log_name or tool + '.txt', out)
        if rc != 0:
            lines = (err or out).strip().splitlines()
            self.tools[tool] = 'failed: rc=%d %s' % (rc, lines[-1] if lines else '')
        else:
            self.tools.setdefault(tool, 'used')
        return out, err


def fabric_facts(path, sm_lids=(), interval=0.01, ports=(), save_to=None, grace_min=10):
    """gpu_fabric_ib_fabric as ib_fabric_facts returns it, from the simulated fabric at ``path``
    (each tool's output saved in ``save_to`` as the module's save_to does)."""
    from ansible_collections.hpc.gpu_fabric.plugins.modules import ib_fabric_facts as module
    runner = InProcessRunner(path, save_to)
    facts = {'status': 'ok', 'reason': '', 'local': list(ports)}
    facts.update(module.discover(None, runner, list(sm_lids), interval, list(ports), runner, grace_min))
    facts['tools'] = dict(runner.tools)
    return module.judge_status(facts, runner.tools)
