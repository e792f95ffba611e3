# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""RoCE QoS of a simulated node: what the renderer writes, and the mlnx_qos / dcb stand-ins.

The DCB state of a netdev (trust, PFC, DSCP map, priority -> TC, TSA) lives where the kernel
keeps it for the driver, out of sysfs; here it is $GF_SIM_ROOT/var/lib/gf-sim/dcb/<netdev>.json,
read and written only by the stand-ins. The ECN, CNP and RDMA CM ToS files are rendered where
the mlx5 driver and configfs put them (module_utils/_roce.py names each).

Output formats are the real tools':
- ``mlnx_qos -i IF`` as in tests/fixtures/public/mlnx_qos/netarbiter_cx_pfc_prio3_dscp_trust.txt
  (the state is printed after every set too, as mlnx_qos does);
- ``dcb pfc show dev IF`` two-line layout of tests/fixtures/public/dcb/man7_dcb_pfc_show_prio67.txt;
  ``dcb [-N] app show dev IF`` (DSCP names without -N, dcb-app(8)); ``dcb ets show dev IF``;
  ``dcb apptrust show dev IF``.

- ``lldptool -t -V PFC|ETS-CFG -i IF`` as in tests/fixtures/public/lldptool (it fails, as without a
  running lldpad, unless the port's lldp_willing is set); ``dcb dcbx show dev IF`` as dcb-dcbx(8).

Usage: tools_qos.py mlnx_qos|dcb|lldptool ARGS...   (tests/sim/bin/mlnx_qos, bin/dcb and bin/lldptool call it)
"""

from __future__ import annotations

import json
import os
import sys

STATE_DIR = 'var/lib/gf-sim/dcb'
# The healthy lossless setup of NVIDIA's RoCE configuration guides (docs/roce.md): trust dscp,
# PFC on priority 3, ECN on priority 3, CNPs with DSCP 48 on priority 6, RDMA CM ToS 106.
DEFAULTS = {'trust': 'dscp', 'pfc': [3], 'ecn': [3], 'cnp_dscp': 48, 'cnp_prio': 6, 'tos': 106,
            # mlx5's default priority -> TC map (802.1Q table: priority 0 on TC 1, 1 on TC 0), as
            # in the netarbiter printout; TC 6 strict for the CNPs.
            'prio_tc': {0: 1, 1: 0, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7},
            'tc_tsa': {0: 'vendor', 1: 'vendor', 2: 'vendor', 3: 'vendor', 4: 'vendor', 5: 'vendor', 6: 'strict', 7: 'vendor'},
            'dscp2prio': {}, 'counters': {}, 'configfs': True,
            # DCBX: the OS sets the DCB (mlnx_qos 'DCBX mode: OS controlled', dcb dcbx 'host ieee') and no
            # LLDP agent runs (lldptool fails): what roce_qos sets stays. lldp_willing True/False: lldpad
            # runs and sends willing / non-willing TLVs; dcbx_mode 'firmware': the NIC runs DCBX.
            'dcbx_mode': 'os', 'lldp_willing': None}
DSCP_NAMES = dict([(8 * n, 'CS%d' % n) for n in range(8)]
                  + [(8 * c + 2 * d, 'AF%d%d' % (c, d)) for c in range(1, 5) for d in range(1, 4)] + [(46, 'EF')])
NAME_DSCP = dict((name, code) for code, name in DSCP_NAMES.items())


def qos_of(profile, port):
    """The QoS settings of a RoCE port: DEFAULTS, the profile's roce_qos, the port's qos."""
    qos = dict(DEFAULTS)
    qos.update(profile.get('roce_qos') or {})
    qos.update(port.get('qos') or {})
    return qos


def _write(root, rel, content):
    path = os.path.join(root, rel.lstrip('/'))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as handle:
        handle.write('%s\n' % content)


def dscp_map(qos):
    """The full DSCP -> priority table: mlx5's default (dscp >> 3) with the set entries over it."""
    table = dict((dscp, dscp >> 3) for dscp in range(64))
    table.update((int(k), int(v)) for k, v in (qos.get('dscp2prio') or {}).items())
    return table


def render_qos(root, profile):
    """Every RoCE port's QoS files below ``root``; called by render.render()."""
    configfs = False
    for hca in profile.get('hcas', []):
        for port in hca.get('ports', []):
            netdev = port.get('netdev')
            if port.get('link_layer') != 'Ethernet' or not netdev:
                continue
            qos = qos_of(profile, port)
            ecn = set(qos.get('ecn_np', qos['ecn'])), set(qos.get('ecn_rp', qos['ecn']))
            for point, enabled in (('roce_np', ecn[0]), ('roce_rp', ecn[1])):
                for prio in range(8):
                    _write(root, '/sys/class/net/%s/ecn/%s/enable/%d' % (netdev, point, prio), int(prio in enabled))
            _write(root, '/sys/class/net/%s/ecn/roce_np/cnp_dscp' % netdev, qos['cnp_dscp'])
            _write(root, '/sys/class/net/%s/ecn/roce_np/cnp_802p_prio' % netdev, qos['cnp_prio'])
            if qos.get('configfs'):
                configfs = True
                if qos.get('tos') is not None:
                    _write(root, '/sys/kernel/config/rdma_cm/%s/ports/%d/default_roce_tos' % (hca['name'], port.get('port', 1)),
                           qos['tos'])
            base = '/sys/class/infiniband/%s/ports/%d/hw_counters' % (hca['name'], port.get('port', 1))
            counters = {'np_cnp_sent': 0, 'rp_cnp_handled': 0, 'np_ecn_marked_roce_packets': 0, 'rp_cnp_ignored': 0}
            counters.update(qos.get('counters') or {})
            for name, value in counters.items():
                _write(root, '%s/%s' % (base, name), value)
            state = {'trust': qos['trust'], 'pfc': sorted(qos['pfc']),
                     'dscp2prio': dict((str(k), v) for k, v in dscp_map(qos).items()),
                     'prio_tc': dict((str(k), v) for k, v in qos['prio_tc'].items()),
                     'tc_tsa': dict((str(k), v) for k, v in qos['tc_tsa'].items()),
                     'dcbx_mode': qos['dcbx_mode'], 'lldp_willing': qos['lldp_willing']}
            if qos.get('dcb', True):
                # dcb: false - a port whose driver or firmware answers no DCB query (the stand-ins then
                # fail as mlnx_qos and dcb do on such a netdev): its DCB state cannot be read.
                _write(root, '%s/%s.json' % (STATE_DIR, netdev), json.dumps(state, sort_keys=True))
    if configfs:
        os.makedirs(os.path.join(root, 'sys/kernel/config/rdma_cm'), exist_ok=True)


# ---------------------------------------------------------------------------- the stand-ins

def _load(root, netdev):
    path = os.path.join(root, STATE_DIR, netdev + '.json')
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        return json.load(handle)


def _save(root, netdev, state):
    _write(root, '%s/%s.json' % (STATE_DIR, netdev), json.dumps(state, sort_keys=True))


def _netdev_exists(root, netdev):
    return os.path.lexists(os.path.join(root, 'sys/class/net', netdev))


def mlnx_qos_text(state):
    """mlnx_qos's pretty print (mlnx-tools python/mlnx_qos), as the netarbiter printout shows it."""
    # 'Firmware controlled' as in tests/fixtures/public/mlnx_qos/nanodata_blog_fw_controlled_ets_bw.txt.
    mode = 'Firmware controlled' if state.get('dcbx_mode') == 'firmware' else 'OS controlled'
    lines = ['DCBX mode: %s' % mode, 'Priority trust state: %s' % state['trust'], 'dscp2prio mapping:']
    table = dict((int(k), v) for k, v in state['dscp2prio'].items())
    for prio in range(8):
        dscps = sorted((d for d, p in table.items() if p == prio), reverse=True)
        lines.append('        prio:%d dscp:%s' % (prio, ''.join('%02d,' % d for d in dscps)))
    lines.append('Cable len: 7')
    lines.append('PFC configuration:')
    lines.append('        priority    0   1   2   3   4   5   6   7')
    # The real tool leaves three spaces after the last column of the enabled row.
    lines.append('        enabled     %s   ' % '   '.join(str(int(p in state['pfc'])) for p in range(8)))
    prio_tc = dict((int(k), v) for k, v in state['prio_tc'].items())
    for tc in range(8):
        lines.append('tc: %d ratelimit: unlimited, tsa: %s' % (tc, state['tc_tsa'].get(str(tc), 'vendor')))
        for prio in sorted(p for p, t in prio_tc.items() if t == tc):
            lines.append('         priority:  %d' % prio)
    return '\n'.join(lines) + '\n'


def mlnx_qos(root, argv):
    """(rc, stdout, stderr) of ``mlnx_qos`` ARGS on the node at ``root``."""
    netdev, sets, args = None, {}, list(argv)
    while args:
        arg = args.pop(0)
        key, _sep, value = arg.partition('=')
        if key in ('-i', '--interface', '--trust', '--pfc', '--dscp2prio') and not _sep:
            if not args:
                return 2, '', 'mlnx_qos: error: argument %s: expected one argument\n' % key
            value = args.pop(0)
        if key in ('-i', '--interface'):
            netdev = value
        elif key in ('--trust', '--pfc', '--dscp2prio'):
            sets[key] = value
        else:
            return 2, '', 'mlnx_qos: error: unrecognized arguments: %s\n' % arg
    if not netdev:
        return 1, '', 'Usage: mlnx_qos -i <interface,...> [options]\nmlnx_qos: error: Interface name is required\n'
    if not _netdev_exists(root, netdev):
        return 1, '', 'Interface %s does not exist\n' % netdev
    state = _load(root, netdev)
    if state is None:
        return 1, '', 'Netlink error: Operation not supported (%s has no DCB)\n' % netdev
    if '--trust' in sets:
        if sets['--trust'] not in ('pcp', 'dscp'):
            return 2, '', "mlnx_qos: error: option --trust: invalid choice: '%s' (choose from 'pcp', 'dscp')\n" % sets['--trust']
        state['trust'] = sets['--trust']
    if '--pfc' in sets:
        flags = sets['--pfc'].split(',')
        if len(flags) != 8 or any(f not in ('0', '1') for f in flags):
            return 1, '', 'Invalid input: pfc must be 8 comma separated 0/1 values\n'
        state['pfc'] = [p for p, f in enumerate(flags) if f == '1']
    if '--dscp2prio' in sets:
        action, _sep, rest = sets['--dscp2prio'].partition(',')
        dscp, _sep, prio = rest.partition(',')
        if action not in ('set', 'del') or not dscp.isdigit() or not prio.isdigit() or int(dscp) > 63 or int(prio) > 7:
            return 1, '', 'Invalid dscp2prio: %s\n' % sets['--dscp2prio']
        state['dscp2prio'][str(int(dscp))] = int(prio) if action == 'set' else int(dscp) >> 3
    if sets:
        _save(root, netdev, state)
    return 0, mlnx_qos_text(state), ''


def _pairs(words):
    out = []
    for word in words:
        key, sep, value = word.partition(':')
        if not sep:
            break
        out.append((key, value))
    return out


def dcb(root, argv):
    """(rc, stdout, stderr) of ``dcb`` ARGS on the node at ``root``."""
    args = list(argv)
    numeric = False
    while args and args[0].startswith('-'):
        if args[0] in ('-N', '--Numeric'):
            numeric = True
        args.pop(0)
    if len(args) < 4 or args[2] != 'dev':
        return 255, '', 'Usage: dcb [ OPTIONS ] OBJECT { COMMAND | help }\n'
    obj, command, netdev, rest = args[0], args[1], args[3], args[4:]
    if not _netdev_exists(root, netdev):
        return 1, '', 'Device "%s" does not exist.\n' % netdev
    state = _load(root, netdev)
    if state is None:
        return 1, '', 'Attribute read: Operation not supported\n'
    if rest and rest[0] == '-N':
        numeric = True
        rest = rest[1:]
    if obj == 'pfc' and command == 'show':
        return 0, ('pfc-cap 8 macsec-bypass off delay 0\nprio-pfc %s\n'
                   % ' '.join('%d:%s' % (p, 'on' if p in state['pfc'] else 'off') for p in range(8))), ''
    if obj == 'pfc' and command == 'set' and rest[:1] == ['prio-pfc']:
        pfc = set(state['pfc'])
        for key, value in _pairs(rest[1:]):
            prios = range(8) if key == 'all' else [int(key)]
            for prio in prios:
                (pfc.add if value == 'on' else pfc.discard)(prio)
        state['pfc'] = sorted(pfc)
        _save(root, netdev, state)
        return 0, '', ''
    if obj == 'app' and command == 'show':
        table = sorted((int(k), v) for k, v in state['dscp2prio'].items())
        # The kernel's APP table holds only the entries set (the default map is the driver's).
        shown = [(d, p) for d, p in table if p != d >> 3]
        words = ['%s:%d' % (d if numeric else DSCP_NAMES.get(d, d), p) for d, p in shown]
        return 0, ('dscp-prio %s\n' % ' '.join(words)) if words else '', ''
    if obj == 'app' and command in ('replace', 'add') and rest[:1] == ['dscp-prio']:
        for key, value in _pairs(rest[1:]):
            state['dscp2prio'][str(NAME_DSCP.get(key.upper(), key))] = int(value)
        _save(root, netdev, state)
        return 0, '', ''
    if obj == 'ets' and command == 'show':
        return 0, ('willing off ets-cap 8 cbs off\ntc-bw 0:0 1:0 2:0 3:0 4:0 5:0 6:0 7:0\n'
                   'pg-bw 0:0 1:0 2:0 3:0 4:0 5:0 6:0 7:0\ntc-tsa %s\nprio-tc %s\n'
                   % (' '.join('%d:%s' % (t, state['tc_tsa'].get(str(t), 'vendor')) for t in range(8)),
                      ' '.join('%d:%d' % (p, state['prio_tc'].get(str(p), 0)) for p in range(8)))), ''
    if obj == 'dcbx' and command == 'show':
        # dcb-dcbx(8): the flags set, 'host ieee' (tests/fixtures/public/dcb/man7_dcb_dcbx_show_host_ieee.txt).
        return 0, '%s ieee\n' % ('lld-managed' if state.get('dcbx_mode') == 'firmware' else 'host'), ''
    if obj == 'apptrust' and command == 'show':
        return 0, 'order %s\n' % ('dscp pcp' if state['trust'] == 'dscp' else 'pcp'), ''
    if obj == 'apptrust' and command == 'set' and rest[:1] == ['order']:
        state['trust'] = 'dscp' if rest[1:2] == ['dscp'] else 'pcp'
        _save(root, netdev, state)
        return 0, '', ''
    return 255, '', 'Command "%s" is unknown, try "dcb %s help".\n' % (command, obj)


def lldptool_text(tlv, willing, pfc):
    """lldpad's print of the PFC or ETS-CFG TLV (tests/fixtures/public/lldptool: the layout of
    netdev_dpaa2_pfc_tlv_willing.txt, the ETS fields of taf_lldptool_unittest_ieee_tni_app.txt)."""
    flag = 'yes' if willing else 'no'
    if tlv == 'PFC':
        return ('IEEE 8021QAZ PFC TLV\n\t Willing: %s\n\t MACsec Bypass Capable: no\n\t PFC capable traffic classes: 8\n'
                '\t PFC enabled: %s\n' % (flag, ' '.join(str(p) for p in pfc) or 'none'))
    return ('IEEE 8021QAZ ETS Configuration TLV\n\t Willing: %s\n\t CBS: not supported\n\t MAX_TCS: 8\n'
            '\t PRIO_MAP: 0:0 1:1 2:2 3:3 4:4 5:5 6:6 7:7\n\t TC Bandwidth: 12%% 12%% 12%% 12%% 13%% 13%% 13%% 13%%\n'
            '\t TSA_MAP: 0:ets 1:ets 2:ets 3:ets 4:ets 5:ets 6:ets 7:ets\n' % flag)


def lldptool(root, argv):
    """(rc, stdout, stderr) of ``lldptool -t -V PFC|ETS-CFG -i IF`` (options in any order, as getopt takes them)."""
    args, netdev, tlv = list(argv), None, None
    while args:
        arg = args.pop(0)
        if arg in ('-i', '-V') and args:
            value = args.pop(0)
            netdev, tlv = (value, tlv) if arg == '-i' else (netdev, value)
    state = _load(root, netdev) if netdev and _netdev_exists(root, netdev) else None
    if state is None or state.get('lldp_willing') is None:
        # No lldpad for the interface: lldptool cannot reach the daemon's control socket.
        return 1, '', 'Failed to connect to lldpad - clif_open: Connection refused\n'
    if tlv not in ('PFC', 'ETS-CFG'):
        return 1, '', 'lldptool: unknown TLV %s\n' % tlv
    return 0, lldptool_text(tlv, state['lldp_willing'], state['pfc']), ''


def answer(root, argv):
    """(rc, stdout, stderr) of ``argv`` (mlnx_qos, dcb or lldptool first) on the node at ``root``."""
    tool = os.path.basename(argv[0])
    return {'mlnx_qos': mlnx_qos, 'lldptool': lldptool}.get(tool, dcb)(root, argv[1:])


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    root = os.environ.get('GF_SIM_ROOT')
    if not root or not os.path.isdir(root):
        sys.stderr.write('%s: GF_SIM_ROOT is not a simulated node root\n' % (argv[0] if argv else 'tools_qos'))
        return 1
    rc, out, err = answer(root, argv)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


if __name__ == '__main__':
    sys.exit(main())
