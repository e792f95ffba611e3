# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""RoCE lossless (QoS) facts of a node's RoCE ports.

What is read, and from where:

- trust mode, DSCP -> priority map, PFC per priority, priority -> traffic class and the TCs'
  transmission selection (ETS/strict): the DCB configuration of the netdev. The kernel gives
  it through DCB netlink (RTM_GETDCB, include/uapi/linux/dcbnl.h); this reader gets it from
  the two tools that speak it, in this order: NVIDIA's ``mlnx_qos -i IF`` (mlnx-tools,
  python/mlnx_qos; it shows the trust state, which iproute2's ``dcb`` shows only with
  ``apptrust`` on kernels >= 6.1), else iproute2's ``dcb pfc show``, ``dcb -N app show``,
  ``dcb ets show`` and ``dcb apptrust show``. ``source`` says which answered; without either
  the fields are None and ``source_reason`` says why (fail closed: nothing is assumed).
- ECN per priority for the notification point (the receiver that sends CNPs) and the
  reaction point (the sender that slows down), and the DSCP and 802.1p priority CNPs are sent
  with: ``/sys/class/net/IF/ecn/roce_np/enable/PRIO``, ``ecn/roce_rp/enable/PRIO``,
  ``ecn/roce_np/cnp_dscp``, ``ecn/roce_np/cnp_802p_prio`` (mlx5 driver of MLNX OFED, en_ecn.c;
  NVIDIA "How To Configure DCQCN (RoCE CC) values for ConnectX-4 (Linux)").
- the RDMA CM default ToS: configfs ``/sys/kernel/config/rdma_cm/DEV/ports/N/default_roce_tos``
  (drivers/infiniband/core/cma_configfs.c); without the DEV directory the kernel's default,
  0, applies (cma.c: default_roce_tos is 0 unless set through configfs).
- netdev MTU vs the RoCE active MTU, the RoCE v2 GID index, and the congestion and loss
  counters (hw_counters of mlx5, drivers/infiniband/hw/mlx5/counters.c).

- who manages the DCB (``dcbx``: the host, or the switch through DCBX): mlnx_qos's DCBX mode, else
  ``dcb dcbx show``, and lldpad's willing bits (``lldptool -t -V PFC``, ``-V ETS-CFG``); read_dcbx,
  judged by module_utils/_dcbx.py manager.

Parsers (``parse_*``) are pure functions over the tools' text, proven on public printouts
(tests/fixtures/public/mlnx_qos, tests/fixtures/public/dcb, tests/fixtures/public/lldptool).

The tools talk to the live NIC, so a snapshot of a node cannot be asked. fabric_capture runs
them on the node and saves each output (``saved_text``: the command, its rc, its stdout) as
``SAVED_DIR/<netdev>.<kind>.txt`` in the snapshot; :class:`SavedOutputs` answers read_roce
from those files (or a ticket's outputs named the same way) as the tools would have.
"""

from __future__ import annotations

import os
import re

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _dcbx  # who manages the DCB (DCBX)
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _paths  # bounded reads of regular files
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _process  # tool_runner's bounded runs
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import netdev_name_problem  # noqa: F401 (one check for every name read)
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._paths import NotRegular, open_regular_to_write
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot, parse_int

NET_CLASS = '/sys/class/net'
RDMA_CM_CONFIGFS = '/sys/kernel/config/rdma_cm'
PRIORITIES = tuple(range(8))
# The kernel's RDMA CM ToS when configfs does not set one (drivers/infiniband/core/cma.c:
# cma_dev->default_roce_tos is zero-initialised).
KERNEL_DEFAULT_TOS = 0
# Congestion and loss counters of a RoCE port (mlx5 hw_counters, drivers/infiniband/hw/mlx5/counters.c:
# np_* the notification point, rp_* the reaction point; out_of_buffer is per device queue).
CONGESTION_COUNTERS = ('np_cnp_sent', 'rp_cnp_handled', 'np_ecn_marked_roce_packets', 'rp_cnp_ignored')
LOSS_COUNTERS = ('out_of_sequence', 'packet_seq_err', 'local_ack_timeout_err', 'rnr_nak_retry_err', 'out_of_buffer')
# The DCB reads, in the order _tool_qos asks them ('IF' is the netdev), each under the name its
# saved output has: <netdev>.<kind>.txt (fabric_capture writes them into a snapshot, SAVED_DIR;
# a ticket's outputs are named the same way for roce_qos_facts from_log).
SAVED_KINDS = {
    'mlnx_qos': ('mlnx_qos', '-i', 'IF'),
    'dcb_pfc': ('dcb', 'pfc', 'show', 'dev', 'IF'),
    'dcb_app': ('dcb', '-N', 'app', 'show', 'dev', 'IF'),
    'dcb_ets': ('dcb', 'ets', 'show', 'dev', 'IF'),
    'dcb_apptrust': ('dcb', 'apptrust', 'show', 'dev', 'IF'),
    # Who manages the DCB (module_utils/_dcbx.py): dcb's DCBX flags where mlnx_qos did not say its
    # DCBX mode, and lldpad's willing bits (lldptool takes its options in any order: the netdev last,
    # as every saved kind has it).
    'dcb_dcbx': ('dcb', 'dcbx', 'show', 'dev', 'IF'),
    'lldptool_pfc': ('lldptool', '-t', '-V', 'PFC', '-i', 'IF'),
    'lldptool_ets': ('lldptool', '-t', '-V', 'ETS-CFG', '-i', 'IF'),
}
# Where a snapshot holds them, relative to its root (next to _capture.MANIFEST: no node path).
SAVED_DIR = '.gpu_fabric_commands/roce_qos'
# A saved output is a few kB (mlnx_qos -i with its 64-entry DSCP map: ~1.5 kB); one over 1 MiB
# is no output of these tools and is not read.
SAVED_MAX_BYTES = 1 << 20
# A directory of saved outputs holds one file per netdev and kind: a node of 64 netdevs (an
# 8-HCA node with 8 VFs each) has 64 x 8 = 512. The first SAVED_MAX_NAMES names (sorted) are
# looked at, the rest counted; of the names refused, the first SAVED_REFUSED_LISTED are listed
# (and warned about) and the rest counted: 20,000 junk files printed 20,000 warnings.
SAVED_MAX_NAMES = 1024
SAVED_REFUSED_LISTED = 10
# The first line of a saved output written by fabric_capture; the header lines after it say the
# command and its rc. A file without it (a ticket's paste) is the tool's stdout, rc 0.
SAVED_MAGIC = '# hpc.gpu_fabric saved output'

# Symbolic DSCP names iproute2's dcb prints unless -N is given (lib/rt_names.c reads
# /etc/iproute2/rt_dsfield; its default table: the class selectors, AF classes and EF).
DSCP_NAMES = dict([('CS%d' % n, 8 * n) for n in range(8)]
                  + [('AF%d%d' % (c, d), 8 * c + 2 * d) for c in range(1, 5) for d in range(1, 4)]
                  + [('EF', 46), ('VA', 44), ('LE', 1)])

# Matched one line at a time (never re.M over the whole text: '^\s*' under re.M tries every line
# start and runs over all the blank lines after it, quadratic in a text of blank lines).
_TRUST_RE = re.compile(r'\s*Priority trust (?:state|mode)\s*:\s*(?P<trust>\w+)', re.I)
_DSCP_ROW_RE = re.compile(r'\s*prio\s*:\s*(?P<prio>\d)\s+dscp\s*:(?P<dscps>[\d,\s]*)\Z')
# A row's DSCPs continued on the next line (only digits, commas and blanks).
_DSCP_MORE_RE = re.compile(r'[\d,\s]*\Z')
_PFC_HEADER_RE = re.compile(r'\s*priority\s+((?:\d\s+){7}\d)\s*\Z')
_PFC_ROW_RE = re.compile(r'\s*enabled\s+((?:[01]\s+){7}[01])\s*\Z')
_TC_RE = re.compile(r'^\s*tc\s*:\s*(?P<tc>\d)\b(?P<rest>.*)$')
_TC_PRIO_RE = re.compile(r'^\s*priority\s*:(?P<prios>[\d\s]+)$')
_TSA_RE = re.compile(r'tsa\s*:\s*(?P<tsa>\w+)')
# A share in percent: three digits at most (a longer run is no share, and past int()'s digit limit a ValueError).
_BW_RE = re.compile(r'bw\s*:\s*(?P<bw>\d{1,3})\s*%')
_ALNUM_RE = re.compile(r'[A-Za-z0-9]+\Z')
_SELECTOR_RE = re.compile(r'[a-z\-]*')


def _pairs(text, key):
    """The KEY:VALUE tokens after the word ``key`` of a dcb printout ('prio-pfc 0:off 1:on'), up
    to the first word without a colon; None when no ``key`` is followed by one. One pass over
    the words (a regular expression of repeated KEY:VALUE groups backtracks quadratically)."""
    words = (text or '').split()
    # Walked by index, never sliced (a copy of the words after each of thousands of keys is
    # quadratic): the scan after a key stops at the next word without a colon, at the latest
    # the next key, so every word is read once.
    index, count = 0, len(words)
    while index < count:
        if words[index] != key:
            index += 1
            continue
        found = []
        index += 1
        while index < count:
            name, sep, value = words[index].partition(':')
            if not sep:
                break
            if _ALNUM_RE.match(name) and _ALNUM_RE.match(value):
                found.append((name, value))
            index += 1
        if found:
            return found
    return None


def _dscp(token):
    if token.upper() in DSCP_NAMES:
        return DSCP_NAMES[token.upper()]
    value = parse_int(token)
    return value if value is not None and 0 <= value <= 63 else None


def parse_mlnx_qos(text):
    """``mlnx_qos -i IF`` -> {trust, pfc, dscp2prio, prio_tc, tc_tsa} (None where absent).

    The layout (mlnx-tools python/mlnx_qos pretty_print): 'Priority trust state: dscp', a
    'dscp2prio mapping:' block of 'prio:N dscp:..,' rows, 'PFC configuration:' with a
    'priority 0 .. 7' and an 'enabled 0 0 0 1 ..' row, then 'tc: N ratelimit: .., tsa: ..'
    blocks each followed by ' priority:  N' rows (older versions: 'tc: N ... tsa: ets, bw: 14%').
    """
    text = text or ''
    result = {'trust': None, 'pfc': None, 'dscp2prio': None, 'prio_tc': None, 'tc_tsa': None, 'tc_bw': None}
    lines = text.splitlines()
    trust = header = enabled = None
    mapping, row_prio = None, None
    for line in lines:
        if not line or line.isspace():
            continue  # a blank line neither ends nor continues a dscp2prio row
        if trust is None:
            trust = _TRUST_RE.match(line)
        if header is None:
            header = _PFC_HEADER_RE.match(line)
        if enabled is None:
            enabled = _PFC_ROW_RE.match(line)
        row = _DSCP_ROW_RE.match(line)
        if row:
            row_prio, dscps = int(row.group('prio')), row.group('dscps')
        elif row_prio is not None and _DSCP_MORE_RE.match(line):
            dscps = line
        else:
            row_prio = None
            continue
        mapping = {} if mapping is None else mapping
        for token in dscps.replace(',', ' ').split():
            dscp = _dscp(token)
            if dscp is not None:
                mapping[dscp] = row_prio
    result['dscp2prio'] = mapping
    if trust and trust.group('trust').lower() in ('pcp', 'dscp'):
        result['trust'] = trust.group('trust').lower()
    if header and enabled:
        prios = [int(p) for p in header.group(1).split()]
        flags = [int(f) for f in enabled.group(1).split()]
        result['pfc'] = sorted(p for p, f in zip(prios, flags) if f)
    prio_tc, tsa, bw, current = {}, {}, {}, None
    for line in lines:
        tc = _TC_RE.match(line)
        if tc:
            current = int(tc.group('tc'))
            found = _TSA_RE.search(tc.group('rest'))
            if found:
                tsa[current] = found.group('tsa').lower()
            found = _BW_RE.search(tc.group('rest'))
            if found:
                bw[current] = int(found.group('bw'))
            continue
        prio = _TC_PRIO_RE.match(line)
        if prio and current is not None:
            for token in prio.group('prios').split():
                if parse_int(token) in PRIORITIES:
                    prio_tc[int(token)] = current
    result['prio_tc'] = prio_tc or None
    result['tc_tsa'] = tsa or None
    result['tc_bw'] = bw or None
    return result


def parse_dcb_pfc(text):
    """``dcb pfc show dev IF`` -> sorted priorities with PFC on, or None (no prio-pfc).

    'pfc-cap 8 macsec-bypass off delay 4096' and 'prio-pfc 0:off .. 7:on' on two lines (dcb-pfc(8)),
    or on one line in newer iproute2 ('pfc-cap 8 prio-pfc 0:off .. 3:on .. delay 0'). The first
    dcb pfc (the iproute2 patch that added it, tests/fixtures/public/dcb/iproute2_dcb_pfc_patch_pg_pfc_stats.txt)
    named the map 'pg-pfc': read as the same map."""
    pairs = _pairs(text, 'prio-pfc')
    if pairs is None:
        pairs = _pairs(text, 'pg-pfc')
    if pairs is None:
        return None
    return sorted(parse_int(p) for p, state in pairs if state == 'on' and parse_int(p) in PRIORITIES)


# A PFC frame count is a u64 (include/uapi/linux/dcbnl.h struct ieee_pfc requests[]/indications[]).
PFC_COUNT_MAX = (1 << 64) - 1


def parse_dcb_pfc_stats(text: str | None) -> dict:
    """``dcb -s pfc show dev IF`` (or ``dcb pfc show dev IF requests indications``) -> {'requests':
    {prio: frames}, 'indications': {prio: frames}}, each None where the line is absent.

    'requests' counts the PFC frames the port sent (it asked its peer to pause), 'indications' those
    it received (its peer paused it): struct ieee_pfc, dcbnl.h; dcb-pfc(8). The lines stand alone
    after the map (every iproute2 since the first, tests/fixtures/public/dcb) or only they are asked
    for; a count that is no u64 is left out."""
    found = {}
    for key in ('requests', 'indications'):
        pairs = _pairs(text, key)
        counts = {}
        for prio, value in pairs or []:
            number = parse_int(value) if value.isdigit() and len(value) <= 20 else None
            if parse_int(prio) in PRIORITIES and number is not None and number <= PFC_COUNT_MAX:
                counts[parse_int(prio)] = number
        found[key] = counts if pairs is not None else None
    return found


def _dcb_app_entries(text):
    """{dscp: sorted priorities} of every dscp-prio entry of ``dcb [-N] app show dev IF``."""
    entries = {}
    for dscp, prio in _pairs(text, 'dscp-prio') or []:
        code, level = _dscp(dscp), parse_int(prio)
        if code is not None and level in PRIORITIES:
            entries.setdefault(code, set()).add(level)
    return dict((code, sorted(levels)) for code, levels in entries.items())


def parse_dcb_app(text):
    """``dcb [-N] app show dev IF`` -> {dscp: prio} of the DSCPs mapped to one priority ({} without any).

    Names such as CS3 or AF31 are what dcb prints without -N (dcb-app(8)). A DSCP listed with two
    priorities (dcb-app(8) allows such conflicting entries, and its EXAMPLE shows one: 'CS3:2 CS3:3';
    which one the NIC applies is the driver's choice) is left out here: dcb_app_conflicts names it."""
    return dict((code, levels[0]) for code, levels in _dcb_app_entries(text).items() if len(levels) == 1)


def dcb_app_conflicts(text):
    """``dcb [-N] app show dev IF`` -> {dscp: [priorities]} of the DSCPs mapped to more than one priority."""
    return dict((code, levels) for code, levels in _dcb_app_entries(text).items() if len(levels) > 1)


def parse_dcb_ets(text):
    """``dcb ets show dev IF`` -> (prio_tc, tc_tsa, tc_bw), each a dict or None."""
    prio_tc = dict((parse_int(p), parse_int(t)) for p, t in _pairs(text, 'prio-tc') or []
                   if parse_int(p) in PRIORITIES and parse_int(t) is not None)
    # Traffic classes are 0-7 as priorities are (IEEE 802.1Q 8.6.8; dcb-ets(8)): a class outside them
    # is no record of a NIC, and without this bound a 1 MiB saved output made a dict of 100,000 of them.
    tsa = dict((parse_int(t), value.lower()) for t, value in _pairs(text, 'tc-tsa') or [] if parse_int(t) in PRIORITIES)
    bw = dict((parse_int(t), parse_int(value)) for t, value in _pairs(text, 'tc-bw') or []
              if parse_int(t) in PRIORITIES and parse_int(value) is not None)
    return prio_tc or None, tsa or None, bw or None


def parse_dcb_apptrust(text):
    """``dcb apptrust show dev IF`` ('order pcp dscp' or 'order: dscp pcp') -> the first
    selector, which decides the priority ('dscp' or 'pcp'), or None."""
    # One line at a time with str.split() (a regular expression '\s*:?\s+' over the whole text
    # backtracks over every blank line after each 'order': quadratic in a text of newlines).
    for line in (text or '').splitlines():
        words = line.split()
        start = next((index for index, word in enumerate(words) if word in ('order', 'order:')), None)
        if start is None:
            continue
        for word in words[start + 1:]:
            selector = _SELECTOR_RE.match(word).group()
            if selector in ('dscp', 'pcp'):
                return selector
            if selector != word and word != ':':
                break
    return None


def _ecn(sysroot, netdev, point):
    """{'prio': bool} of ecn/<point>/enable/<prio>, or None where the driver has no such files."""
    base = '%s/%s/ecn/%s/enable' % (NET_CLASS, netdev, point)
    values = {}
    for prio in PRIORITIES:
        value = parse_int(sysroot.text('%s/%d' % (base, prio), quiet=True))
        if value is not None:
            values[str(prio)] = bool(value)
    return values or None


def read_tos(sysroot, device, port):
    """(ToS, source) of RDMA CM for a port: configfs value, the kernel default when configfs
    has no entry for the device, or (None, reason) when configfs is not there to ask."""
    if not sysroot.isdir(RDMA_CM_CONFIGFS):
        return None, 'configfs rdma_cm not found (configfs not mounted or rdma_cm not loaded)'
    value = parse_int(sysroot.text('%s/%s/ports/%s/default_roce_tos' % (RDMA_CM_CONFIGFS, device, port), quiet=True))
    if value is None:
        return KERNEL_DEFAULT_TOS, 'kernel default (no rdma_cm configfs entry for %s)' % device
    return value, 'configfs'


def qos_argv(kind, netdev):
    """The command line of one DCB read (a key of SAVED_KINDS) for ``netdev``."""
    return [word if word != 'IF' else netdev for word in SAVED_KINDS[kind]]


def _why(run, argv, answer, live_words, unparsed=None):
    """Why ``argv`` gave nothing usable: ``live_words`` when the tool ran here, or the saved
    outputs' own words (SavedOutputs.explain: which file, what was wrong with it)."""
    explain = getattr(run, 'explain', None)
    return explain(argv, answer, unparsed) if explain is not None else live_words


def _tool_qos(run, netdev):
    """DCB configuration of ``netdev`` from mlnx_qos, else dcb: (fields, source, reason).
    ``run(argv)`` returns (rc, stdout) or None when the tool is not installed."""
    reasons = []
    argv = qos_argv('mlnx_qos', netdev)
    answer = run(argv)
    if answer is not None and answer[0] == 0:
        fields = parse_mlnx_qos(answer[1])
        if fields['pfc'] is not None:
            fields['dcbx_mode'] = _dcbx.parse_mlnx_qos_dcbx(answer[1])
            return fields, 'mlnx_qos', None
        reasons.append(_why(run, argv, answer, 'mlnx_qos printed no PFC configuration', 'no "PFC configuration" block'))
    else:
        reasons.append(_why(run, argv, answer, 'mlnx_qos not installed' if answer is None else 'mlnx_qos failed (rc %s)' % answer[0]))
    argv = qos_argv('dcb_pfc', netdev)
    pfc = run(argv)
    if pfc is None:
        return None, None, '; '.join(reasons + [_why(run, argv, pfc, 'dcb (iproute2) not installed')])
    if pfc[0] != 0:
        return None, None, '; '.join(reasons + [_why(run, argv, pfc, 'dcb pfc show failed (rc %s)' % pfc[0])])
    if parse_dcb_pfc(pfc[1]) is None:
        return None, None, '; '.join(reasons + [_why(run, argv, pfc, 'dcb pfc show printed no prio-pfc map', 'no "prio-pfc" map')])
    fields = {'pfc': parse_dcb_pfc(pfc[1]), 'trust': None, 'dscp2prio': None, 'prio_tc': None, 'tc_tsa': None, 'tc_bw': None}
    app = run(qos_argv('dcb_app', netdev))
    if app is not None and app[0] == 0:
        fields['dscp2prio'] = parse_dcb_app(app[1])
        fields['dscp_conflicts'] = dcb_app_conflicts(app[1])
    ets = run(qos_argv('dcb_ets', netdev))
    if ets is not None and ets[0] == 0:
        fields['prio_tc'], fields['tc_tsa'], fields['tc_bw'] = parse_dcb_ets(ets[1])
    trust = run(qos_argv('dcb_apptrust', netdev))
    if trust is not None and trust[0] == 0:
        fields['trust'] = parse_dcb_apptrust(trust[1])
    return fields, 'dcb', None


def read_dcbx(run, netdev: str | None, mode: str | None = None, reason: str | None = None, source: str | None = None) -> dict:
    """Who manages the DCB of ``netdev`` (the port's ``dcbx`` fact): mlnx_qos's DCBX ``mode`` (read
    with the QoS), else ``dcb dcbx show``; then, unless the firmware runs DCBX, lldpad's willing bits
    (``lldptool -t -V PFC``, ``-V ETS-CFG``). A tool that is not there, or fails (lldptool without a
    running lldpad), is said in ``not_read``; ``manager`` and ``why`` are _dcbx.manager's verdict.
    Asked only where the port's QoS was read (``source``); else nothing is, and ``reason`` says why.
    The words are the same whether the tools ran or their saved outputs answered (a snapshot judges as
    the live node: tests/unit/plugins/modules/test_fabric_capture.py)."""
    not_read: dict = {}
    dcbx: dict = {'mode': mode, 'dcb_dcbx': None, 'lldp_willing': None, 'lldp_pfc': None, 'not_read': not_read}
    if run is None or not netdev or source is None:
        dcbx['reason'] = reason or 'the DCB tools were not run'
        dcbx['manager'], dcbx['why'] = _dcbx.manager(dcbx)
        return dcbx
    if mode is None:
        answer = run(qos_argv('dcb_dcbx', netdev))
        dcbx['dcb_dcbx'] = _dcbx.parse_dcb_dcbx(answer[1]) if answer is not None and answer[0] == 0 else None
        if dcbx['dcb_dcbx'] is None:
            dcbx['not_read']['dcb_dcbx'] = ('dcb (iproute2) not installed' if answer is None else
                                            'dcb dcbx show failed (rc %s)' % answer[0] if answer[0] else 'dcb dcbx show printed no DCBX flags')
    if mode != 'firmware':
        parsed = {}
        for kind in ('lldptool_pfc', 'lldptool_ets'):
            answer = run(qos_argv(kind, netdev))
            if answer is None or answer[0] != 0:
                # lldptool answers only through a running lldpad: one failure says it for both TLVs.
                dcbx['not_read']['lldptool'] = dcbx['lldp_reason'] = (
                    'lldptool (lldpad) not installed' if answer is None else
                    'lldptool failed (rc %s): no LLDP agent (lldpad) answers for %s' % (answer[0], netdev))
                break
            parsed[kind] = _dcbx.parse_lldptool(answer[1])
        if parsed:
            dcbx['lldp_willing'] = _dcbx.lldp_willing(parsed.get('lldptool_pfc'), parsed.get('lldptool_ets'))
            dcbx['lldp_pfc'] = ((parsed.get('lldptool_pfc') or {}).get('pfc') or {}).get('enabled')
    dcbx['manager'], dcbx['why'] = _dcbx.manager(dcbx)
    return dcbx


def gid_index_v2(port):
    """Lowest index of a RoCE v2 GID with an IPv4 address (what NCCL_IB_GID_INDEX names), or None."""
    indexes = [g.get('index') for g in port.get('gids') or [] if g.get('type') == 'RoCE v2' and g.get('ipv4')]
    return min(indexes) if indexes else None


def read_roce(sysroot, devices, run=None):
    """RoCE QoS facts of every Ethernet port of ``devices`` (ib_link_facts' read_ib output).

    ``run``: callable(argv) -> (rc, stdout) or None (tool not installed), or a SavedOutputs
    (the tools' saved outputs); None: the tools are not asked (a snapshot of another node) and
    the DCB fields say so."""
    ports = []
    for device in devices or []:
        for port in device.get('ports') or []:
            if port.get('link_layer') != 'Ethernet':
                continue
            netdev = port.get('netdev')
            entry = {'hca': device.get('name'), 'port': port.get('port'), 'netdev': netdev,
                     'state': port.get('state'), 'netdev_mtu': port.get('netdev_mtu'), 'active_mtu': port.get('active_mtu'),
                     'gid_index': gid_index_v2(port)}
            fields, source, reason = None, None, 'the port has no netdev'
            bad_name = netdev_name_problem(netdev) if netdev else None
            if bad_name:
                # A name that no kernel gives an interface (a damaged snapshot): it goes onto no
                # command line and into no path.
                reason, netdev = 'the netdev name %s is not an interface name (%s): not read' % (ascii(entry['netdev']), bad_name), None
            elif netdev and run is None:
                reason = 'the DCB tools were not run (root is not this node, or qos_tools=never)'
            elif netdev and getattr(run, 'has', None) is not None and not run.has(netdev):
                reason = 'no saved output of mlnx_qos or dcb for %s (%s): not checked' % (netdev, run.where())
            elif netdev:
                fields, source, reason = _tool_qos(run, netdev)
            fields = fields or {'trust': None, 'pfc': None, 'dscp2prio': None, 'prio_tc': None, 'tc_tsa': None, 'tc_bw': None}
            # Maps keyed by strings, as the facts reach the controller (JSON object keys).
            entry.update((name, dict((str(k), v) for k, v in value.items()) if isinstance(value, dict) else value)
                         for name, value in fields.items())
            # mlnx_qos prints the NIC's table, one priority per DSCP: no conflict to hold.
            entry.setdefault('dscp_conflicts', None if entry.get('dscp2prio') is None else {})
            entry.update(source=source, source_reason=reason, dcbx=read_dcbx(run, netdev, entry.pop('dcbx_mode', None), reason, source))
            entry['ecn_np'] = _ecn(sysroot, netdev, 'roce_np') if netdev else None
            entry['ecn_rp'] = _ecn(sysroot, netdev, 'roce_rp') if netdev else None
            base = '%s/%s/ecn/roce_np' % (NET_CLASS, netdev)
            entry['cnp_dscp'] = parse_int(sysroot.text(base + '/cnp_dscp', quiet=True)) if netdev else None
            entry['cnp_prio'] = parse_int(sysroot.text(base + '/cnp_802p_prio', quiet=True)) if netdev else None
            entry['roce_tos'], entry['roce_tos_source'] = read_tos(sysroot, device.get('name'), port.get('port'))
            hw = dict(device.get('hw_counters') or {})
            hw.update(port.get('hw_counters') or {})
            entry['counters'] = dict((name, hw.get(name)) for name in CONGESTION_COUNTERS + LOSS_COUNTERS if name in hw)
            ports.append(entry)
    return ports


def rdma_priority(entry, tos=None):
    """The 802.1p priority RoCE traffic of ``tos`` (default: the port's RDMA CM ToS) lands
    in on this port: trust dscp maps ToS >> 2 through the DSCP map; trust pcp takes the VLAN
    PCP, which an untagged routed RoCE v2 packet does not carry, so priority 0."""
    tos = entry.get('roce_tos') if tos is None else tos
    if entry.get('trust') == 'pcp':
        return 0
    if entry.get('trust') != 'dscp' or tos is None or entry.get('dscp2prio') is None:
        return None
    if str(tos >> 2) in (entry.get('dscp_conflicts') or {}):
        return None     # mapped to two priorities (dcb app): which one applies is not known
    # parse_int: a key of a snapshot's facts may be anything (not a number, 5,000 digits past int()'s limit).
    mapping = dict((parse_int(str(k)), v) for k, v in (entry['dscp2prio'] if isinstance(entry['dscp2prio'], dict) else {}).items())
    # mlx5's default DSCP map (a DSCP missing from the table): dscp >> 3, the class selector.
    return mapping.get(tos >> 2, (tos >> 2) >> 3)


# ---------------------------------------------------------------------------- running the tools

def tool_runner(find, timeout=20):
    """``run(argv)`` for read_roce/apply: argv[0] looked up with ``find`` (the module's
    get_bin_path: None when not installed), run bounded by ``timeout`` seconds in the C locale
    (_process.run), answering (rc, stdout); a run past the timeout answers rc 124."""
    def run(argv):
        binary = find(argv[0])
        if binary is None:
            return None
        launched = _process.run([binary] + list(argv[1:]), timeout, name=argv[0])
        out, _err = launched.output()
        return (124 if launched.timed_out else launched.rc), out
    return run


# ---------------------------------------------------------------------------- saved outputs

def saved_kind(argv):
    """(netdev, kind) of a DCB read's command line (qos_argv), or None for any other command."""
    argv = list(argv)
    if not argv:
        return None
    for kind in SAVED_KINDS:
        if qos_argv(kind, argv[-1]) == argv:
            return argv[-1], kind
    return None


def saved_text(argv, answer):
    """The saved output of ``argv`` as fabric_capture stores it: SAVED_MAGIC, the command and its
    rc (or that the tool was not installed) as '# key: value' header lines, then its stdout."""
    lines = [SAVED_MAGIC, '# command: %s' % ' '.join(argv)]
    if answer is None:
        lines.append('# error: not installed')
        return '\n'.join(lines) + '\n'
    lines.append('# rc: %d' % answer[0])
    return '\n'.join(lines) + '\n' + (answer[1] or '')


def parse_saved(text, argv=None):
    """A saved output -> (answer, problem): answer (rc, stdout) or None for a tool that was not
    installed; problem: why it cannot be used, or None. A file without SAVED_MAGIC is the tool's
    stdout as it was pasted, rc 0. With ``argv``, the header's command must be that one (a saved
    output renamed to another netdev or kind is not used)."""
    if not text.startswith(SAVED_MAGIC + '\n'):
        return (0, text), None
    header, rest = {}, text[len(SAVED_MAGIC) + 1:]
    while rest.startswith('# '):
        line, _sep, after = rest.partition('\n')
        key, sep, value = line[2:].partition(': ')
        if not sep or key not in ('command', 'rc', 'error') or key in header:
            break   # the tool's own output from here on
        header[key], rest = value.strip(), after
    if argv is not None and header.get('command') != ' '.join(argv):
        return None, 'its header names the command %s, not "%s"' % (ascii(header.get('command'))[:120], ' '.join(argv))
    if header.get('error') == 'not installed':
        return None, None
    rc = parse_int(header.get('rc'))
    if rc is None:
        return None, 'its header names no rc (%s)' % ascii(header.get('rc'))[:40]
    return (rc, rest), None


def _read_bounded(path, limit):
    """Bytes of the regular file ``path`` (no symlink followed at its last component), or
    ValueError when it is no regular file or longer than ``limit`` (_paths.read_regular)."""
    return _paths.read_regular(path, limit)


class SavedOutputs(object):
    """The DCB tools' saved outputs, answering read_roce as the tools would (``run``).

    ``paths``: directories (each entry named <netdev>.<kind>.txt, SAVED_KINDS) and files named so.
    A name that is not of that form, or whose netdev is not an interface name, is refused and
    listed with why; a file is read (bounded, regular files only) when a port asks for it.
    ``explain`` says, for a read that gave nothing usable, which file and what was wrong.
    """

    # DOTALL and \Z: a newline in the netdev part, or after '.txt', is a name to refuse, not to miss.
    _NAME_RE = re.compile(r'^(?P<netdev>.+)\.(?P<kind>%s)\.txt\Z' % '|'.join(sorted(SAVED_KINDS, key=len, reverse=True)), re.S)

    def __init__(self, paths):
        self.paths = list(paths or [])
        self.files = {}        # (netdev, kind) -> path
        self.refused = []      # {'path', 'reason'}: the first SAVED_REFUSED_LISTED
        self.refused_more = 0  # refused, or not looked at (past SAVED_MAX_NAMES), and not listed
        self.read = []         # paths read, in order
        self._notes = {}       # (netdev, kind) -> why it gave nothing
        self._asked = set()
        for path in self.paths:
            if os.path.isdir(path):
                try:
                    names = sorted(os.listdir(path))
                except OSError as exc:
                    self._refuse(path, 'cannot list: %s' % (exc.strerror or exc))
                    continue
                for name in names[:SAVED_MAX_NAMES]:
                    self._add(os.path.join(path, name), name)
                if len(names) > SAVED_MAX_NAMES:
                    self._refuse(path, '%d more file(s) not looked at: a directory of saved outputs holds a few per netdev '
                                 '(the first %d names are)' % (len(names) - SAVED_MAX_NAMES, SAVED_MAX_NAMES))
            else:
                self._add(path, os.path.basename(path))

    def _refuse(self, path, reason):
        if len(self.refused) < SAVED_REFUSED_LISTED:
            self.refused.append({'path': path, 'reason': reason})
        else:
            self.refused_more += 1

    def _add(self, path, name):
        match = self._NAME_RE.match(name)
        if not match:
            self._refuse(path, 'not named <netdev>.<%s>.txt' % '|'.join(SAVED_KINDS))
            return
        netdev, kind = match.group('netdev'), match.group('kind')
        problem = netdev_name_problem(netdev)
        if problem:
            self._refuse(path, 'the netdev name %s is not an interface name (%s)' % (ascii(netdev), problem))
        elif (netdev, kind) in self.files:
            self._refuse(path, 'a second output of %s for %s (%s is used)' % (kind, netdev, self.files[(netdev, kind)]))
        else:
            self.files[(netdev, kind)] = path

    def has(self, netdev):
        return any(key[0] == netdev for key in self.files)

    def where(self):
        return ', '.join(self.paths) or 'no path given'

    def unused(self):
        """Saved outputs no port asked for (a netdev the node does not have)."""
        return sorted(path for key, path in self.files.items() if key not in self._asked)

    def __call__(self, argv):
        key = saved_kind(argv)
        if key is None:
            return None
        self._asked.add(key)
        path = self.files.get(key)
        if path is None:
            self._notes[key] = 'no saved output %s.%s.txt' % key
            return None
        try:
            data = _read_bounded(path, SAVED_MAX_BYTES)
        except (OSError, ValueError) as exc:
            self._notes[key] = '%s not read: %s' % (path, getattr(exc, 'strerror', None) or exc)
            return None
        self.read.append(path)
        answer, problem = parse_saved(data.decode('utf-8', 'replace'), argv)
        if problem:
            self._notes[key] = '%s is no saved output: %s' % (path, problem)
            return None
        if answer is None:
            self._notes[key] = '%s: %s was not installed on the node' % (path, argv[0])
        return answer

    def explain(self, argv, answer, unparsed=None):
        key = saved_kind(argv)
        if key in self._notes:
            return self._notes[key]
        path = self.files.get(key, '%s.%s.txt' % key if key else '?')
        if unparsed:
            return '%s: %s in it (is it the output of "%s"?)' % (path, unparsed, ' '.join(argv))
        return '%s: "%s" failed on the node (rc %s)' % (path, ' '.join(argv), answer[0] if answer else '?')


# ---------------------------------------------------------------------------- configuring

def desired_port(want):
    """The values a port must have for ``want`` (roce_qos module options): the compared fields."""
    prio = want['priority']
    return {'trust': want['trust'], 'pfc': [prio], 'dscp_prio': (want['dscp'], prio),
            'ecn': prio if want['ecn'] else None, 'cnp_dscp': want['cnp_dscp'], 'cnp_prio': want['cnp_priority'],
            'roce_tos': want['tos']}


def _write(path, value, skip_if_absent):
    return {'write': path, 'value': value, 'skip_if_absent': skip_if_absent}


def settings(port, want, tool):
    """Every setting ``want`` (roce_qos module options) makes on one port read by read_roce, in the
    order they are applied: [(field, have, want, steps, differs)]. ``tool``: 'mlnx_qos' or 'dcb',
    what sets the DCB part (the tool that answered read_roce: the port's ``source``).

    ``steps`` set the field, in order, each one of:

    - ``{'argv': [...]}``: run the command;
    - ``{'write': node path, 'value': text, 'skip_if_absent': bool}``: write the text and a newline
      into the file; with ``skip_if_absent`` a boot script does nothing where the file is absent
      (the module plans such a write only where it read the file);
    - ``{'mkdir': node path}``: make the directory unless it is there.

    ``differs``: whether the port differs from ``want`` there now. The module changes only what
    differs (plan); the boot script runs the steps of every setting (boot_steps): a reboot or a
    driver reload resets them all. One list for both, so the two cannot drift apart."""
    goal, netdev, found = desired_port(want), port['netdev'], []
    mlnx = tool == 'mlnx_qos'
    trust = goal['trust']
    argv = ['mlnx_qos', '-i', netdev, '--trust', trust] if mlnx else ['dcb', 'apptrust', 'set', 'dev', netdev, 'order', trust]
    found.append(('trust', port.get('trust'), trust, [{'argv': argv}], port.get('trust') != trust))
    flags = ','.join('1' if p in goal['pfc'] else '0' for p in PRIORITIES)
    argv = (['mlnx_qos', '-i', netdev, '--pfc', flags] if mlnx
            else ['dcb', 'pfc', 'set', 'dev', netdev, 'prio-pfc', 'all:off'] + ['%d:on' % p for p in goal['pfc']])
    found.append(('pfc', port.get('pfc'), goal['pfc'], [{'argv': argv}], sorted(port.get('pfc') or []) != goal['pfc']))
    dscp, prio = goal['dscp_prio']
    mapping = dict((parse_int(str(k)), v) for k, v in (port.get('dscp2prio') or {}).items())
    # A DSCP with two priorities (dcb app) is changed too: `dcb app replace` drops its other entries (dcb-app(8)).
    have = (port.get('dscp_conflicts') or {}).get(str(dscp)) or mapping.get(dscp, dscp >> 3)
    argv = (['mlnx_qos', '-i', netdev, '--dscp2prio', 'set,%d,%d' % (dscp, prio)] if mlnx
            else ['dcb', 'app', 'replace', 'dev', netdev, 'dscp-prio', '%d:%d' % (dscp, prio)])
    found.append(('dscp %d priority' % dscp, have, prio, [{'argv': argv}], have != prio))
    # The ecn/ files are MLNX OFED's mlx5 (en_ecn.c; the inbox mlx5 has no ecn/ directory): a port
    # without them is not changed now, and at boot - after OFED was removed, say - the write is
    # skipped where its file is absent rather than failing the unit over a setting the driver lacks.
    if goal['ecn'] is not None:
        for point in ('roce_np', 'roce_rp'):
            values = dict((parse_int(str(k)), v) for k, v in (port.get('ecn_' + point[5:]) or {}).items())
            step = _write('%s/%s/ecn/%s/enable/%d' % (NET_CLASS, netdev, point, goal['ecn']), '1', True)
            found.append(('%s ecn priority %d' % (point, goal['ecn']), bool(values.get(goal['ecn'])) if values else None, True,
                          [step], bool(values) and not values.get(goal['ecn'])))
    for field, name in (('cnp_dscp', 'cnp_dscp'), ('cnp_prio', 'cnp_802p_prio')):
        step = _write('%s/%s/ecn/roce_np/%s' % (NET_CLASS, netdev, name), str(goal[field]), True)
        found.append((field, port.get(field), goal[field], [step], port.get(field) is not None and port.get(field) != goal[field]))
    if goal['roce_tos'] is not None:
        # configfs: the device directory is made by mkdir (cma_configfs.c make_cma_dev, which makes
        # its ports/N), then ports/N/default_roce_tos is written. Neither is skipped at boot: without
        # rdma_cm loaded, or with the device renamed, the mkdir fails (make_cma_dev: -ENODEV) and the
        # unit shows it. The device name comes from /sys/class/infiniband (a directory entry: no '/').
        device = '%s/%s' % (RDMA_CM_CONFIGFS, port['hca'])
        steps = [{'mkdir': device}, _write('%s/ports/%s/default_roce_tos' % (device, port['port']), str(goal['roce_tos']), False)]
        found.append(('rdma_cm default_roce_tos', port.get('roce_tos'), goal['roce_tos'], steps, port.get('roce_tos') != goal['roce_tos']))
    return found


def plan(port, want, tool):
    """[(field, have, want, steps)] of the settings (settings()) of one port that differ now."""
    return [entry[:4] for entry in settings(port, want, tool) if entry[4]]


def boot_steps(ports, want):
    """The steps of every setting of every port of ``ports`` (read_roce, each set with the tool
    that answered its read, ``source``), in order: what the boot script runs (roce_qos' boot_plan).

    The script runs them as they are: a tool missing at boot, or a netdev renamed since (mlnx_qos
    -i / dcb dev of a name the kernel does not know), fails its step and the unit; run the role
    again to plan anew. No other tool is tried: the one that read the port is the one that sets it."""
    return [step for port in ports for entry in settings(port, want, port['source']) for step in entry[3]]


def apply(sysroot, run, change):
    """Carry out the steps of one planned change (plan()), in order; returns None, or why the
    first that failed did."""
    # Below a simulated root, paths resolved afresh: the reads before remember a directory as
    # missing that a step of this change has just made (the configfs device directory).
    where = sysroot if sysroot.live else SysRoot(sysroot.root)
    for step in change[3]:
        error = apply_step(where, run, step)
        if error:
            return error
    return None


def apply_step(sysroot, run, step):
    """Carry out one step (settings()) on the node below ``sysroot``; returns None, or why it failed."""
    if 'argv' in step:
        argv = step['argv']
        answer = run(argv)
        if answer is None:
            return '%s is not installed' % argv[0]
        return None if answer[0] == 0 else '%s failed (rc %s): %s' % (' '.join(argv), answer[0], answer[1].strip()[-300:])
    if 'mkdir' in step:
        return _make_dir(sysroot, step['mkdir'])
    return _write_text(sysroot, step['write'], step['value'])


def _make_dir(sysroot, rel):
    parent, _sep, name = rel.rpartition('/')
    try:
        if sysroot.live:
            if not os.path.isdir(rel):
                os.mkdir(rel)
            return None
        host = sysroot.host_path(parent) + '/' + name
        if os.path.islink(host):
            return 'cannot make %s: it is a symlink: it is not followed' % rel
        if not os.path.isdir(host):
            os.mkdir(host)
        if parent == RDMA_CM_CONFIGFS:
            # A simulated node: configfs is a plain directory there, and no kernel makes the
            # device's ports/N on mkdir (cma_configfs.c make_cma_dev does, one per port).
            for port in sysroot.listdir('/sys/class/infiniband/%s/ports' % name):
                os.makedirs('%s/ports/%s' % (host, port), exist_ok=True)
    except OSError as exc:
        return 'cannot make %s: %s' % (rel, exc.strerror or exc)
    return None


def _write_text(sysroot, rel, value):
    try:
        if sysroot.live:
            target = rel
        else:
            parent = sysroot.host_path(os.path.dirname(rel))
            target = parent + '/' + os.path.basename(rel)
        _write_regular(target, value, create=not sysroot.live)
    except NotRegular as exc:
        return 'cannot write %s: it is %s' % (rel, exc)
    except OSError as exc:
        return 'cannot write %s: %s' % (rel, exc.strerror or exc)
    return None


def _write_regular(path, value, create=False):
    """``value`` and a newline into the existing regular file ``path`` (a sysfs or configfs
    attribute): a symlink at ``path`` is not followed and a FIFO, device or directory refused
    (NotRegular), so a snapshot or simulated root is never written through to outside it."""
    fd = open_regular_to_write(path, create=create)
    try:
        os.write(fd, (value + '\n').encode())
    finally:
        os.close(fd)
