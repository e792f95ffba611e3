# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""PCIe AER statistics from sysfs: /sys/bus/pci/devices/<bdf>/aer_dev_correctable, aer_dev_fatal,
aer_dev_nonfatal and, on a root port, aer_rootport_total_err_cor/_fatal/_nonfatal.

The files (kernel Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats; written by
drivers/pci/pcie/aer.c aer_stats_dev_attr()) hold one '<name> <count>' line per error bit and a
'TOTAL_ERR_COR' / 'TOTAL_ERR_FATAL' / 'TOTAL_ERR_NONFATAL' line last; the root port files hold one
number. The names changed: kernel 4.19 printed 'Receiver Error', 'Bad TLP', 'RELAY_NUM Rollover',
'Replay Timer Timeout' (tests/fixtures/public/aer/kernel_abi_aer_stats_sample.txt), later kernels the
short names of aer_correctable_error_string[] ('RxErr', 'BadTLP', 'BadDLLP', 'Rollover', 'Timeout',
'NonFatalErr', 'CorrIntErr', 'HeaderOF'). Both are read to the short names. The counts are u64
(struct aer_stats): they never wrap in practice, and one that went down was reset (the device
re-enumerated), which a delta says as not comparable (module_utils/_window.py).

Note (the ABI document): an endpoint's errors may be counted at its link partner (the port above it),
so a window reads the device and every bridge on its path.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot

PCI_DEVICES = '/sys/bus/pci/devices'
FILES = ('aer_dev_correctable', 'aer_dev_fatal', 'aer_dev_nonfatal')
ROOTPORT_FILES = ('aer_rootport_total_err_cor', 'aer_rootport_total_err_fatal', 'aer_rootport_total_err_nonfatal')
TOTALS = {'aer_dev_correctable': 'TOTAL_ERR_COR', 'aer_dev_fatal': 'TOTAL_ERR_FATAL', 'aer_dev_nonfatal': 'TOTAL_ERR_NONFATAL'}
# Kernel 4.19's long names -> the short names of later kernels (drivers/pci/pcie/aer.c
# aer_correctable_error_string[] and aer_uncorrectable_error_string[]).
LONG_NAMES = {
    'Receiver Error': 'RxErr', 'Bad TLP': 'BadTLP', 'Bad DLLP': 'BadDLLP', 'RELAY_NUM Rollover': 'Rollover',
    'Replay Timer Timeout': 'Timeout', 'Advisory Non-Fatal': 'NonFatalErr', 'Corrected Internal Error': 'CorrIntErr',
    'Header Log Overflow': 'HeaderOF', 'Data Link Protocol': 'DLP', 'Surprise Down Error': 'SDES', 'Poisoned TLP': 'TLP',
    'Flow Control Protocol': 'FCP', 'Completion Timeout': 'CmpltTO', 'Completer Abort': 'CmpltAbrt',
    'Unexpected Completion': 'UnxCmplt', 'Receiver Overflow': 'RxOF', 'Malformed TLP': 'MalfTLP',
    'Unsupported Request': 'UnsupReq', 'ACS Violation': 'ACSViol', 'Uncorrectable Internal Error': 'UncorrIntErr',
    'MC Blocked TLP': 'BlockedTLP', 'AtomicOp Egress Blocked': 'AtomicOpBlocked', 'TLP Prefix Blocked Error': 'TLPBlockedErr',
}
# The correctable errors that mean the link replays (Data Link Layer retries: PCIe Base Specification, 3.6
# "Data Link Layer retry"): what slows a link that trained at full width and speed.
REPLAY_ERRORS = ('RxErr', 'BadTLP', 'BadDLLP', 'Rollover', 'Timeout')
# A file has 8 (correctable) to 27 (uncorrectable, kernel 6.x) lines: anything past LINES_MAX is no AER file.
LINES_MAX = 64
# A u64 has 20 digits; a name is a word or a few (the long names: up to 29 characters).
_LINE_RE = re.compile(r'^(?P<name>[A-Za-z_][A-Za-z0-9_ .-]{0,47}?)\s+(?P<count>\d{1,20})$', re.A)
_COUNT_RE = re.compile(r'^\s*(\d{1,20})\s*$', re.A)
_BDF_RE = re.compile(r'^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')
U64_MAX = (1 << 64) - 1


def parse_aer(text: Any) -> dict[str, Any]:
    """One aer_dev_* file -> {'counters': {short name: count}, 'total': the TOTAL_ERR_* count or None,
    'unread': [lines that are no '<name> <count>' line, at most 5]}. Never raises on any text."""
    counters: dict[str, int] = {}
    unread: list[str] = []
    total = None
    if not isinstance(text, str):
        return {'counters': counters, 'total': None, 'unread': ['not text'] if text is not None else []}
    for number, line in enumerate(text.splitlines()):
        if number >= LINES_MAX:
            unread.append('more than %d lines: the rest not read' % LINES_MAX)
            break
        line = line.strip()
        if not line:
            continue
        match = _LINE_RE.match(line)
        count = int(match.group('count')) if match else None
        if match is None or count is None or count > U64_MAX:
            if len(unread) < 5:
                unread.append(ascii(line[:80]))
            continue
        name = ' '.join(match.group('name').split())
        if name.startswith('TOTAL_ERR_'):
            total = count
            continue
        counters[LONG_NAMES.get(name, name)] = count
    return {'counters': counters, 'total': total, 'unread': unread}


def parse_count(text: Any) -> int | None:
    """An aer_rootport_total_err_* file (one number) -> its count, None when it is no count."""
    if not isinstance(text, str) or len(text) > 64:
        return None
    match = _COUNT_RE.match(text)
    if not match:
        return None
    value = int(match.group(1))
    return value if value <= U64_MAX else None


def read_aer(sysroot: SysRoot, bdf: str) -> dict[str, int] | None:
    """The AER counts of one PCI device, flat and compact: each correctable error by its short name (those above 0),
    and the totals (TOTAL_ERR_COR, TOTAL_ERR_FATAL, TOTAL_ERR_NONFATAL, and on a root port
    rootport_cor/_fatal/_nonfatal). None when the device has no AER statistics (no such file: a kernel
    before 4.19, a device without the AER capability, or not a PCI address)."""
    if not isinstance(bdf, str) or not _BDF_RE.match(bdf):
        return None
    base = '%s/%s' % (PCI_DEVICES, bdf)
    found: dict[str, int] = {}
    seen = False
    for name in FILES:
        text = sysroot.text('%s/%s' % (base, name), quiet=True)
        if text is None:
            continue
        seen = True
        parsed = parse_aer(text)
        if name == 'aer_dev_correctable':
            # Kinds at 0 are left out (a read goes back to the controller after every step that changed a counter);
            # the totals always stay, so that a function read is told from one not read (plugin_utils/bench/_window.py).
            found.update((key, value) for key, value in parsed['counters'].items() if key in REPLAY_ERRORS and value)
        if parsed['total'] is not None:
            found[TOTALS[name]] = parsed['total']
    for name in ROOTPORT_FILES:
        count = parse_count(sysroot.text('%s/%s' % (base, name), quiet=True))
        if count is not None:
            found['rootport_' + name.rsplit('_', 1)[-1]] = count
    return found if seen else None
