# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The GPUs' own state, from the vendor's tool: parsers (pure functions over strings) of
``nvidia-smi --query-gpu=... --format=csv``, ``--query-compute-apps``, ``nvidia-smi nvlink -s``
and ``nvlink -e``, and of the kernel log's XID lines; and ``read_gpu_state``, which runs the
tool through a runner the caller gives (module gpu_state_facts: module_utils/_process.py with a
timeout on every call).

Formats proven on real outputs: tests/fixtures/real/h200x2/state/ (driver 580.159.04) and
tests/fixtures/public/gpu_state/ (each file names its public source). Node-side code: facts
only, never a finding code (the rules are plugins/plugin_utils/diagnosis/rules/_gpu.py).
"""

from __future__ import annotations

import collections
import errno
import math
import os
import re
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _process

# run(argv) -> (stdout, stderr, why it did not succeed or None): module gpu_state_facts' Runner.
Runner = Callable[[List[str]], Tuple[str, str, Optional[str]]]

# Every field of the one --query-gpu call, in this order (nvidia-smi --help-query-gpu of driver
# 580: tests/fixtures/real/h200x2/state/nvsmi_help_query_gpu.txt). Key: the facts' name.
QUERY_FIELDS = (
    ('index', 'index'), ('pci.bus_id', 'bus_id'), ('uuid', 'uuid'), ('name', 'name'), ('driver_version', 'driver_version'),
    ('vbios_version', 'vbios'), ('persistence_mode', 'persistence_mode'), ('compute_mode', 'compute_mode'),
    ('pstate', 'pstate'), ('temperature.gpu', 'temperature_c'), ('power.draw', 'power_w'), ('power.limit', 'power_limit_w'),
    ('enforced.power.limit', 'enforced_power_limit_w'), ('clocks.current.sm', 'sm_clock_mhz'), ('clocks.max.sm', 'sm_clock_max_mhz'),
    ('clocks.current.memory', 'mem_clock_mhz'), ('clocks.max.memory', 'mem_clock_max_mhz'),
    ('clocks_event_reasons.active', 'clock_reasons_mask'),
    ('clocks_event_reasons.gpu_idle', 'reason:gpu_idle'),
    ('clocks_event_reasons.applications_clocks_setting', 'reason:applications_clocks_setting'),
    ('clocks_event_reasons.sw_power_cap', 'reason:sw_power_cap'), ('clocks_event_reasons.hw_slowdown', 'reason:hw_slowdown'),
    ('clocks_event_reasons.hw_thermal_slowdown', 'reason:hw_thermal_slowdown'),
    ('clocks_event_reasons.hw_power_brake_slowdown', 'reason:hw_power_brake_slowdown'),
    ('clocks_event_reasons.sw_thermal_slowdown', 'reason:sw_thermal_slowdown'), ('clocks_event_reasons.sync_boost', 'reason:sync_boost'),
    ('utilization.gpu', 'utilization_pct'), ('memory.used', 'memory_used_mib'), ('memory.total', 'memory_total_mib'),
    ('ecc.errors.uncorrected.volatile.total', 'ecc_uncorrected'), ('retired_pages.pending', 'retired_pages_pending'),
    ('remapped_rows.pending', 'remapped_rows_pending'), ('remapped_rows.failure', 'remapped_rows_failure'),
    ('pcie.link.gen.current', 'pcie_gen'), ('pcie.link.gen.max', 'pcie_gen_max'), ('pcie.link.width.current', 'pcie_width'),
    ('pcie.link.width.max', 'pcie_width_max'),
)
_KEY_OF = dict(QUERY_FIELDS)
# Drivers before the clocks_event_reasons names (nvidia-smi of R535 and older) know them as
# clocks_throttle_reasons.*; driver 580 still accepts the old names and answers under the new
# header (tests/fixtures/real/h200x2/state/nvsmi_query_gpu_throttle.txt).
OLD_PREFIX, NEW_PREFIX = 'clocks_throttle_reasons.', 'clocks_event_reasons.'
APPS_FIELDS = ('gpu_bus_id', 'gpu_uuid', 'pid', 'process_name', 'used_memory')
# The header nvidia-smi prints for a requested field where the two differ (real: nvsmi_apps_busy.txt).
_APPS_HEADER = {'used_gpu_memory': 'used_memory', 'name': 'process_name'}
_INT_KEYS = ('index', 'temperature_c', 'sm_clock_mhz', 'sm_clock_max_mhz', 'mem_clock_mhz', 'mem_clock_max_mhz',
             'utilization_pct', 'memory_used_mib', 'memory_total_mib', 'ecc_uncorrected', 'pcie_gen', 'pcie_gen_max',
             'pcie_width', 'pcie_width_max')
_FLOAT_KEYS = ('power_w', 'power_limit_w', 'enforced_power_limit_w')
_BOOL_KEYS = ('retired_pages_pending', 'remapped_rows_pending', 'remapped_rows_failure')
# nvml.h nvmlClocksEventReasons (clocksEventReasonGpuIdle 0x1 ... clocksEventReasonDisplayClockSetting 0x100):
# the bits of clocks_event_reasons.active, read where the per-reason fields are missing.
REASON_BITS = (
    (0x1, 'gpu_idle'), (0x2, 'applications_clocks_setting'), (0x4, 'sw_power_cap'), (0x8, 'hw_slowdown'),
    (0x10, 'sync_boost'), (0x20, 'sw_thermal_slowdown'), (0x40, 'hw_thermal_slowdown'), (0x80, 'hw_power_brake_slowdown'),
    (0x100, 'display_clock_setting'),
)
# Values nvidia-smi prints where it has none: "[N/A]" (tests/fixtures/real/h200x2/state/nvsmi_query_gpu.txt),
# "N/A" (-q, nvsmi_q_perf.txt there), and its other placeholders in brackets, read alike: no value, never a 0.
_NO_VALUE = re.compile(r'^\[?(N/A|Not Supported|Unknown Error|GPU is lost|Insufficient Permissions|Requested functionality has been deprecated)\]?$',
                       re.I)
_UNIT = re.compile(r'\[[^\]]*\]$')
_VALUE_UNIT = re.compile(r'^(-?[0-9]+(?:\.[0-9]+)?)\s*(W|MHz|MiB|%|C)?$')
# "Field "no.such.field" is not a valid field to query." with rc 2 (real: nvsmi_query_bad.txt).
_BAD_FIELD = re.compile(r'Field "([^"]{1,200})" is not a valid field to query')

# Bounds: inputs from other people's nodes are hostile (a paste, a log of years).
LINE_MAX = 4096          # characters of one line read; longer lines are cut
GPUS_MAX = 64            # GPUs read per node (an HGX/NVL board has 8; 64 leaves room for any node)
PROCESSES_MAX = 256      # compute processes kept
LINKS_MAX = 64           # NVLinks per GPU (18 on H100/H200, nvsmi_nvlink_s.txt)
XID_MAX = 64             # distinct XID events kept (the newest)
KMSG_BYTES = 4 << 20     # bytes of the kernel log kept (the newest)
KMSG_READ_MAX = 64 << 20  # bytes of /dev/kmsg read at most (twice the largest log_buf_len, CONFIG_LOG_BUF_SHIFT=25)

# A monitoring agent that keeps a context on every GPU is not another job on it: DCGM's host
# engine and exporter (NVIDIA DCGM user guide, "nv-hostengine"; NVIDIA/dcgm-exporter), the
# NVIDIA device plugin's and gpu-feature-discovery's probes, nvidia-persistenced. Such an agent
# holds a CUDA context of a few hundred MiB on a GPU; MONITORING_MIB_MAX sits above that and below
# what even a small job holds (the real node's matrix products in one python3 process held 1644 MiB:
# tests/fixtures/real/h200x2/state/nvsmi_apps_busy.txt): an agent's name holding more is a job.
# dcgmproftester is DCGM's load generator, not an agent: it is a job like any other.
MONITORING_AGENTS = ('nv-hostengine', 'dcgm-exporter', 'dcgmi', 'nvidia-persistenced', 'nvidia-device-plugin',
                     'gpu-feature-discovery', 'nvidia-dcgm')
MONITORING_MIB_MAX = 1024


def _cut(text: str) -> str:
    return text if len(text) <= LINE_MAX else text[:LINE_MAX]


def _lines(text: str | None) -> list[str]:
    return [_cut(line) for line in (text or '').splitlines()]


def bdf(bus_id: str | None) -> str | None:
    """nvidia-smi's bus id ('00000000:00:06.0', 'PCI:0000:3b:00', '0000:3B:00.0') in sysfs form
    ('0000:00:06.0': lowercase, 4-digit domain, function 0 where none is given), or None."""
    match = re.match(r'^(?:PCI:)?([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?$', (bus_id or '').strip())
    if not match:
        return None
    domain = int(match.group(1), 16)
    if domain > 0xffff:
        return None
    return '%04x:%s:%s.%s' % (domain, match.group(2).lower(), match.group(3).lower(), match.group(4) or '0')


def _value(raw: str) -> str | None:
    raw = raw.strip()
    return None if not raw or _NO_VALUE.match(raw) else raw


def _number(raw: str | None, kind: type) -> Any:
    raw = _value(raw or '')
    if raw is None:
        return None
    match = _VALUE_UNIT.match(raw)
    if not match:
        return None
    try:
        number = float(match.group(1))
    except ValueError:
        return None
    # A run of digits past float's range reads as inf: no value, never a crash or an infinite reading.
    if math.isnan(number) or math.isinf(number):
        return None
    return int(number) if kind is int else number


def _flag(raw: str | None) -> bool | None:
    raw = (_value(raw or '') or '').lower()
    return {'yes': True, 'no': False, 'active': True, 'not active': False, 'enabled': True, 'disabled': False}.get(raw)


def _unitless(cell: str) -> str:
    """A header cell without its unit ('used_gpu_memory [MiB]' -> 'used_gpu_memory')."""
    return _UNIT.sub('', cell.strip()).rstrip()


def field_name(header: str) -> str:
    """A header cell ('power.draw [W]', 'clocks_throttle_reasons.hw_slowdown') -> the field name as requested."""
    name = _UNIT.sub('', header.strip()).rstrip()
    return NEW_PREFIX + name[len(OLD_PREFIX):] if name.startswith(OLD_PREFIX) else name


def _split(line: str) -> list[str]:
    return [cell.strip() for cell in line.split(',')]


def _gpu_record(cells: dict[str, str]) -> dict[str, Any]:
    """One GPU's facts from {field: raw value}."""
    gpu: dict[str, Any] = {'bdf': bdf(cells.get('pci.bus_id') or ''), 'clock_reasons': None}
    for field, raw in cells.items():
        key = _KEY_OF.get(field)
        if key is None or key.startswith('reason:') or key in ('bus_id', 'clock_reasons_mask'):
            continue
        if key in _INT_KEYS:
            gpu[key] = _number(raw, int)
        elif key in _FLOAT_KEYS:
            gpu[key] = _number(raw, float)
        elif key in _BOOL_KEYS:
            gpu[key] = _flag(raw)
        else:
            gpu[key] = _value(raw)
    reasons, read = [], False
    for field, raw in cells.items():
        key = _KEY_OF.get(field) or ''
        if key.startswith('reason:') and _flag(raw) is not None:
            read = True
            if _flag(raw):
                reasons.append(key.split(':', 1)[1])
    mask = _value(cells.get('clocks_event_reasons.active') or '')
    if mask is not None and re.match(r'^0x[0-9a-fA-F]{1,16}$', mask):
        read = True
        bits = int(mask, 16)
        reasons.extend(name for bit, name in REASON_BITS if bits & bit and name not in reasons)
    gpu['clock_reasons'] = sorted(reasons) if read else None
    return gpu


def parse_query_gpu(text: str | None, fields: Sequence[str] | None = None) -> dict[str, Any]:
    """``nvidia-smi --query-gpu=... --format=csv`` (header and units) or ``csv,noheader,nounits``
    (``fields``: the requested list, which names the columns). Returns {'gpus': [...],
    'driver_version', 'unread': [lines not read], 'bad_field': a field the tool refused, or None}."""
    lines = [line for line in _lines(text) if line.strip()]
    result: dict[str, Any] = {'gpus': [], 'driver_version': None, 'unread': [], 'bad_field': None}
    refused = _BAD_FIELD.search(lines[0]) if lines else None
    if refused:
        result['bad_field'] = refused.group(1)
        return result
    names = list(fields or ())
    # A header: it names a field first, or carries units; a row starts with a number (the index).
    header = bool(lines) and not re.match(r'^\s*\d', lines[0])
    if header and (lines[0].split(',')[0].strip() in ('index', 'pci.bus_id', 'uuid', 'name') or '[' in lines[0]):
        names = [field_name(cell) for cell in lines[0].split(',')]
        lines = lines[1:]
    for line in lines:
        cells = _split(line)
        if not names or len(cells) != len(names):
            result['unread'].append(line[:200])
            continue
        if len(result['gpus']) >= GPUS_MAX:
            result['unread'].append('more than %d GPUs: the rest not read' % GPUS_MAX)
            break
        gpu = _gpu_record(dict(zip(names, cells)))
        result['driver_version'] = result['driver_version'] or gpu.pop('driver_version', None)
        gpu.pop('driver_version', None)
        result['gpus'].append(gpu)
    return result


def parse_compute_apps(text: str | None, fields: Sequence[str] = APPS_FIELDS) -> dict[str, Any]:
    """``nvidia-smi --query-compute-apps=gpu_bus_id,gpu_uuid,pid,process_name,used_memory --format=csv``
    (or noheader,nounits with ``fields``): [{'bdf', 'uuid', 'pid', 'name', 'used_mib'}], unread lines."""
    lines = [line for line in _lines(text) if line.strip()]
    names = list(fields)
    if lines and lines[0].split(',')[0].strip() in ('gpu_bus_id', 'gpu_uuid', 'pid', 'process_name', 'gpu_name', 'name'):
        names = [_APPS_HEADER.get(_unitless(cell), _unitless(cell)) for cell in lines[0].split(',')]
        lines = lines[1:]
    processes, unread = [], []
    for line in lines:
        if 'No running' in line:    # old drivers: "No running processes found"
            continue
        # A process name may hold a comma: the fields after it are the last ones.
        cells = _split(line)
        if len(cells) > len(names) and 'process_name' in names:
            at = names.index('process_name')
            extra = len(cells) - len(names)
            cells = cells[:at] + [', '.join(cells[at:at + extra + 1])] + cells[at + extra + 1:]
        if len(cells) != len(names):
            unread.append(line[:200])
            continue
        row = dict(zip(names, cells))
        pid = _number(row.get('pid') or '', int)
        processes.append({'bdf': bdf(row.get('gpu_bus_id') or ''), 'uuid': _value(row.get('gpu_uuid') or ''), 'pid': pid,
                          'name': (_value(row.get('process_name') or '') or '')[:256] or None,
                          'used_mib': _number(row.get('used_memory') or '', int)})
        if len(processes) >= PROCESSES_MAX:
            unread.append('more than %d processes: the rest not read' % PROCESSES_MAX)
            break
    return {'processes': processes, 'unread': unread}


_GPU_HEAD = re.compile(r'^GPU (\d+): (.*?) \(UUID: ([^)]*)\)\s*$')
# Matched against the stripped line: no run of blanks is left for two quantifiers to share.
_LINK_SPEED = re.compile(r'^Link (\d+): (?:(\d+(?:\.\d+)?) GB/s|<inactive>|(.*))$')
_LINK_ERROR = re.compile(r'^\s*Link (\d+): ([A-Za-z ]+?) Errors?: (\d+|N/A)\s*$')


def parse_nvlink_status(text: str | None) -> dict[str, Any]:
    """``nvidia-smi nvlink -s``: {uuid: {'index', 'name', 'links', 'active', 'inactive': [n],
    'speed_gbs'}}, a GPU with no link line has links 0. "Link 3: <inactive>" as in
    Azure/azhpc-diagnostics#73; "all links are inactive" as NVML says it for a GPU whose links are all down."""
    gpus: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    unread: list[str] = []
    for line in _lines(text):
        head = _GPU_HEAD.match(line)
        if head:
            if len(gpus) >= GPUS_MAX:
                break
            current = {'index': int(head.group(1)), 'name': head.group(2), 'links': 0, 'active': 0, 'inactive': [],
                       'speed_gbs': None, 'all_inactive': False}
            gpus[head.group(3)] = current
            continue
        if current is None or not line.strip():
            continue
        link = _LINK_SPEED.match(line.strip())
        if link and current['links'] < LINKS_MAX:
            current['links'] += 1
            if link.group(2) is not None:
                current['active'] += 1
                speed = float(link.group(2))
                current['speed_gbs'] = speed if current['speed_gbs'] is None else min(current['speed_gbs'], speed)
                if speed == 0:
                    current['active'] -= 1
                    current['inactive'].append(int(link.group(1)))
            else:
                current['inactive'].append(int(link.group(1)))
        elif 'inactive' in line.lower():
            current['all_inactive'] = True
        else:
            unread.append(line.strip()[:200])
    return {'gpus': gpus, 'unread': unread[:20]}


def parse_nvlink_errors(text: str | None) -> dict[str, dict[str, int]]:
    """``nvidia-smi nvlink -e``: {uuid: {'replay', 'recovery', 'crc'}} summed over the GPU's links
    (CRC FLIT and CRC Data counts of older drivers add to crc)."""
    gpus: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in _lines(text):
        head = _GPU_HEAD.match(line)
        if head:
            if len(gpus) >= GPUS_MAX:
                break
            current = gpus.setdefault(head.group(3), {'replay': 0, 'recovery': 0, 'crc': 0})
            continue
        match = _LINK_ERROR.match(line)
        if current is None or not match or match.group(3) == 'N/A':
            continue
        kind = match.group(2).strip().lower()
        key = 'replay' if 'replay' in kind else 'recovery' if 'recovery' in kind else 'crc' if 'crc' in kind else None
        if key:
            current[key] = min(current[key] + int(match.group(3)), 1 << 62)
    return gpus


# NVIDIA's XID catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, "XID
# errors v580"): what each XID means and what it asks for. 'application': the job's own error (a bad
# kernel, a page fault, a job stopped) - the GPU is fine; 'warning': worth a look, no reset needed
# by itself; 'reset': the GPU needs a reset (or reboot) to be trusted again; 'hardware': the GPU or
# its board/bus is failing (field diagnostics, RMA).
XID_CATALOG = {
    8: ('warning', 'GPU stopped processing (channel timeout)'),
    13: ('application', 'graphics engine exception (an application\'s kernel faulted)'),
    31: ('application', 'GPU memory page fault (an application\'s illegal address)'),
    32: ('warning', 'invalid or corrupted push buffer stream (driver, or PCIe errors)'),
    38: ('warning', 'driver firmware error'),
    43: ('application', 'GPU stopped processing (the application\'s channel was torn down)'),
    45: ('application', 'preemptive cleanup after an earlier error (the job was stopped)'),
    48: ('reset', 'double-bit ECC error (uncorrectable)'),
    61: ('reset', 'internal micro-controller breakpoint/warning'),
    62: ('reset', 'internal micro-controller halt'),
    63: ('warning', 'ECC page retirement or row remapping recorded (applied at the next GPU reset)'),
    64: ('reset', 'ECC page retirement or row remapping failed'),
    68: ('application', 'video decoder exception'),
    69: ('warning', 'graphics engine class error'),
    74: ('hardware', 'NVLink error'),
    79: ('hardware', 'GPU has fallen off the bus'),
    92: ('warning', 'high single-bit ECC error rate'),
    94: ('reset', 'contained ECC error (the affected application was stopped; reset to clear)'),
    95: ('reset', 'uncontained ECC error (every application on the GPU is affected; reset)'),
    109: ('warning', 'context switch timeout'),
    119: ('reset', 'GSP RPC timeout'),
    120: ('reset', 'GSP error'),
    121: ('warning', 'C2C link corrected error'),
    123: ('reset', 'SPI PMU RPC write failure'),
    140: ('reset', 'unrecovered ECC error'),
    143: ('reset', 'GPU initialization failure'),
    144: ('warning', 'NVLink SAW error'), 145: ('warning', 'NVLink RLW error'), 146: ('warning', 'NVLink TLW error'),
    147: ('warning', 'NVLink TREX error'), 148: ('warning', 'NVLink NVLPW control error'),
    149: ('hardware', 'NVLink NETIR error'), 150: ('warning', 'NVLink MSE error'),
}
# kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., GPU has fallen off the bus.
_XID = re.compile(r'NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\): (\d{1,4}),\s?(.*)$')
# Newer drivers say it over several lines without an XID (NVIDIA/NVSentinel#155): "NVRM: The NVIDIA GPU 0000:b3:00.0".
_FALLEN_HEAD = re.compile(r'NVRM: The NVIDIA GPU ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])')


def xid_severity(code: int) -> tuple[str, str]:
    return (XID_CATALOG.get(code) or ('warning', 'not in this catalog: see NVIDIA\'s XID catalog'))


def _kmsg_text(line: str) -> str:
    """The message of a /dev/kmsg record ('6,1234,5678,-;NVRM: ...'); other lines as they are."""
    match = re.match(r'^\d+,\d+,\d+,[^;]*;(.*)$', line)
    return match.group(1) if match else line


def parse_xid(text: str | None) -> list[dict[str, Any]]:
    """XID events of a kernel log (dmesg, journalctl -k, /dev/kmsg records): [{'bdf', 'xid',
    'severity', 'kind', 'meaning', 'text', 'count'}], one entry per (GPU, XID) with the last
    text and how often it was seen; at most XID_MAX, the newest kept."""
    events: dict[tuple[str | None, int], dict[str, Any]] = {}
    pending_fallen = None
    for raw in _lines(text):
        line = _kmsg_text(raw)
        match = _XID.search(line)
        if match:
            key = (bdf(match.group(1)), int(match.group(2)))
            body = match.group(3).strip()
        else:
            head = _FALLEN_HEAD.search(line)
            if head:
                pending_fallen = bdf(head.group(1))
                continue
            if pending_fallen and 'fallen off the bus' in line:
                key, body = (pending_fallen, 79), 'GPU has fallen off the bus (said without an XID)'
                pending_fallen = None
            else:
                continue
        kind, meaning = xid_severity(key[1])
        entry = events.pop(key, None) or {'bdf': key[0], 'xid': key[1], 'kind': kind, 'meaning': meaning, 'count': 0}
        entry['count'] += 1
        entry['text'] = body[:300]
        entry['severity'] = {'application': 'info', 'warning': 'warning'}.get(kind, 'error')
        events[key] = entry     # re-inserted: the dict's order is the order last seen
        if len(events) > XID_MAX:
            events.pop(next(iter(events)))
    return list(events.values())


def is_monitoring(process: dict[str, Any], extra_names: Iterable[str] = ()) -> bool:
    """Is a compute process a monitoring agent (MONITORING_AGENTS or ``extra_names``, holding at most
    MONITORING_MIB_MAX), not another job on the GPU?"""
    name = (process.get('name') or '').rsplit('/', 1)[-1]
    known = name in MONITORING_AGENTS or name in tuple(extra_names or ())
    used = process.get('used_mib')
    return known and (used is None or used <= MONITORING_MIB_MAX)


def foreign_processes(processes: Iterable[dict[str, Any]] | None, own_pids: Iterable[Any] | None = (),
                      extra_names: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The compute processes that are neither the benchmark's own (``own_pids``) nor a monitoring agent."""
    own = set(own_pids or ())
    return [p for p in processes or [] if p.get('pid') not in own and not is_monitoring(p, extra_names)]


def _uid_user(sysroot: Any, pid: Any) -> str | None:
    """The owner of a process (Uid of /proc/<pid>/status, named from /etc/passwd), or None."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    status = sysroot.text('proc/%d/status' % pid, quiet=True) or ''
    match = re.search(r'^Uid:\s+(\d+)', status, re.M)
    if not match:
        return None
    uid = match.group(1)
    for line in (sysroot.text('etc/passwd', quiet=True) or '').splitlines():
        parts = line.split(':')
        if len(parts) > 2 and parts[2] == uid:
            return parts[0][:64]
    return 'uid %s' % uid


def _query_gpus(run: Runner, tool: str) -> tuple[dict[str, Any], str | None, list[str]]:
    """The one --query-gpu call (fewer fields when the driver refuses one): (parsed, why not read or None, calls)."""
    fields = [name for name, _key in QUERY_FIELDS]
    calls = []
    for _attempt in range(6):
        out, err, why = run([tool, '--query-gpu=' + ','.join(fields), '--format=csv'])
        calls.append(why or 'ok')
        parsed = parse_query_gpu(out + '\n' + err if why and why.startswith('rc') else out)
        bad = parsed['bad_field'] or (_BAD_FIELD.search(err or '') or [None, None])[1]
        if bad and bad in fields and len(fields) > 2:
            # An older driver: the old name of the clock reasons, else the field left out.
            fields = [OLD_PREFIX + f[len(NEW_PREFIX):] if bad.startswith(NEW_PREFIX) and f.startswith(NEW_PREFIX) else f
                      for f in fields if f != bad or bad.startswith(NEW_PREFIX)]
            continue
        if why:
            return parsed, why, calls
        parsed['fields_left_out'] = [name for name, _key in QUERY_FIELDS if field_name(name) not in [field_name(f) for f in fields]]
        return parsed, None, calls
    return {'gpus': [], 'driver_version': None, 'unread': []}, 'the driver refused field after field', calls


def _merge_nvlink(gpus: list[dict[str, Any]], status: dict[str, Any], errors: dict[str, Any]) -> None:
    by_uuid = dict((gpu.get('uuid'), gpu) for gpu in gpus)
    for uuid, link in status['gpus'].items():
        gpu = by_uuid.get(uuid)
        if gpu is None:
            continue
        if not link['links'] and not link['all_inactive']:
            gpu['nvlink'] = None      # no NVLink on this GPU
            continue
        gpu['nvlink'] = {'links': link['links'], 'active': link['active'], 'inactive': link['inactive'],
                         'all_inactive': link['all_inactive'], 'speed_gbs': link['speed_gbs'], 'errors': errors.get(uuid)}


def read_gpu_state(run: Runner, tool: str | None, sysroot: Any, kernel_log: Callable[[], tuple[str, str | None]],  # pylint: disable=too-many-branches
                   parts: Sequence[str] = ('gpus', 'processes', 'nvlink', 'xid')) -> dict[str, Any]:
    """The facts gpu_fabric_gpu. ``run(argv)`` -> (stdout, stderr, why not ok or None); ``tool`` the
    path of nvidia-smi or None (not installed: every part not read); ``kernel_log()`` -> (text, why
    not read or None); ``parts`` what to read (the idle gate reads only the processes)."""
    facts: dict[str, Any] = {'tool': 'nvidia-smi' if tool else None, 'driver_version': None, 'gpus': [], 'processes': [], 'xid': [],
                             'not_read': {}, 'calls': {}}
    if not tool:
        for part in parts:
            if part != 'xid':
                facts['not_read'][part] = 'nvidia-smi not found on the PATH'
    if tool and 'gpus' in parts:
        parsed, why, calls = _query_gpus(run, tool)
        facts['calls']['query_gpu'] = calls
        facts['gpus'], facts['driver_version'] = parsed['gpus'], parsed['driver_version']
        if why:
            facts['not_read']['gpus'] = 'nvidia-smi --query-gpu: %s' % why
        elif parsed.get('unread'):
            facts['unread'] = parsed['unread'][:10]
        if parsed.get('fields_left_out'):
            facts['fields_left_out'] = parsed['fields_left_out']
    if tool and 'processes' in parts:
        out, _err, why = run([tool, '--query-compute-apps=' + ','.join(APPS_FIELDS), '--format=csv'])
        if why:
            facts['not_read']['processes'] = 'nvidia-smi --query-compute-apps: %s' % why
        else:
            apps = parse_compute_apps(out)
            for process in apps['processes']:
                process['user'] = _uid_user(sysroot, process['pid'])
            facts['processes'] = apps['processes']
    if tool and 'nvlink' in parts:
        _read_nvlink(run, tool, facts)
    if 'xid' in parts:
        text, why = kernel_log()
        if why:
            facts['not_read']['xid'] = why
        else:
            facts['xid'] = parse_xid(text)
    for gpu in facts['gpus']:
        gpu.setdefault('nvlink', None)
    return facts


def _read_nvlink(run: Runner, tool: str, facts: dict[str, Any]) -> None:
    if 'gpus' in facts['not_read']:
        facts['not_read']['nvlink'] = 'the GPUs were not read'
        return
    out, _err, why = run([tool, 'nvlink', '-s'])
    if why:
        facts['not_read']['nvlink'] = 'nvidia-smi nvlink -s: %s' % why
        return
    status = parse_nvlink_status(out)
    errors = {}
    if any(link['links'] for link in status['gpus'].values()):
        # -e only where a GPU has NVLink (a PCIe GPU has no counters to read).
        out, _err, why = run([tool, 'nvlink', '-e'])
        if why:
            facts['not_read']['nvlink'] = 'nvidia-smi nvlink -e: %s (link states read, error counters not)' % why
        else:
            errors = parse_nvlink_errors(out)
    _merge_nvlink(facts['gpus'], status, errors)


def read_kmsg(path: str = '/dev/kmsg', limit: int = KMSG_BYTES, most: int = KMSG_READ_MAX, newest: bool = True) -> str:
    """The kernel's ring buffer as /dev/kmsg records, read without blocking (EAGAIN: the end): the
    newest ``limit`` bytes of at most ``most`` read (the records come oldest first, and a ring buffer of
    log_buf_len=32M is larger than ``limit``); ``newest`` False: the oldest ``limit`` bytes (what a driver said
    when it probed, at boot: module_utils/_peermem.py). Raises OSError where it cannot be opened or read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0))
    chunks: collections.deque[bytes] = collections.deque()
    kept = total = 0
    try:
        while total < most:
            try:
                chunk = os.read(fd, 8192)   # one record per read (Documentation/ABI/testing/dev-kmsg)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    break
                if exc.errno == errno.EPIPE:   # a record overwritten while read: go on
                    continue
                raise
            if not chunk:
                break
            chunks.append(chunk)
            kept += len(chunk)
            total += len(chunk)
            if not newest and kept >= limit:
                break
            while kept > limit and len(chunks) > 1:
                kept -= len(chunks.popleft())
    finally:
        os.close(fd)
    return b''.join(chunks).decode('utf-8', 'replace')


# ---------------------------------------------------------------------------- saved outputs
# Where a snapshot keeps the tool's outputs (below its root, beside roce_qos's: module_utils/_roce.py
# SAVED_DIR), one file per call: the tool's stdout as it printed it. gpu_state_facts ``from_log``
# reads them instead of running a tool on a machine that is not the node (offline.yml).
SAVED_DIR = '.gpu_fabric_commands/gpu_state'
SAVED_BYTES = 4 << 20
_SAVED_NAMES = (('--query-gpu=', 'query_gpu.txt'), ('--query-compute-apps=', 'compute_apps.txt'), ('nvlink -s', 'nvlink_s.txt'),
                ('nvlink -e', 'nvlink_e.txt'))


# A saved output whose call did not succeed starts with this line and why; the tool not installed on
# the node is a file of this name (gpu_state_facts then says it as on the node).
SAVED_WHY = '# hpc.gpu_fabric saved output, not ok: '
NOT_INSTALLED = 'nvidia-smi.not_installed'


class ToolRunner(object):
    """run(argv) -> (stdout, stderr, why not ok or None): each call through module_utils/_process.py run()
    (an argument list, ``timeout``, reaped whatever happens), timed; ``answered(argv, stdout, why)`` is told
    each answer (fabric_capture saves them)."""

    def __init__(self, timeout: int, answered: Optional[Callable[[List[str], str, Optional[str]], None]] = None) -> None:
        self.timeout = timeout
        self.answered = answered
        self.timings: List[Dict[str, Any]] = []

    def __call__(self, argv: List[str]) -> Tuple[str, str, Optional[str]]:
        started = time.time()
        launched = _process.run(argv, self.timeout, name=os.path.basename(argv[0]))
        out, err = launched.output()
        self.timings.append({'argv': [os.path.basename(argv[0])] + list(argv[1:2]), 'ms': int(round((time.time() - started) * 1000))})
        why = None
        if launched.timed_out:
            why = 'timed out after %ds' % self.timeout
        elif launched.rc != 0:
            last = (err or out).strip().splitlines()
            why = 'rc %s: %s' % (launched.rc, last[-1][:200] if last else 'no output')
        if self.answered is not None:
            self.answered(list(argv), out, why)
        return out, err, why


def saved_text(out: str, why: Optional[str]) -> str:
    """A call's saved output: its stdout, after SAVED_WHY and why where it did not succeed."""
    return out if why is None else '%s%s\n%s' % (SAVED_WHY, why.replace('\n', ' '), out)


def saved_name(argv: Sequence[str]) -> str | None:
    """The file a call's output is saved as (``argv`` without the tool), or None."""
    words = ' '.join(argv)
    return next((name for start, name in _SAVED_NAMES if words.startswith(start)), None)


def saved_runner(directory: str, read: Callable[[str, int], bytes]) -> Runner:
    """A runner answering from the saved outputs in ``directory`` (``read(path, limit)``: the bounded
    read of module_utils/_paths.py read_regular); a call with no saved output is not read, with why."""
    def run(argv: List[str]) -> Tuple[str, str, Optional[str]]:
        name = saved_name(argv[1:])
        if name is None:
            return '', '', 'no saved output of %s' % ' '.join(argv[1:])[:100]
        try:
            text = read('%s/%s' % (directory, name), SAVED_BYTES).decode('utf-8', 'replace')
            if text.startswith(SAVED_WHY):
                first, _sep, rest = text.partition('\n')
                return rest, '', first[len(SAVED_WHY):]
            return text, '', None
        except (OSError, ValueError) as exc:
            return '', '', 'saved output %s not read (%s)' % (name, getattr(exc, 'strerror', None) or exc)
    return run


def kernel_nvrm_lines(text: str) -> str:
    """The lines of a kernel log the GPU driver wrote (NVRM: XIDs, a GPU fallen off the bus): what a
    snapshot keeps of the kernel log (kmsg.txt), nothing else of the node's messages."""
    return ''.join(line + '\n' for line in _lines(text) if 'NVRM' in line)
