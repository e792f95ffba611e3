# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""DCBX: who sets a RoCE port's DCB (PFC, ETS, APP) - the host, or the switch through LLDP.

Three tools say it, each in its own words:

- ``mlnx_qos -i IF`` prints 'DCBX mode: OS controlled' (the host's DCB netlink settings apply;
  an LLDP agent on the host may still negotiate) or 'DCBX mode: Firmware controlled' (the NIC's
  firmware runs DCBX itself and applies what a willing exchange with the switch gives):
  mlnx-tools python/mlnx_qos, and NVIDIA's "MLNX_OFED Documentation: Quality of Service -
  DCBX control mode" (``mlnx_qos -d os|fw``).
- iproute2's ``dcb dcbx show dev IF`` prints the flags of the kernel's DCBX object: 'host'
  (DCBX by the host's LLDP agent), 'lld-managed' (by the device), 'cee', 'ieee', 'static'
  (dcb-dcbx(8)).
- lldpad's ``lldptool -t -i IF -V PFC`` / ``-V ETS-CFG`` / ``-V APP`` (and ``-t -n`` for the
  peer's TLVs) print the IEEE 802.1Qaz TLVs with their 'Willing: yes|no' bit: "If the willing bit
  is set to 1 and a peer TLV is received then the peers attributes will be used"
  (lldptool-pfc(8), lldptool-ets(8)).

Parsers (``parse_*``) are pure functions over the tools' text, bounded (MAX_BYTES, MAX_LINES),
proven on public printouts (tests/fixtures/public/lldptool, tests/fixtures/public/dcb,
tests/fixtures/public/mlnx_qos). :func:`manager` is the one place that decides, from what was
read, who manages a port's DCB; the rule ROCE_DCBX_MISMATCH (plugin_utils/diagnosis/_roce_rules.py)
compares it with who is meant to (roce_qos_facts ``dcbx_expected``).
"""

from __future__ import annotations

import re

# A printout of these tools is a few kB (lldptool -ti with every TLV: ~1.5 kB): more is no
# printout of theirs; what is past the bound is not read (and said: ``truncated``).
MAX_BYTES = 1 << 20
MAX_LINES = 20000
# An APP TLV's information string is at most 511 bytes, 3 bytes an entry (IEEE 802.1Q-2014
# D.2.12, and the LLDP TLV length field of 9 bits): 170 entries at most; more is no TLV.
MAX_APP_ENTRIES = 170
PRIORITIES = tuple(range(8))
DCB_DCBX_FLAGS = ('host', 'lld-managed', 'cee', 'ieee', 'static')
MANAGERS = ('host', 'switch')

_MODE_RE = re.compile(r'\s*DCBX mode\s*:\s*(?P<mode>OS|Firmware)\b', re.I)
# Matched on a stripped line only (a '\s*' on both sides of a lazy group backtracks quadratically over a run of blanks).
_TLV_RE = re.compile(r'(?P<name>[^:=]{1,80}?) ?(?:TLV|LTV):?\Z')
_KEY_RE = re.compile(r'[A-Za-z0-9{}/_# ]{1,40}\Z')
_PAIR_RE = re.compile(r'(\d{1,3}):([A-Za-z0-9]{1,12})\Z')
_WILLING = {'yes': True, 'no': False, '1': True, '0': False, 'true': True, 'false': False}


def _lines(text: str | None) -> tuple:
    """The first MAX_LINES lines of the first MAX_BYTES characters of ``text``, and whether any were cut."""
    text = text or ''
    cut = len(text) > MAX_BYTES
    lines = text[:MAX_BYTES].splitlines()
    return lines[:MAX_LINES], cut or len(lines) > MAX_LINES


def _int(word: str | None, base: int = 10) -> int | None:
    word = (word or '').strip()
    if not word or len(word) > 12 or not word.isascii():
        return None
    try:
        return int(word, base)
    except ValueError:
        return None


def parse_mlnx_qos_dcbx(text: str | None) -> str | None:
    """``mlnx_qos -i IF`` -> 'os' ('DCBX mode: OS controlled'), 'firmware' ('Firmware controlled'), or None."""
    lines, _cut = _lines(text)
    for line in lines:
        found = _MODE_RE.match(line)
        if found:
            return 'os' if found.group('mode').lower() == 'os' else 'firmware'
    return None


def parse_dcb_dcbx(text: str | None) -> list | None:
    """``dcb dcbx show dev IF`` ('host ieee') -> the sorted flags shown (DCB_DCBX_FLAGS), or None
    when no line is made of those words only (an error, another tool's output)."""
    lines, _cut = _lines(text)
    for line in lines:
        words = line.split()
        if words and len(words) <= len(DCB_DCBX_FLAGS) and all(w in DCB_DCBX_FLAGS for w in words):
            return sorted(set(words))
    return None


def _tlv_kind(name: str) -> str:
    name = name.upper()
    if 'ETS' in name and 'CONFIG' in name:
        return 'ets'
    if 'ETS' in name and 'RECOMMEND' in name:
        return 'ets_rec'
    if 'PFC' in name:
        return 'pfc'
    if 'APP' in name:
        return 'app'
    return 'other'


def _pairs(value: str, limit: int = 8) -> list:
    """'0:0 1:1 ...' -> [(int key, value)] of well-formed pairs with a key below ``limit``."""
    found = []
    for word in value.split()[:64]:
        match = _PAIR_RE.match(word)
        if match and int(match.group(1)) < limit:
            found.append((int(match.group(1)), match.group(2)))
    return found


def _ets_field(ets: dict, key: str, value: str) -> None:
    if key == 'willing':
        ets['willing'] = _WILLING.get(value.lower())
    elif key == 'prio_map':
        ets['prio_tc'] = dict((p, _int(t)) for p, t in _pairs(value) if _int(t) in PRIORITIES)
    elif key == 'tc bandwidth':
        bw = [_int(w.rstrip('%')) for w in value.split()[:8]]
        ets['tc_bw'] = dict((tc, v) for tc, v in enumerate(bw) if v is not None and 0 <= v <= 100)
    elif key == 'tsa_map':
        ets['tc_tsa'] = dict((tc, tsa.lower()) for tc, tsa in _pairs(value))


def _pfc_field(pfc: dict, key: str, value: str) -> None:
    if key == 'willing':
        pfc['willing'] = _WILLING.get(value.lower())
    elif key == 'pfc enabled':
        words = value.replace(',', ' ').split()
        pfc['enabled'] = [] if words[:1] == ['none'] else sorted(set(p for p in (_int(w) for w in words[:16]) if p in PRIORITIES))
    elif key == 'macsec bypass capable':
        pfc['mbc'] = _WILLING.get(value.lower())
    elif key == 'pfc capable traffic classes':
        pfc['cap'] = _int(value)


def _app_field(app: list, key: str, value: str) -> None:
    """One line of the APP TLV: 'App#N:' opens an entry, then 'Priority:', 'Sel:' and the protocol line
    after 'Sel:' ('{S}TCP Port: 3260', 'Ethertype: 0x8906', 'DSCP: 26')."""
    if key.startswith('app#'):
        if len(app) < MAX_APP_ENTRIES:
            app.append({'priority': None, 'sel': None, 'protocol': None})
        return
    entry = app[-1] if app and len(app) <= MAX_APP_ENTRIES else None
    if entry is None:
        return
    if key == 'priority':
        entry['priority'] = _int(value) if _int(value) in PRIORITIES else None
    elif key == 'sel':
        entry['sel'] = _int(value)
    elif entry['sel'] is not None and entry['protocol'] is None:
        entry['protocol'] = _int(value, 16) if value.lower().startswith('0x') else _int(value)


def _config_field(result: dict, key: str, value: str) -> None:
    """A '-c' answer: 'willing=yes', 'enabled=1,2,4', 'mode=auto' (lldptool -t -V ... -c ARG)."""
    if len(result['config']) < 16 and re.match(r'[a-z_]{1,20}\Z', key):
        result['config'][key] = value[:80]
    if key == 'mode' and re.match(r'[A-Za-z]{1,10}\Z', value):
        result['mode'] = value.lower()


def _app_dscp(app: list) -> dict:
    """{DSCP: [priorities]} of the APP entries of selector 5 (IEEE 802.1Q-2014 DSCP)."""
    table: dict = {}
    for item in app:
        if item['sel'] == 5 and item['protocol'] is not None and 0 <= item['protocol'] <= 63 and item['priority'] is not None:
            table.setdefault(item['protocol'], set()).add(item['priority'])
    return dict((dscp, sorted(prios)) for dscp, prios in table.items())


def parse_lldptool(text: str | None) -> dict:
    """``lldptool -t [-n] -i IF [-V ETS-CFG|PFC|APP]`` (or ``-ti``, or ``get-tlv``) -> what the TLVs say:

    {'ets': {'willing', 'prio_tc', 'tc_bw', 'tc_tsa'} | None, 'pfc': {'willing', 'enabled', 'mbc', 'cap'} | None,
     'app': [{'priority', 'sel', 'protocol'}] | None, 'dscp2prio': {dscp: [prios]} | None (APP entries of
     selector 5, IEEE 802.1Q-2014 DSCP), 'mode': str | None ('mode=auto' of ``-V IEEE-DCBX -c mode``),
     'config': {key: value} of '-c' answers ('willing=yes', 'enabled=1,2,4'), 'truncated': bool}.

    The TLV layout is lldpad's (lldp_8021qaz_cmds.c print functions): a header line naming the TLV
    ('IEEE 8021QAZ PFC TLV'), then indented 'Key: value' lines; APP entries 'App#N:' each with
    'Priority:', 'Sel:' and the protocol line. PFC 'enabled' is 'none' or priorities apart by blanks.
    The fields of a TLV this does not read (ETS Recommendation, Chassis ID ...) are skipped."""
    lines, cut = _lines(text)
    result = {'ets': None, 'pfc': None, 'app': None, 'dscp2prio': None, 'mode': None, 'config': {}, 'truncated': cut}
    kind = None
    for line in lines:
        line = line.strip()
        if not line or len(line) > 500:
            continue
        header = _TLV_RE.match(line) if len(line) <= 100 else None
        if header:
            kind = _tlv_kind(header.group('name'))
            if kind in ('ets', 'pfc', 'app') and result[kind] is None:
                result[kind] = [] if kind == 'app' else {}
            continue
        key, sep, value = line.partition(':')
        config = not sep and kind is None
        if config:
            key, sep, value = line.partition('=')
        key, value = key.strip().lower(), value.strip()
        if not sep or not _KEY_RE.match(key):
            continue
        if config:
            _config_field(result, key, value)
        elif kind == 'ets':
            _ets_field(result['ets'], key, value)
        elif kind == 'pfc':
            _pfc_field(result['pfc'], key, value)
        elif kind == 'app':
            _app_field(result['app'], key, value)
    if result['app'] is not None:
        result['dscp2prio'] = _app_dscp(result['app'])
    return result


def lldp_willing(parsed_pfc: dict | None, parsed_ets: dict | None) -> bool | None:
    """Whether the host's LLDP agent accepts the peer's settings: True when the PFC or ETS TLV it
    sends is willing, False when the ones read are not, None when neither was read."""
    bits = [(item or {}).get('willing') for item in ((parsed_pfc or {}).get('pfc'), (parsed_ets or {}).get('ets'))]
    bits = [bit for bit in bits if bit is not None]
    if not bits:
        return None
    return any(bits)


def manager(dcbx: dict | None) -> tuple:
    """(who, why) manages a port's DCB from its facts' ``dcbx`` part (read_roce): who is 'host',
    'switch', or None when nothing that says it was read.

    - mlnx_qos 'Firmware controlled', or dcb dcbx 'lld-managed' without 'host': the NIC runs DCBX,
      and a switch that sends its TLVs sets the port;
    - an LLDP agent (lldpad) on the host sending willing PFC or ETS TLVs: it applies the switch's;
    - otherwise 'OS controlled' or dcb dcbx 'host': what the host sets stays."""
    dcbx = dcbx if isinstance(dcbx, dict) else {}
    mode, flags, willing = dcbx.get('mode'), dcbx.get('dcb_dcbx'), dcbx.get('lldp_willing')
    flags = set(flags) if isinstance(flags, list) else None
    if mode == 'firmware':
        return 'switch', 'mlnx_qos: DCBX mode Firmware controlled (the NIC firmware negotiates with the switch)'
    if flags is not None and 'lld-managed' in flags and 'host' not in flags:
        return 'switch', 'dcb dcbx: lld-managed (the device negotiates with the switch)'
    if willing is True:
        return 'switch', 'lldptool: the host\'s LLDP agent sends willing PFC/ETS TLVs (it takes the switch\'s settings)'
    if mode == 'os' or (flags is not None and 'host' in flags):
        source = 'mlnx_qos: DCBX mode OS controlled' if mode == 'os' else 'dcb dcbx: host'
        agent = ('; the LLDP agent is not willing' if willing is False
                 else '; no LLDP agent answered (lldptool)' if dcbx.get('lldp_reason') else '')
        return 'host', source + agent
    reason = dcbx.get('reason')
    # A snapshot's facts are anyone's: only a string, and a bounded one, is said.
    return None, reason[:300] if isinstance(reason, str) and reason else 'the DCBX mode was not read (neither mlnx_qos nor dcb dcbx answered)'
