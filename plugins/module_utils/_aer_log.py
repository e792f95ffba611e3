# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The kernel's PCIe AER log lines (dmesg, journalctl -k) -> error counts per device, error and severity.

What drivers/pci/pcie/aer.c prints for one error, each line prefixed '<driver> <BDF>: ' (and, since
Linux 5.x, 'AER: ' after it; a timestamp or a journal prefix before):

    pcieport 0000:00:1c.5: AER: Corrected error received: 0000:00:1c.5
    pcieport 0000:00:1c.5: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)
    pcieport 0000:00:1c.5: AER:   device [8086:9d15] error status/mask=00000001/00002000
    pcieport 0000:00:1c.5: AER:    [ 0] RxErr                  (First)

Older kernels print 'id=00e5(Receiver ID)' and the long names ('[ 0] Receiver Error'); Linux 6.x
says 'Correctable' for 'Corrected' and 'Correctable error message received from BDF'. The error
is the device's that the 'PCIe Bus Error' line names; the 'received' line names the port that
reported it. The bit number ('[ 6]') names the error as the status register's bit does (PCIe
Base Specification 7.8.4.2 Uncorrectable / 7.8.4.5 Correctable Error Status; aer.c
aer_correctable_error_string / aer_uncorrectable_error_string), so both the long and the short
names count as one.

Proven on public printouts: tests/fixtures/public/aer_log.
"""

from __future__ import annotations

import re

MAX_BYTES = 4 << 20
MAX_LINES = 100000
MAX_DEVICES = 1024
# The correctable and uncorrectable status bits and aer.c's (short) names for them.
CORRECTABLE_BITS = {0: 'RxErr', 6: 'BadTLP', 7: 'BadDLLP', 8: 'Rollover', 12: 'Timeout', 13: 'NonFatalErr',
                    14: 'CorrIntErr', 15: 'HeaderOF'}
UNCORRECTABLE_BITS = {0: 'Undefined', 4: 'DLP', 5: 'SDES', 12: 'TLP', 13: 'FCP', 14: 'CmpltTO', 15: 'CmpltAbrt',
                      16: 'UnxCmplt', 17: 'RxOF', 18: 'MalfTLP', 19: 'ECRC', 20: 'UnsupReq', 21: 'ACSViol',
                      22: 'UncorrIntErr', 23: 'BlockedTLP', 24: 'AtomicOpBlocked', 25: 'TLPBlockedErr', 26: 'PoisonTLPBlocked'}
SEVERITIES = ('correctable', 'nonfatal', 'fatal')

_BDF = r'[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]'
# '<driver> <BDF>: ' - the driver name is a word (pcieport, mlx5_core, nvidia, ath10k_pci).
_PREFIX_RE = re.compile(r'(?:^|\s)[A-Za-z0-9_\-]{1,32} (?P<bdf>%s): (?:AER: ?)?(?P<rest>.*)\Z' % _BDF)
# The type is not needed (a record wrapped after 'severity=Corrected,' still names its errors below).
_BUS_ERROR_RE = re.compile(r'\s*PCIe Bus Error: severity=(?P<sev>[A-Za-z\-]{1,20}(?: \([A-Za-z\-]{1,12}\))?)\s*(?:,|\Z)')
_DEVICE_RE = re.compile(r'\s*device \[(?P<id>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\] error status/mask=(?P<status>[0-9a-fA-F]{8})/')
# On the stripped rest of a line: one blank run ahead of '(First)' (two '\s*' around an optional group backtrack quadratically).
_BIT_RE = re.compile(r'\[\s?(?P<bit>\d{1,2})\] ?(?P<name>[A-Za-z][A-Za-z0-9_ \-]{0,40}?)(?:\s+\(First\))?\Z')
_RECEIVED_RE = re.compile(r'\s*(?:Multiple )?(?P<sev>[A-Za-z\-]{1,20}(?: \([A-Za-z\-]{1,12}\))?) error (?:message )?received'
                          r'(?:: | from )(?P<source>%s|id=[0-9a-fA-F]{4})' % _BDF)


def severity(words: str | None) -> str | None:
    """aer.c's severity words ('Corrected', 'Correctable', 'Uncorrected (Non-Fatal)', 'Uncorrectable
    (Fatal)', 'Fatal', 'Non-Fatal') -> 'correctable', 'nonfatal' or 'fatal' (None: none of them)."""
    words = (words or '').lower()
    if words.startswith('correct'):
        return 'correctable'
    if 'non-fatal' in words or 'nonfatal' in words:
        return 'nonfatal'
    if 'fatal' in words:
        return 'fatal'
    return None


def _device(devices: dict, bdf: str) -> dict | None:
    bdf = bdf.lower()
    if bdf not in devices:
        if len(devices) >= MAX_DEVICES:
            return None
        devices[bdf] = {'id': None, 'events': {}, 'errors': {}, 'reported_by': []}
    return devices[bdf]


def parse_aer_log(text: str | None) -> dict:
    """Kernel log text -> {'devices': {BDF: {'id': 'vvvv:dddd' | None, 'events': {severity: n},
    'errors': {severity: {name: n}}, 'reported_by': [port BDF]}}, 'truncated': bool}.

    ``events`` counts the 'PCIe Bus Error' records of the device; ``errors`` each status bit
    printed under them (one record may carry several). Lines of other messages are skipped."""
    text = text or ''
    lines = text[:MAX_BYTES].splitlines()
    truncated = len(text) > MAX_BYTES or len(lines) > MAX_LINES
    devices: dict = {}
    current: dict = {}
    for line in lines[:MAX_LINES]:
        if len(line) > 1024 or ': ' not in line:
            continue
        match = _PREFIX_RE.search(line)
        if not match:
            continue
        bdf, rest = match.group('bdf').lower(), match.group('rest')
        found = _BUS_ERROR_RE.match(rest)
        if found:
            level = severity(found.group('sev'))
            entry = _device(devices, bdf)
            if entry is None or level is None:
                truncated = truncated or entry is None
                current.pop(bdf, None)
                continue
            entry['events'][level] = entry['events'].get(level, 0) + 1
            current[bdf] = level
            continue
        found = _DEVICE_RE.match(rest)
        if found and bdf in devices:
            devices[bdf]['id'] = devices[bdf]['id'] or found.group('id').lower()
            continue
        found = _BIT_RE.match(rest.strip())
        if found and bdf in current:
            level, bit = current[bdf], int(found.group('bit'))
            names = CORRECTABLE_BITS if level == 'correctable' else UNCORRECTABLE_BITS
            name = names.get(bit) or 'bit%d' % bit
            errors = devices[bdf]['errors'].setdefault(level, {})
            errors[name] = errors.get(name, 0) + 1
            continue
        found = _RECEIVED_RE.match(rest)
        if found and found.group('source')[:3] != 'id=':
            source = _device(devices, found.group('source'))
            if source is not None and bdf not in source['reported_by'] and len(source['reported_by']) < 8:
                source['reported_by'].append(bdf)
    return {'devices': devices, 'truncated': truncated}
