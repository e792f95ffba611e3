# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Parsers of the infiniband-diags views of the fabric into ONE structure.

``iblinkinfo`` and ``ibnetdiscover`` (its topology file or, with -p, its ports report) give the
topology (switches, CAs, the links between their ports with width and speed, the peers' node
descriptions and GUIDs), ``sminfo`` the subnet manager a port sees, ``saquery SMIR`` every SM the
master knows, ``perfquery`` the port counters. ``topology()`` merges them:

    {'nodes': {id: {'id', 'type': 'switch'|'ca'|None, 'guid', 'desc', 'lids'}},
     'links': [{'a': end, 'b': end or None, 'state', 'phys_state', 'width', 'lanes',
                'lane_gbps', 'speed', 'gbps', 'could_be': {'width', 'lane_gbps'}}],
     'unparsed': [line numbers and texts nothing could read]}

with ``end`` = {'node': id, 'lid', 'port', 'desc', 'guid'}. A node id is its GUID
('0x' and 16 hex digits) when the output names it, else 'lid-<LID>'. Formats are the ones
infiniband-diags prints (rdma-core infiniband-diags/iblinkinfo.c print_port(),
ibnetdiscover.c, sminfo.c, perfquery.c) and are proven on tests/fixtures/public/{iblinkinfo,
ibnetdiscover,sminfo,saquery,perfquery}/. Nothing here raises on odd input: a line that cannot be
read is counted and listed in ``unparsed`` (the facts' ``unread``), never guessed and never dropped.
"""

from __future__ import annotations

import re
from typing import Any

# Per-lane signalling rates as infiniband-diags prints them (rdma-core libibmad/dump.c
# mad_dump_linkspeed()/mad_dump_linkspeedext(): "2.5 Gbps" .. "106.25 Gbps"), and the names
# ibnetdiscover prints for them ("4xSDR" .. "4xNDR", ibnetdiscover.c).
LANE_GBPS = {'SDR': 2.5, 'DDR': 5.0, 'QDR': 10.0, 'FDR10': 10.3125, 'FDR': 14.0625, 'EDR': 25.78125,
             'HDR': 53.125, 'NDR': 106.25, 'XDR': 212.5}
_SPEED_OF = dict((gbps, name) for name, gbps in LANE_GBPS.items() if name != 'FDR10')

_GUID = r'0x[0-9a-fA-F]{1,16}'
# iblinkinfo.c print_port(): "%6d %4d[%2s] ==(%3s %18s %6s/%8s)==>  %6d %4d[%2s] \"%s\" (%s %s)",
# the CA lines with "0x%016x " before, line mode (-l) with the node GUID and "\"%30s\"" before
# and the peer's GUID before its LID. A down port: "(              %6s/%8s)" and an empty peer.
# No two runs of blanks meet with only optional items between them, and a bracketed or
# parenthesised field that may hold blanks begins and ends on a non-blank: with '\s*' on both
# sides of '[^\]]*?' or of an optional group, a line of 800 blanks took 36 s (cubic); checked for
# every pattern by tests/unit/plugins/test_regex_backtracking.py.
_BRACKET = r'\[\s*(?:(?P<%s>[^\]\s](?:[^\]]*[^\]\s])?)\s*)?\]'
_LINK_RE = re.compile(
    r'^\s*(?:(?P<guid>' + _GUID + r')\s+(?:"(?P<ndesc>[^"]*)"\s+)?)?'
    r'(?P<lid>\d{1,5})\s+(?P<port>\d{1,3})' + _BRACKET % 'ext' + r'\s*'
    r'==\(\s*(?:(?P<width>\d{1,2})X\s+(?P<lane>\d{1,3}(?:\.\d{1,6})?)\s+Gbps\s+(?:\((?P<fdr10>FDR10)\)\s+)?)?'
    r'(?P<state>[A-Za-z]+)/\s*(?P<phys>[A-Za-z](?:[A-Za-z ]*[A-Za-z])?)\s*\)'
    r'(?:\s*\(HOQ:\d+\s+VL_Stall:\d+\))?==>\s*'
    r'(?:(?P<pguid>' + _GUID + r')\s+)?(?:(?P<plid>\d{1,5})\s*)?(?P<pport>\d{1,3})?' + _BRACKET % 'pext' + r'\s*'
    r'"(?P<pdesc>[^"]*)"\s*(?:\((?P<extra>[^)]*)\)\s*)?$', re.A)
_NOT_AVAILABLE_RE = re.compile(r'^\s*(?:' + _GUID + r'\s+)?(?P<lid>\d{1,5})\s+(?P<port>\d{1,3})\[[^\]]*\]\s*==\(.*\)==>\s*"Port not available"\s*$', re.A)
_HEADER_RE = re.compile(r'^(?P<type>Switch|CA|Router):\s+(?:(?P<guid>' + _GUID + r')\s+)?(?P<desc>(?:\S.*?)?):\s*$', re.A)
_COULD_WIDTH_RE = re.compile(r'Could be (\d{1,2})X', re.A)
_COULD_SPEED_RE = re.compile(r'Could be (\d{1,3}(?:\.\d{1,6})?) Gbps', re.A)

# ibnetdiscover.c out_switch()/out_ca() and out_switch_port()/out_ca_port():
#   Switch  24 "S-005442ba00003080"         # "ISR9024 Voltaire" base port 0 lid 6 lmc 0
#   [22]    "H-0008f10403961354"[1](8f10403961355)         # "MT23108 ..." lid 4 4xSDR
#   Ca      2 "H-0008f10403960984"          # "MT23108 ..."
#   [1](8f10403960985)     "S-0008f10400410015"[6]         # lid 16 lmc 1 "SW-6IB4 Voltaire" lid 3 4xSDR
_ND_NODE_RE = re.compile(r'^(?P<type>Switch|Ca|Rt)\s+(?P<ports>\d{1,3})\s+"(?P<kind>[SHR])-(?P<guid>[0-9a-fA-F]{1,16})"\s*'
                         r'#\s*"(?P<desc>[^"]*)"(?:.*?\blid\s+(?P<lid>\d{1,5}))?', re.A)
_ND_PORT_RE = re.compile(r'^\[(?P<port>\d{1,3})\](?:\((?P<pguid>[0-9a-fA-F]{1,16})\))?\s+"(?P<kind>[SHR])-(?P<guid>[0-9a-fA-F]{1,16})"'
                         r'\[(?P<rport>\d{1,3})\](?:\((?P<rpguid>[0-9a-fA-F]{1,16})\))?\s*#\s*'
                         r'(?:lid\s+(?P<mylid>\d{1,5})\s+lmc\s+\d+\s+)?"(?P<desc>[^"]*)"\s+lid\s+(?P<lid>\d{1,5})'
                         r'(?:\s+(?P<width>\d{1,2})x(?P<speed>[A-Z0-9]+))?', re.A)
# ibnetdiscover -p (ports report, ibnetdiscover.c dump_ports_report()): one line per port,
#   "%2s %5d %2d 0x%016" PRIx64 " %s %s" (type SW/CA/RT, LID - the switch's base LID or the CA port's -,
#   port, port GUID, width "1x".."12x" or "??", speed "SDR".."XDR" or "???"), then for a connected port
#   " - %2s %5d %2d 0x%016" PRIx64 " ( '%s' - '%s' )" (the peer and both node descriptions), else
#   "%36s'%s'" (the node description alone). Real lines: tests/fixtures/public/ibnetdiscover/*ports*.
_ND_PORTS_RE = re.compile(
    r'^(?P<type>SW|CA|RT|\?\?)\s+(?P<lid>\d{1,5})\s+(?P<port>\d{1,3})\s+(?P<guid>0x[0-9a-fA-F]{1,16})\s+'
    r'(?P<width>\d{1,2}x|\?\?)\s+(?P<speed>[A-Z0-9]{3,5}|\?\?\?)\s*'
    r'(?:-\s+(?P<ptype>SW|CA|RT|\?\?)\s+(?P<plid>\d{1,5})\s+(?P<pport>\d{1,3})\s+(?P<pguid>0x[0-9a-fA-F]{1,16})\s+'
    r"\(\s*'(?P<desc>.*)'\s+-\s+'(?P<pdesc>.*)'\s*\)"
    r"|'(?P<odesc>.*)')\s*$", re.A)
_ND_PORTS_KIND = {'SW': 'switch', 'CA': 'ca', 'RT': 'router'}

# sminfo.c: "sminfo: sm lid %d sm guid 0x%" PRIx64 ", activity count %u priority %d state %d %s"
_SMINFO_RE = re.compile(r'sminfo:\s+sm lid\s+(?P<lid>0x[0-9a-fA-F]+|\d{1,5})\s+sm guid\s+(?P<guid>' + _GUID + r'),\s*'
                        r'activity count\s+(?P<activity>\d{1,10})\s+priority\s+(?P<priority>\d{1,2})'
                        r'(?:\s+state\s+(?P<state>\d)\s*(?P<state_name>SMINFO_[A-Z]+)?)?', re.A)
_SMINFO_COMPLETE_RE = re.compile(r'\bstate\s+\d\b', re.A)
SM_STATES = {0: 'SMINFO_NOTACTIVE', 1: 'SMINFO_DISCOVERING', 2: 'SMINFO_STANDBY', 3: 'SMINFO_MASTER'}

# saquery.c dump_sm_info_record() (saquery SMIR: the SMInfoRecord of every SM the master's SA knows,
# its own and every remote SM it found - opensm osm_sa_sminfo_record.c osm_smir_rcv_process()):
#   "SMInfoRecord dump:" then tab-indented "RID", "LID...................%u", "SMInfo dump:",
#   "GUID..................0x%016" PRIx64, "SM_Key................0x%016" PRIx64, "ActCount..............%u",
#   "Priority..............%u", "SMState...............%u".
_SMIR_HEADER = 'SMInfoRecord dump:'
_SMIR_FIELD_RE = re.compile(r'^(?P<name>LID|GUID|SM_Key|ActCount|Priority|SMState)\.{2,}\s*(?P<value>0x[0-9a-fA-F]{1,16}|\d{1,10})\s*$', re.A)
_SMIR_LABELS = ('RID', 'SMInfo dump:')
# Lines a failed SA query leaves (ibdiag_sa.c IBWARN, saquery.c get_any_records "Query SA failed: %s").
_DIAG_ERROR_RE = re.compile(r'^(?:ibwarn:|ibpanic:|iberror:|\S+: iberror:|Query SA failed|ERROR: Query result|Failed to)', re.A)
# Where a snapshot holds the fabric tools' outputs (fabric_capture packs the files ib_fabric_facts
# ``save_to`` wrote, by these names, which its ``from_log`` reads back: playbooks/capture.yml and
# offline.yml). NOT_READ holds, where the fabric could not be read when the snapshot was taken, the
# status (no_tools or no_ib_port) on its first line and why on the next.
SAVED_DIR = '.gpu_fabric_commands/ib_fabric'
NOT_READ = 'not_read.txt'
SAVED_NAMES = ('iblinkinfo.txt', 'ibnetdiscover.txt', 'sminfo.txt', 'saquery_smir.txt', 'perfquery.1.txt', 'perfquery.2.txt',
               'ibqueryerrors.1.txt', 'ibqueryerrors.2.txt', 'uptime.txt', 'read_at.txt', NOT_READ)
# A saved output is someone else's file: read whole up to this (the iblinkinfo of a few thousand
# switches is tens of MB), refused past it, as module_utils/_sysroot.py WHOLE_LIMIT.
SAVED_LIMIT = 64 << 20

# How many unread lines a parser keeps (each is counted; the facts stay small on a garbage input).
UNREAD_KEPT = 50

# Caps on records. The readers cap bytes (ib_fabric_facts LOG_LIMIT, 64 MiB), which is no cap on
# records: 60 MiB of sminfo lines were 660,000 SM records, an 89 MB module result and about 2 GB
# on the controller. Each cap is a real subnet's size with room; what is past it is not kept,
# counted in the parse's ``dropped`` ({'sms': n, ...}), and ib_fabric_facts says so (facts
# 'partial', and the report's FABRIC_INPUT_UNREAD).
# - Nodes: every CA or router port and every switch (its port 0) holds a unicast LID, and there
#   are 0xBFFF of them, 0x0001-0xBFFF (IBTA Vol 1, 4.1.3; the kernel's be16 LIDs below
#   IB_MULTICAST_LID_BASE 0xC000, include/rdma/ib_verbs.h). The largest subnets have
#   ~48k-64k ports (with LMC 0, one LID each).
MAX_UNICAST_LID = 0xBFFF
NODES_MAX = MAX_UNICAST_LID
# - Port lines (links, both ends of each listed, and perfquery's port blocks): a node port's own
#   line and, above it, a non-blocking three-level fat tree's switch ports (a leaf's down- and
#   up-link, a spine's down- and up-link, a core port) are at most 6 per end port: 8 per LID.
LINKS_MAX = 8 * NODES_MAX
# - SM records: one master and its standbys (IBTA Vol 1, 14.4.1; opensm answers SMInfoRecord with
#   one record per SM it knows): a handful on any subnet.
SMS_MAX = 64
# - Error lines (ibwarn:, iberror:) kept; each is counted like an unread line past it.
ERRORS_MAX = UNREAD_KEPT


def _keep(records, item, cap, dropped, kind):
    """Append ``item`` to ``records`` while it holds fewer than ``cap``; else count it in ``dropped[kind]``."""
    if len(records) < cap:
        records.append(item)
        return True
    dropped[kind] = dropped.get(kind, 0) + 1
    return False


def _room(nodes, *node_ids):
    """True when the nodes ``node_ids`` are known, or there is room for those that are not (NODES_MAX)."""
    return len(nodes) + len(set(n for n in node_ids if n is not None and n not in nodes)) <= NODES_MAX


# perfquery.c: "# Port counters: Lid %d port %d (CapMask: ...)" / "# Port extended counters: ...",
# then "Name:....value" lines (libibmad dump of PortCounters / PortCountersExtended).
_PQ_HEADER_RE = re.compile(r'^#\s*Port (?:extended )?counters:\s*Lid\s+(?P<lid>\d{1,5})\s+port\s+(?P<port>\d{1,3}|ALL)', re.A)
# perfquery prints counters in decimal (%u/%lu; infiniband-diags perfquery.c via mad_dump_field) and
# hexadecimal only with a 0x prefix: '01' is one (int(v, 0) refuses a leading zero). Digits bounded:
# 64-bit counters have at most 20 decimal or 16 hexadecimal digits.
_PQ_FIELD_RE = re.compile(r'^(?P<name>[A-Za-z0-9]+):\.*(?P<value>0[xX][0-9a-fA-F]{1,16}|\d{1,20})\s*$', re.A)
# perfquery field names -> the sysfs counter names of ib_link_facts (kernel
# drivers/infiniband/core/sysfs.c port counters), so both views compare.
PERFQUERY_NAMES = {
    'SymbolErrorCounter': 'symbol_error', 'LinkErrorRecoveryCounter': 'link_error_recovery',
    'LinkDownedCounter': 'link_downed', 'PortRcvErrors': 'port_rcv_errors',
    'PortRcvRemotePhysicalErrors': 'port_rcv_remote_physical_errors',
    'PortRcvSwitchRelayErrors': 'port_rcv_switch_relay_errors', 'PortXmitDiscards': 'port_xmit_discards',
    'PortXmitConstraintErrors': 'port_xmit_constraint_errors', 'PortRcvConstraintErrors': 'port_rcv_constraint_errors',
    'LocalLinkIntegrityErrors': 'local_link_integrity_errors',
    'ExcessiveBufferOverrunErrors': 'excessive_buffer_overrun_errors', 'VL15Dropped': 'VL15_dropped',
    'PortXmitWait': 'port_xmit_wait', 'PortXmitData': 'port_xmit_data', 'PortRcvData': 'port_rcv_data',
}


def guid(text):
    """'0x2c90200259201' / '2c90200259201' / 'a088:c203:005a:ab6c' -> '0x0002c90200259201'; None if no GUID."""
    if not isinstance(text, str):
        return None
    digits = text.strip().lower()
    digits = digits[2:] if digits.startswith('0x') else digits
    digits = digits.replace(':', '')
    if not digits or len(digits) > 16 or not re.match(r'^[0-9a-f]+$', digits):
        return None
    return '0x%016x' % int(digits, 16)


def _lane(value):
    return float(value) if value is not None else None


def _speed_name(lane_gbps):
    return _SPEED_OF.get(lane_gbps) if lane_gbps is not None else None


# A NodeDescription is 64 bytes (IBTA Vol 1, 14.2.5.2 NodeDescription): one longer than twice that
# is no node's, and is cut there. With the caps on records this bounds the result: a 60 MiB line
# was otherwise copied into the node and both ends of every link it named.
DESC_MAX = 128


def _desc(desc):
    return desc[:DESC_MAX] if isinstance(desc, str) else desc


def _end(node, lid, port, desc=None, node_guid=None):
    return {'node': node, 'lid': lid, 'port': port, 'desc': _desc(desc), 'guid': node_guid}


def _add_node(nodes, node_id, kind=None, node_guid=None, desc=None, lid=None):
    desc = _desc(desc)
    node = nodes.setdefault(node_id, {'id': node_id, 'type': None, 'guid': None, 'desc': None, 'lids': []})
    node['type'] = node['type'] or kind
    node['guid'] = node['guid'] or node_guid
    node['desc'] = node['desc'] if node['desc'] is not None else desc
    if lid is not None and lid not in node['lids']:
        node['lids'].append(lid)
    return node


def parse_iblinkinfo(text):
    """iblinkinfo (default or line mode) -> {'nodes', 'links', 'unparsed', 'unparsed_count', 'dropped'}
    (links may appear from both ends; ``topology()`` merges them)."""
    nodes, links, unparsed, dropped = {}, [], [], {}
    count = 0
    header = None
    lines = (text or '').splitlines()
    skip = 0
    for index, raw in enumerate(lines):
        number = index + 1
        if skip:
            skip -= 1
            continue
        if not raw.strip():
            continue
        line, match, skip = _iblinkinfo_line(lines, index)
        if match is not None and match.re is _HEADER_RE:
            kind = {'Switch': 'switch', 'CA': 'ca', 'Router': 'router'}[match.group('type')]
            header = {'type': kind, 'guid': guid(match.group('guid')), 'desc': match.group('desc')}
            continue
        if match is None:
            if _NOT_AVAILABLE_RE.match(line) is None:
                count += 1
                _unread(unparsed, number, raw, _LINKINFO_UNREAD)
                if _HEADER_START_RE.match(raw):
                    # A header not read: the port lines after it belong to no node read so far.
                    header = None
            continue
        lid, port = int(match.group('lid')), int(match.group('port'))
        line_guid = guid(match.group('guid'))
        if match.group('ndesc') is not None:          # line mode: the node's own GUID and description
            kind, node_guid, desc = None, line_guid, match.group('ndesc').strip()
        elif header is not None:
            kind, desc = header['type'], header['desc']
            node_guid = header['guid'] if header['type'] == 'switch' else line_guid
        else:                                          # an excerpt without headers (grep)
            kind, node_guid, desc = ('ca' if line_guid else None), line_guid, None
        node_id = node_guid or 'lid-%d' % lid
        peer_id = (guid(match.group('pguid')) or 'lid-%d' % int(match.group('plid'))) if match.group('plid') else None
        if len(links) >= LINKS_MAX or not _room(nodes, node_id, peer_id):
            dropped['links'] = dropped.get('links', 0) + 1
            continue
        _add_node(nodes, node_id, kind, node_guid, desc, lid)
        lane = _lane(match.group('lane'))
        width = int(match.group('width')) if match.group('width') else None
        extra = match.group('extra') or ''
        could_width = _COULD_WIDTH_RE.search(extra)
        could_speed = _COULD_SPEED_RE.search(extra)
        peer = None
        if match.group('plid'):
            plid, pport = int(match.group('plid')), int(match.group('pport')) if match.group('pport') else None
            pguid = guid(match.group('pguid'))
            pid = pguid or 'lid-%d' % plid
            _add_node(nodes, pid, None, pguid, match.group('pdesc'), plid)
            peer = _end(pid, plid, pport, match.group('pdesc'), pguid)
        speed = 'FDR10' if match.group('fdr10') else _speed_name(lane)
        links.append({
            'a': _end(node_id, lid, port, desc, node_guid), 'b': peer,
            'state': match.group('state'), 'phys_state': match.group('phys').strip(),
            'width': '%dX' % width if width else None, 'lanes': width, 'lane_gbps': lane, 'speed': speed,
            'gbps': round(width * lane, 4) if width and lane else None,
            'could_be': {'width': '%sX' % could_width.group(1) if could_width else None,
                         'lane_gbps': float(could_speed.group(1)) if could_speed else None},
            'source': 'iblinkinfo'})
    return {'nodes': nodes, 'links': links, 'unparsed': unparsed, 'unparsed_count': count, 'dropped': dropped}


# A NodeDescription is 64 bytes of the node's choosing (IBTA NodeDescription; Linux sets it from
# /sys/class/infiniband/<dev>/node_desc): a newline in one splits its header or port line of
# iblinkinfo. Such a line is read joined with the lines after it (at most _WRAP_LINES), the
# newline kept as a space.
_WRAP_LINES = 3
_LINKINFO_UNREAD = 'neither a node header nor a port line, alone or joined with the %d line(s) after it' % _WRAP_LINES
_HEADER_START_RE = re.compile(r'^\s*(?:Switch|CA|Router):')


def _iblinkinfo_line(lines, index):
    """(line, match of _HEADER_RE or _LINK_RE or None, lines joined after it) for lines[index]."""
    line = lines[index]
    # Only a header's start or a port line with a description still open can be split by one.
    joinable = _HEADER_START_RE.match(line) is not None or line.count('"') % 2 == 1
    for extra in range(_WRAP_LINES + 1 if joinable else 1):
        if extra:
            if index + extra >= len(lines):
                break
            following = lines[index + extra]
            if _HEADER_RE.match(following.strip()) or _LINK_RE.match(following) or _NOT_AVAILABLE_RE.match(following):
                break  # a line that reads on its own is no continuation
            line = line + ' ' + following.strip()
        match = _HEADER_RE.match(line.strip()) or _LINK_RE.match(line)
        if match is not None:
            return line, match, extra
        if not extra and _NOT_AVAILABLE_RE.match(line):
            return line, None, 0
    return lines[index], None, 0


def parse_ibnetdiscover(text):
    """ibnetdiscover's topology file -> {'nodes', 'links', 'unparsed', 'unparsed_count', 'dropped'}."""
    nodes, links, unparsed, dropped = {}, [], [], {}
    count = 0
    current = None
    for number, raw in enumerate((text or '').splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith('#') or '=' in line.split(' ', 1)[0] or line == 'Non-Chassis Nodes' \
                or line.startswith('Chassis'):
            continue
        match = _ND_PORTS_RE.match(line)
        if match:
            if len(links) >= LINKS_MAX or not _room(nodes, guid(match.group('guid')), guid(match.group('pguid'))):
                dropped['links'] = dropped.get('links', 0) + 1
            else:
                links.append(_ports_line(nodes, match))
            continue
        match = _ND_NODE_RE.match(line)
        if match:
            kind = {'Switch': 'switch', 'Ca': 'ca', 'Rt': 'router'}[match.group('type')]
            node_id = guid(match.group('guid'))
            if not _room(nodes, node_id):
                # Its port lines go with it (counted as links dropped), never to the node before it.
                dropped['nodes'] = dropped.get('nodes', 0) + 1
                current = _DROPPED
                continue
            lid = int(match.group('lid')) if match.group('lid') else None
            current = _add_node(nodes, node_id, kind, node_id, match.group('desc'), lid)
            current['ports_count'] = int(match.group('ports'))
            continue
        match = _ND_PORT_RE.match(line)
        if match and current is _DROPPED:
            dropped['links'] = dropped.get('links', 0) + 1
            continue
        if not match or current is None:
            count += 1
            _unread(unparsed, number, raw)
            continue
        pid = guid(match.group('guid'))
        if len(links) >= LINKS_MAX or not _room(nodes, pid):
            dropped['links'] = dropped.get('links', 0) + 1
            continue
        peer_kind = {'S': 'switch', 'H': 'ca', 'R': 'router'}[match.group('kind')]
        plid = int(match.group('lid'))
        _add_node(nodes, pid, peer_kind, pid, match.group('desc'), plid)
        my_lid = int(match.group('mylid')) if match.group('mylid') else (current['lids'][0] if current['lids'] else None)
        if my_lid is not None and my_lid not in current['lids']:
            current['lids'].append(my_lid)
        width = int(match.group('width')) if match.group('width') else None
        speed = match.group('speed')
        lane = LANE_GBPS.get(speed)
        links.append({
            'a': _end(current['id'], my_lid, int(match.group('port')), current['desc'], current['guid']),
            'b': _end(pid, plid, int(match.group('rport')), match.group('desc'), pid),
            # ibnetdiscover lists connected ports only: a link it shows is up.
            'state': 'Active', 'phys_state': 'LinkUp',
            'width': '%dX' % width if width else None, 'lanes': width, 'lane_gbps': lane, 'speed': speed,
            'gbps': round(width * lane, 4) if width and lane else None,
            'could_be': {'width': None, 'lane_gbps': None}, 'source': 'ibnetdiscover'})
    return {'nodes': nodes, 'links': links, 'unparsed': unparsed, 'unparsed_count': count, 'dropped': dropped}


# The node whose header was past NODES_MAX: its port lines are dropped with it.
_DROPPED: dict[str, Any] = {}


def _ports_line(nodes, match):
    """One line of ``ibnetdiscover -p`` -> a link (its peer None when the port has no remote port).
    The GUIDs are port GUIDs: a switch's is its node GUID (all its ports share port 0's), a CA
    port's is the GUID of that port, which host_ports() of plugin_utils/diagnosis/_fabric.py maps too."""
    node_id = guid(match.group('guid'))
    lid, port = int(match.group('lid')), int(match.group('port'))
    desc = (match.group('desc') if match.group('desc') is not None else match.group('odesc')).strip()
    _add_node(nodes, node_id, _ND_PORTS_KIND.get(match.group('type')), node_id, desc, lid)
    peer = None
    if match.group('pguid'):
        pid, plid = guid(match.group('pguid')), int(match.group('plid'))
        _add_node(nodes, pid, _ND_PORTS_KIND.get(match.group('ptype')), pid, match.group('pdesc').strip(), plid)
        peer = _end(pid, plid, int(match.group('pport')), match.group('pdesc').strip(), pid)
    # Width and speed of a port without a remote port are stale PortInfo fields, not a trained link.
    width = int(match.group('width')[:-1]) if peer and match.group('width') != '??' else None
    speed = match.group('speed') if peer and match.group('speed') in LANE_GBPS else None
    lane = LANE_GBPS.get(speed)
    return {'a': _end(node_id, lid, port, desc, node_id), 'b': peer,
            # A port with a remote port was discovered through it, so its link is up; of one without,
            # ibnetdiscover says nothing (iblinkinfo gives the state).
            'state': 'Active' if peer else None, 'phys_state': 'LinkUp' if peer else None,
            'width': '%dX' % width if width else None, 'lanes': width, 'lane_gbps': lane, 'speed': speed,
            'gbps': round(width * lane, 4) if width and lane else None,
            'could_be': {'width': None, 'lane_gbps': None}, 'source': 'ibnetdiscover'}


def _end_key(end):
    return (end['lid'], end['port']) if end['lid'] is not None else (end['node'], end['port'])


def topology(linkinfo=None, netdiscover=None):
    """Merge parsed iblinkinfo and ibnetdiscover: one node per GUID (a LID-only node joins the
    GUID node that holds its LID), one link per pair of ends (iblinkinfo's view wins: it
    carries state and the 'Could be' of both ends)."""
    nodes = {}
    parts = [p for p in (netdiscover, linkinfo) if p]
    for part in parts:
        for node in part['nodes'].values():
            merged = _add_node(nodes, node['id'], node['type'], node['guid'], node['desc'])
            for lid in node['lids']:
                if lid not in merged['lids']:
                    merged['lids'].append(lid)
            if node.get('ports_count'):
                merged['ports_count'] = node['ports_count']
    by_lid = {}
    for node in nodes.values():
        if node['guid']:
            for lid in node['lids']:
                by_lid[lid] = node['id']
    for node_id in [n for n in nodes if n.startswith('lid-')]:
        lid = nodes[node_id]['lids'][0] if nodes[node_id]['lids'] else None
        target = by_lid.get(lid)
        if target:
            real = nodes[target]
            real['type'] = real['type'] or nodes[node_id]['type']
            real['desc'] = real['desc'] if real['desc'] is not None else nodes[node_id]['desc']
            del nodes[node_id]

    def fix(end):
        if end is None:
            return None
        end = dict(end)
        if end['node'].startswith('lid-') and by_lid.get(end['lid']):
            end['node'] = by_lid[end['lid']]
            end['guid'] = nodes[end['node']]['guid']
        node = nodes.get(end['node'])
        if node is not None and not end.get('desc'):
            end['desc'] = node['desc']
        return end

    links, seen = [], {}
    for part in parts:
        for link in part['links']:
            link = dict(link, a=fix(link['a']), b=fix(link['b']))
            key = _end_key(link['a']) if link['b'] is None else frozenset((_end_key(link['a']), _end_key(link['b'])))
            if key in seen:
                old = links[seen[key]]
                if link['source'] == 'iblinkinfo' and old['source'] != 'iblinkinfo':
                    links[seen[key]] = link
                elif link['source'] == old['source']:
                    # The same link from its other end: keep the 'Could be' either end saw, and where
                    # the two ends report different rates (ibnetdiscover's man page example shows
                    # one end at 1xSDR, the other at 4xSDR), the lower one: that is what carries data.
                    for field in ('width', 'lane_gbps'):
                        old['could_be'][field] = old['could_be'][field] or link['could_be'][field]
                    if link['gbps'] is not None and (old['gbps'] is None or link['gbps'] < old['gbps']):
                        for field in ('width', 'lanes', 'lane_gbps', 'speed', 'gbps'):
                            old[field] = link[field]
                        old['ends_disagree'] = True
                    elif link['gbps'] != old['gbps']:
                        old['ends_disagree'] = True
                continue
            seen[key] = len(links)
            links.append(link)
    unparsed = [dict(item, tool=tool) for tool, part in (('ibnetdiscover', netdiscover), ('iblinkinfo', linkinfo)) if part
                for item in part['unparsed']]
    counts = dict((tool, part.get('unparsed_count', len(part['unparsed']))) for tool, part in
                  (('ibnetdiscover', netdiscover), ('iblinkinfo', linkinfo)) if part)
    dropped = dict((tool, dict(part['dropped'])) for tool, part in (('ibnetdiscover', netdiscover), ('iblinkinfo', linkinfo))
                   if part and part.get('dropped'))
    return {'nodes': nodes, 'links': links, 'unparsed': unparsed, 'unparsed_counts': counts, 'dropped': dropped}


def _unread(unparsed, number, line, reason=None):
    if len(unparsed) < UNREAD_KEPT:
        unparsed.append(dict({'line': number, 'text': line[:200]}, **({'reason': reason} if reason else {})))


def _pq_int(value):
    """A perfquery counter: decimal, or hexadecimal with its 0x prefix (_PQ_FIELD_RE)."""
    return int(value, 16) if value[:2] in ('0x', '0X') else int(value, 10)


_PQ_NAME_RE = re.compile(r'^(?P<name>[A-Za-z0-9]+):\.*(?P<value>(?:[^.\n].*)?)$', re.A)


def _pq_reason(stripped):
    """Why a perfquery line was not read, said for that line."""
    named = _PQ_NAME_RE.match(stripped)
    if not named:
        return 'not a counter line (Name:....value) or a port header'
    return 'the value %s of %s is not a decimal counter of at most 20 digits or a 0x hexadecimal one of at most 16' % (
        ascii(named.group('value')[:40]), named.group('name'))


def parse_sminfo(text):
    """sminfo output (one or more records) -> {'sms': [{'lid', 'guid', 'activity', 'priority', 'state',
    'state_name'}], 'errors': [...], 'unparsed': [{'line', 'text'}], 'unparsed_count'}.

    A record wrapped over several lines (a mail client breaks it anywhere: after 'activity count
    6881', after 'priority 0') is joined with the lines that follow until it holds its state. A
    record whose state never comes is listed in ``unparsed`` with a state of None, never given one."""
    lines = [line.rstrip() for line in (text or '').splitlines()]
    sms, errors, unparsed, dropped = [], [], [], {}
    count, index = 0, 0
    while index < len(lines):
        number, line = index + 1, lines[index].strip()
        index += 1
        if not line:
            continue
        if line.startswith('sminfo: sm lid'):
            # Join continuation lines (not a new record, not a diagnostic) until the record is whole.
            while not _SMINFO_COMPLETE_RE.search(line) and index < len(lines) and lines[index].strip() \
                    and not lines[index].strip().startswith('sminfo:') and not _DIAG_ERROR_RE.match(lines[index].strip()) \
                    and len(line) < 400:
                line = line + ' ' + lines[index].strip()
                index += 1
            match = _SMINFO_RE.search(line)
            if match and match.group('state') is not None and not match.group('state_name') and index < len(lines) \
                    and re.match(r'^SMINFO_[A-Z]+$', lines[index].strip()):
                line = line + ' ' + lines[index].strip()       # wrapped just before the state's name
                index += 1
                match = _SMINFO_RE.search(line)
            if match:
                lid = match.group('lid')
                state = int(match.group('state')) if match.group('state') is not None else None
                _keep(sms, {'lid': int(lid, 16) if lid.startswith('0x') else int(lid), 'guid': guid(match.group('guid')),
                            'activity': int(match.group('activity')), 'priority': int(match.group('priority')),
                            'state': state, 'state_name': match.group('state_name') or SM_STATES.get(state)},
                      SMS_MAX, dropped, 'sms')
                if state is not None:
                    continue
            count += 1
            _unread(unparsed, number, line)
        elif line.startswith('sminfo:') or _DIAG_ERROR_RE.match(line):
            _keep(errors, line[:300], ERRORS_MAX, dropped, 'errors')
        else:
            count += 1
            _unread(unparsed, number, line)
    return {'sms': sms, 'errors': errors, 'unparsed': unparsed, 'unparsed_count': count, 'dropped': dropped}


def parse_saquery_sminfo(text):
    """``saquery SMIR`` output -> {'sms': [...as parse_sminfo], 'errors': [...], 'unparsed': [...],
    'unparsed_count'}. A record without its LID, GUID, priority or state is listed in ``unparsed``
    (from its header line), never completed with a guess."""
    sms, errors, unparsed, dropped = [], [], [], {}
    count, record, start = 0, None, 0

    def close():
        if record is None:
            return 0
        if all(k in record for k in ('LID', 'GUID', 'Priority', 'SMState')):
            state = record['SMState']
            _keep(sms, {'lid': record['LID'], 'guid': guid('0x%x' % record['GUID']), 'activity': record.get('ActCount'),
                        'priority': record['Priority'], 'state': state, 'state_name': SM_STATES.get(state)},
                  SMS_MAX, dropped, 'sms')
            return 0
        _unread(unparsed, start, '%s (incomplete: %s)' % (_SMIR_HEADER, ', '.join(sorted(record)) or 'no field'))
        return 1

    for number, raw in enumerate((text or '').splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line == _SMIR_HEADER:
            count += close()
            record, start = {}, number
            continue
        field = _SMIR_FIELD_RE.match(line)
        if field and record is not None and field.group('name') not in record:
            value = field.group('value')
            record[field.group('name')] = int(value, 16) if value.startswith('0x') else int(value)
        elif line in _SMIR_LABELS and record is not None:
            continue
        elif _DIAG_ERROR_RE.match(line) or line.startswith('saquery:'):
            _keep(errors, line[:300], ERRORS_MAX, dropped, 'errors')
        else:
            count += 1
            _unread(unparsed, number, line)
    count += close()
    return {'sms': sms, 'errors': errors, 'unparsed': unparsed, 'unparsed_count': count, 'dropped': dropped}


def parse_perfquery(text, unread=None):
    """perfquery output (one or more ports; -x, -l) -> [{'lid', 'port', 'counters': {sysfs names: int}}].
    A block without its '# Port counters' line (an excerpt) has lid and port None. ``unread``, a dict,
    gets 'count' and 'lines' ([{'line', 'text'}]) of the lines no pattern read: a '#' line other than
    a header is a comment (a shell prompt kept with the output), a header wrapped after 'CapMask2:'
    (a mail paste) is read with its continuation."""
    blocks, current, dropped, ports_seen = [], None, {}, set()
    lines = (text or '').splitlines()
    count, kept, open_header = 0, [], False
    for index, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            continue
        header = _PQ_HEADER_RE.match(stripped)
        if header:
            port = header.group('port')
            current = {'lid': int(header.group('lid')), 'port': int(port) if port.isdigit() else None, 'counters': {}}
            # One block per port and read (perfquery, perfquery -x): a port's second block of the same
            # read (a paste repeated 70,000 times) is no record of another port, and is counted with
            # those past the cap.
            where = (current['lid'], current['port'], 'extended' in stripped[:30].lower())
            if where in ports_seen or not _keep(blocks, current, LINKS_MAX, dropped, 'ports'):
                if where in ports_seen:
                    dropped['ports'] = dropped.get('ports', 0) + 1
                current = {'lid': None, 'port': None, 'counters': {}}     # read, not kept
            ports_seen.add(where)
            open_header = not stripped.endswith(')')
            continue
        if open_header and re.match(r'^[0-9A-Za-z: ]*\)$', stripped, re.A):
            open_header = False
            continue
        open_header = False
        field = _PQ_FIELD_RE.match(stripped)
        if not field:
            if not (stripped.startswith('#') and 'counters' not in stripped.lower()) and not _DIAG_ERROR_RE.match(stripped):
                count += 1
                _unread(kept, index + 1, line, _pq_reason(stripped))
            continue
        name, value = field.group('name'), field.group('value')
        if name == 'PortSelect' and (current is None or 'port_select' in current):
            current = {'lid': None, 'port': None, 'counters': {}}
            _keep(blocks, current, LINKS_MAX, dropped, 'ports')
        if current is None:
            current = {'lid': None, 'port': None, 'counters': {}}
            _keep(blocks, current, LINKS_MAX, dropped, 'ports')
        if name == 'PortSelect':
            current['port_select'] = _pq_int(value)
            if current['port'] is None:
                current['port'] = _pq_int(value)
        elif name in PERFQUERY_NAMES:
            current['counters'][PERFQUERY_NAMES[name]] = _pq_int(value)
    for block in blocks:
        block.pop('port_select', None)
    if isinstance(unread, dict):
        unread['count'] = unread.get('count', 0) + count
        unread.setdefault('lines', []).extend(kept[:max(0, UNREAD_KEPT - len(unread['lines']))])
        for kind, number in dropped.items():
            unread.setdefault('dropped', {})[kind] = unread.get('dropped', {}).get(kind, 0) + number
    return [b for b in blocks if b['counters']]


# ---------------------------------------------------------------------------- ibqueryerrors
# rdma-core infiniband-diags/ibqueryerrors.c: print_results() prints, for each node with a counter
# past its threshold (0 by default: every non-zero counter), a header - a switch
# "Errors for 0x%" PRIx64 " \"%s\"" (the switch's port 0 GUID and node description), any other node
# "Errors for \"%s\"" - then one line per port "   GUID 0x%" PRIx64 " port %d:%s" (the port's GUID; a
# switch's aggregate "port ALL") whose tail is " [%s == %u]" per counter, or with the extended
# counters " [%s == %" PRIu64 " (%5.3f%s)]" (a human-readable value after it); --data adds the data
# counters the same way; -r adds a "       Link info: %6d%4d[%2s] ==...==>  ..." line (the port's
# LID, its number, the link as iblinkinfo prints it); with --counters (print_data_cnts()) the header
# is "Data Counters for 0x%" PRIx64 " \"%s\"". print_summary() ends with "## Summary: %d nodes checked,
# %d bad nodes found", "##          %d ports checked, %d ports have errors beyond threshold",
# "## Thresholds: ..." (the thresholds of --threshold-file, empty without one), "##          %d PMA query
# failures" where some, and "## Suppressed: ..." (the counters of -s/-c, not read). Real output:
# tests/fixtures/public/ibqueryerrors/.
_IQE_HEADER_RE = re.compile(r'^(?:Errors|Data Counters) for\s+(?:(?P<guid>' + _GUID + r')\s+)?"(?P<desc>[^"]*)"\s*$', re.A)
_IQE_PORT_RE = re.compile(r'^GUID\s+(?P<guid>' + _GUID + r')\s+port\s+(?P<port>\d{1,3}|ALL):(?P<rest>.*)$', re.A)
# One counter: '[Name == 123]' or '[Name == 123 (1.230K)]'; the parenthesis holds a number and a unit.
_IQE_ITEM_RE = re.compile(r'\s*\[(?P<name>[A-Za-z][A-Za-z0-9]{0,63}) == (?P<value>\d{1,20})(?:\s\(\s{0,8}[0-9.]{1,24}[A-Za-z]{0,4}\))?\]', re.A)
_IQE_LINK_RE = re.compile(r'^Link info:\s*(?P<lid>\d{1,5})\s+(?P<port>\d{1,3})\[', re.A)
_IQE_SUMMARY_RE = re.compile(r'^##\s*Summary:\s*(?P<nodes>\d{1,9}) nodes checked,\s*(?P<bad_nodes>\d{1,9}) bad nodes found\s*$', re.A)
_IQE_PORTS_RE = re.compile(r'^##\s*(?P<ports>\d{1,9}) ports checked,\s*(?P<bad_ports>\d{1,9}) ports have errors beyond threshold\s*$', re.A)
_IQE_PMA_RE = re.compile(r'^##\s*(?P<failures>\d{1,9}) PMA query failures\s*$', re.A)
# A mail's quoting ('> ', '>> ') before every line of a pasted output.
_QUOTE_RE = re.compile(r'^(?:>[ \t]?){1,8}', re.A)
# The bits of each PortCounters field (IBTA Vol 1, 16.1.3.5 PortCounters, Table 247; libibmad
# fields.c IB_PC_*_F): a value at its width's maximum has stopped counting (the counters saturate,
# they do not wrap), so what it rose by is unknown. A larger value came from PortCountersExtended
# (64 bit, ibqueryerrors prints it when the port has it) and is no saturated 16-bit counter.
COUNTER_BITS = {
    'SymbolErrorCounter': 16, 'LinkErrorRecoveryCounter': 8, 'LinkDownedCounter': 8, 'PortRcvErrors': 16,
    'PortRcvRemotePhysicalErrors': 16, 'PortRcvSwitchRelayErrors': 16, 'PortXmitDiscards': 16,
    'PortXmitConstraintErrors': 8, 'PortRcvConstraintErrors': 8, 'LocalLinkIntegrityErrors': 4,
    'ExcessiveBufferOverrunErrors': 4, 'VL15Dropped': 16, 'PortXmitWait': 32,
}
# Counters ibqueryerrors may print beyond PERFQUERY_NAMES (details, data): kept per port up to this many.
OTHER_COUNTERS_MAX = 32


def _iqe_counters(rest):
    """The '[Name == value]' items of a port line -> [(name, value)], or None when the tail holds
    anything else (a line cut inside an item, another tool's text)."""
    items, position = [], 0
    while position < len(rest):
        match = _IQE_ITEM_RE.match(rest, position)
        if match is None:
            return None if rest[position:].strip() else items
        items.append((match.group('name'), int(match.group('value'))))
        position = match.end()
    return items


def _iqe_summary(line, summary):
    """A '## ...' line of print_summary() into ``summary``; False when it is none of them."""
    stripped = line.strip()
    for pattern in (_IQE_SUMMARY_RE, _IQE_PORTS_RE, _IQE_PMA_RE):
        match = pattern.match(stripped)
        if match:
            summary.update((k, int(v)) for k, v in match.groupdict().items())
            return True
    for label in ('Thresholds:', 'Suppressed:'):
        if stripped.startswith('## ' + label) or stripped == '## ' + label.rstrip(':') + ':':
            value = stripped[len('## ' + label):].strip()
            summary[label[:-1].lower()] = value.split()[:64] if label == 'Suppressed:' else value[:300]
            return True
    return False


def parse_ibqueryerrors(text):
    """ibqueryerrors output (any of -k/-K, --data, -s/-c, -r, --switch/--ca) ->
    {'ports': [{'guid', 'port', 'node_guid', 'desc', 'switch', 'lid', 'counters': {sysfs names: int},
                'other': {name: int}, 'saturated': [sysfs names]}],
     'aggregates': [... the same for a switch's 'port ALL'], 'summary': {...} or None,
     'errors', 'unparsed', 'unparsed_count', 'dropped'}.

    A port not listed had no counter past its threshold; with an empty '## Thresholds:' (the default
    threshold 0) and nothing suppressed that means every counter read 0, which ``summary['complete']``
    says (the output whole, to its summary, with no PMA query failure). Nothing here raises on odd input."""
    ports, aggregates, errors, unparsed, dropped = [], [], [], [], {}
    summary = {}
    count, header, seen = 0, None, set()
    current = None
    for number, raw in enumerate((text or '').splitlines(), start=1):
        line = _QUOTE_RE.sub('', raw, count=1) if raw.startswith('>') else raw
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith('##'):
            if not _iqe_summary(stripped, summary):
                count += 1
                _unread(unparsed, number, raw, 'a "##" line that is not one of ibqueryerrors\' summary lines')
            continue
        if stripped.startswith('#') or stripped.startswith('$ '):
            continue                                   # a shell prompt kept with the paste
        match = _IQE_HEADER_RE.match(stripped)
        if match:
            header = {'guid': guid(match.group('guid')), 'desc': _desc(match.group('desc')), 'switch': match.group('guid') is not None}
            continue
        match = _IQE_PORT_RE.match(stripped)
        if match:
            current = _iqe_port_line(match, header, (ports, aggregates, seen, dropped))
            if current is False:
                count += 1
                _unread(unparsed, number, raw, 'a port line whose counters are not "[Name == value]" items')
                current = None
            continue
        match = _IQE_LINK_RE.match(stripped)
        if match:
            if current is not None and int(match.group('port')) == current['port']:
                current['lid'] = int(match.group('lid'))
            continue
        if _DIAG_ERROR_RE.match(stripped) or stripped.startswith('ibqueryerrors:'):
            _keep(errors, stripped[:300], ERRORS_MAX, dropped, 'errors')
            continue
        count += 1
        _unread(unparsed, number, raw, 'not a header ("Errors for ..."), port line ("GUID 0x... port N: [...]") or summary line')
    if summary:
        # Whole: to its summary, no PMA query failed, no threshold file (a port not listed read 0) and no
        # counter suppressed (-s/-c: not read at all).
        summary['complete'] = 'nodes' in summary and 'ports' in summary and not summary.get('failures') \
            and not summary.get('thresholds') and not summary.get('suppressed')
    return {'ports': ports, 'aggregates': aggregates, 'summary': summary or None, 'errors': errors,
            'unparsed': unparsed, 'unparsed_count': count, 'dropped': dropped}


def _iqe_port_line(match, header, kept):
    """One port line kept in ``kept`` (ports, aggregates, seen, dropped): the port, to which a later
    'Link info:' line adds its LID, or None (an aggregate 'port ALL', a repeat, over the cap); False
    when its counters are not '[Name == value]' items."""
    ports, aggregates, seen, dropped = kept
    items = _iqe_counters(match.group('rest'))
    if items is None:
        return False
    current = _iqe_port(match, items, header)
    if current['port'] is None:
        _keep(aggregates, current, NODES_MAX, dropped, 'ports')
        return None
    key = (current['guid'], current['port'])
    if key in seen:
        dropped['ports'] = dropped.get('ports', 0) + 1
        return None
    seen.add(key)
    return current if _keep(ports, current, LINKS_MAX, dropped, 'ports') else None


def _iqe_port(match, items, header):
    counters, other, saturated = {}, {}, []
    for name, value in items:
        if name in PERFQUERY_NAMES:
            counters[PERFQUERY_NAMES[name]] = value
            bits = COUNTER_BITS.get(name)
            if bits and value == (1 << bits) - 1:
                saturated.append(PERFQUERY_NAMES[name])
        elif len(other) < OTHER_COUNTERS_MAX:
            other[name] = value
    port = match.group('port')
    return {'guid': guid(match.group('guid')), 'port': int(port) if port != 'ALL' else None,
            'node_guid': header['guid'] if header else None, 'desc': header['desc'] if header else None,
            'switch': header['switch'] if header else None, 'lid': None,
            'counters': counters, 'other': other, 'saturated': sorted(saturated)}
