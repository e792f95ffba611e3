# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Host settings RDMA jobs depend on, read below one root (gdr_facts ``host``).

The host layer of the diagnosis: the CPU frequency governor (perftest's "CPU Frequency
is not max", as in tests/fixtures/public/perftest/deepops_roce_ib_write_bw_rdma_cm_cpufreq_warn.txt,
until ``cpupower frequency-set -g performance``), the
locked-memory limit a job gets (verbs pin every registered buffer against
RLIMIT_MEMLOCK), which kernel modules are loaded now and which are loaded again at
the next boot, and the interface of the default route (NCCL_SOCKET_IFNAME).

File reads only, through a SysRoot: no tool runs, so the same code reads a live node,
a snapshot and a simulated node. What the configure roles write (memlock,
rdma_modules) reads back as configured.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:   # for the annotations only: the readers take a SysRoot
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot

CPU_DIR = '/sys/devices/system/cpu'
_CPU_RE = re.compile(r'^cpu\d+$')

# The row of /proc/<pid>/limits (fs/proc/base.c proc_pid_limits, lnames[RLIMIT_MEMLOCK]).
_MEMLOCK_ROW = 'Max locked memory'
# include/uapi/linux/capability.h: CAP_IPC_LOCK. ib_umem_get() (drivers/infiniband/core/umem.c)
# refuses a registration beyond RLIMIT_MEMLOCK only 'if (new_pinned > lock_limit && !capable(CAP_IPC_LOCK))'.
CAP_IPC_LOCK = 14

# pam_limits reads limits.conf, then the *.conf files of limits.d in C-locale order (pam_limits(8)).
LIMITS_CONF = '/etc/security/limits.conf'
LIMITS_D = '/etc/security/limits.d'
# limits.conf(5): 'All items support the values -1, unlimited or infinity indicating no limit'.
_UNLIMITED_WORDS = ('unlimited', 'infinity', '-1')

# systemd-system.conf(5): system.conf, then the drop-ins of every system.conf.d directory sorted
# by file name (a name in an earlier directory hides the same name in a later one); later wins.
SYSTEM_CONF = '/etc/systemd/system.conf'
SYSTEM_CONF_D = ('/etc/systemd/system.conf.d', '/run/systemd/system.conf.d',
                 '/usr/local/lib/systemd/system.conf.d', '/usr/lib/systemd/system.conf.d')
# systemd parse_size() with base 1024: 'K' is 1024 bytes (systemd.exec(5) LimitMEMLOCK=).
_SIZE_SUFFIXES = {'': 1, 'B': 1, 'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40, 'P': 1 << 50, 'E': 1 << 60}
# ASCII digits, at most 20 (any 64-bit value): re.A keeps '\u0663' out, and a longer run is no
# size (int() refuses past its digit limit with a ValueError).
_SIZE_RE = re.compile(r'^(\d{1,20})\s*([KMGTPE]?)B?$', re.I | re.A)
_DECIMAL_RE = re.compile(r'^\d{1,20}$', re.A)

# modules-load.d(5): systemd-modules-load reads *.conf from these, a file name in an earlier
# directory hiding the same name in a later one; '/dev/null' or an empty file masks it.
MODULES_LOAD_D = ('/etc/modules-load.d', '/run/modules-load.d', '/usr/local/lib/modules-load.d',
                  '/usr/lib/modules-load.d', '/lib/modules-load.d')
# Debian: one module per line, optional arguments after it (modules(5)); kmod links
# /etc/modules-load.d/modules.conf to it, so it is read once.
DEBIAN_MODULES = '/etc/modules'
# rdma-core: rdma-load-modules@<kind>.service, started by its udev rules when an RDMA device
# of that kind appears, runs systemd-modules-load on /etc/rdma/modules/<kind>.conf (infiniband,
# roce, iwarp, opa, rdma): modules listed there come back at boot on a node with that device.
RDMA_CORE_MODULES = '/etc/rdma/modules'

# net/ipv4/fib_trie.c fib_route_seq_show(): Iface, Destination, Gateway, Flags, RefCnt, Use,
# Metric, Mask, MTU, Window, IRTT; addresses are the __be32 printed with %08X (host byte order).
_RTF_UP = 0x0001


def parse_value(text: str | None) -> int | str | None:
    """'unlimited' or an int from a /proc/<pid>/limits cell."""
    if text is None:
        return None
    if text == 'unlimited':
        return 'unlimited'
    # The kernel prints '%-20lu' (fs/proc/base.c): decimal ASCII digits; int() alone would take
    # '1_0', ' 1' or '\u0663'.
    return int(text) if _DECIMAL_RE.match(text) else None


def parse_proc_limits(text: str | None) -> dict[str, Any]:
    """/proc/<pid>/limits -> {'soft', 'hard'} of RLIMIT_MEMLOCK in bytes or 'unlimited' (None when absent).

    Rows are '%-25s %-20s %-20s %-10s' (fs/proc/base.c); the names hold single spaces,
    so the row is found by its name and the rest split on whitespace.
    """
    for line in (text or '').splitlines():
        if line.startswith(_MEMLOCK_ROW):
            cells = line[len(_MEMLOCK_ROW):].split()
            if len(cells) >= 2:
                return {'soft': parse_value(cells[0]), 'hard': parse_value(cells[1])}
    return {'soft': None, 'hard': None}


def parse_cap_ipc_lock(status_text: str | None) -> bool | None:
    """True/False from the CapEff line of /proc/<pid>/status, None when it is not there."""
    for line in (status_text or '').splitlines():
        if line.startswith('CapEff:'):
            try:
                return bool(int(line.split(':', 1)[1].strip(), 16) >> CAP_IPC_LOCK & 1)
            except ValueError:
                return None
    return None


def parse_limits_conf(text: str | None, path: str) -> list[dict[str, Any]]:
    """memlock entries of a limits.conf(5) file: domain, type (soft, hard or '-' for both),
    value as written, bytes (the file counts KiB) or 'unlimited', and the file."""
    entries: list[dict[str, Any]] = []
    for line in (text or '').splitlines():
        fields = line.split('#', 1)[0].split()
        # pam_limits compares the item name exactly (strcmp "memlock").
        if len(fields) < 4 or fields[2] != 'memlock':
            continue
        value = fields[3]
        if value.lower() in _UNLIMITED_WORDS:
            size: int | str | None = 'unlimited'
        else:
            # Not str.isdigit(): it is True for '\u00b2', which int() refuses.
            size = int(value) * 1024 if _DECIMAL_RE.match(value) else None
        entries.append({'domain': fields[0], 'type': fields[1], 'value': value, 'bytes': size, 'file': path})
    return entries


def parse_systemd_size(text: str | None) -> int | str | None:
    """A systemd resource-limit size: bytes, 'unlimited' (infinity) or None."""
    word = (text or '').strip()
    if word.lower() == 'infinity':
        return 'unlimited'
    match = _SIZE_RE.match(word)
    if not match:
        return None
    return int(match.group(1)) * _SIZE_SUFFIXES[match.group(2).upper()]


def parse_system_conf(text: str | None, path: str) -> list[dict[str, Any]]:
    """DefaultLimitMEMLOCK= lines of the [Manager] section: 'soft:hard' or one value for both."""
    entries: list[dict[str, Any]] = []
    section = None
    for line in (text or '').splitlines():
        line = line.strip()
        if not line or line[0] in '#;':
            continue
        if line.startswith('['):
            section = line
            continue
        key, sep, value = line.partition('=')
        if sep and section == '[Manager]' and key.strip() == 'DefaultLimitMEMLOCK':
            value = value.strip()
            soft, _sep, hard = value.partition(':')
            entries.append({'value': value, 'soft': parse_systemd_size(soft),
                            'hard': parse_systemd_size(hard if _sep else soft), 'file': path})
    return entries


def parse_module_list(text: str | None, debian: bool = False) -> list[str]:
    """Module names of a modules-load.d file (or /etc/modules when ``debian``), '-' read as '_'
    as modprobe does; lines starting with '#' or ';' are comments (modules-load.d(5))."""
    names: list[str] = []
    comments = '#' if debian else '#;'
    for line in (text or '').splitlines():
        line = line.strip()
        if not line or line[0] in comments:
            continue
        names.append(line.split()[0].replace('-', '_'))
    return names


def parse_proc_modules(text: str | None) -> list[str]:
    """/proc/modules -> sorted module names ('name size refcount deps state address [taint]')."""
    return sorted(set(line.split(None, 1)[0] for line in (text or '').splitlines() if line.strip()))


def parse_default_route(text: str | None) -> str | None:
    """Interface of the IPv4 default route (destination and mask 0, RTF_UP) with the lowest
    metric, the first one listed on a tie (the kernel's choice), or None."""
    best: tuple[int, str] | None = None
    for line in (text or '').splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        try:
            flags, metric = int(fields[3], 16), int(fields[6])
            default = int(fields[1], 16) == 0 and int(fields[7], 16) == 0
        except ValueError:
            continue
        if default and flags & _RTF_UP and (best is None or metric < best[0]):
            best = (metric, fields[0])
    return best[1] if best else None


def _masked(sysroot: SysRoot, rel: str) -> bool:
    """A file linked to /dev/null masks the vendor file of the same name (modules-load.d(5))."""
    # Read as a link inside the root: an unpacked snapshot stores the link re-rooted
    # (_offline.unpack), and no /dev of the machine reading it is looked at.
    return sysroot.link_target(rel) == '/dev/null'


def _conf_files(sysroot: SysRoot, dirs: Iterable[str]) -> list[str]:
    """(node path) of the *.conf files of ``dirs`` systemd would read, sorted by file name;
    a name in an earlier directory hides it in the later ones; masked names are left out."""
    chosen: dict[str, str] = {}
    for base in dirs:
        for name in sysroot.listdir(base):
            if name.endswith('.conf') and name not in chosen:
                chosen[name] = base + '/' + name
    return [chosen[name] for name in sorted(chosen) if not _masked(sysroot, chosen[name])]


def read_governors(sysroot: SysRoot) -> tuple[dict[str, int], bool]:
    """({governor: number of CPUs}, cpufreq present) from cpuN/cpufreq/scaling_governor.

    cpuN/cpufreq exists only when a cpufreq driver runs (a VM usually has none); on a live
    node it is a link to ../cpufreq/policyM, which the read follows.
    """
    governors: dict[str, int] = {}
    for name in sysroot.listdir(CPU_DIR):
        if _CPU_RE.match(name):
            governor = sysroot.text('%s/%s/cpufreq/scaling_governor' % (CPU_DIR, name))
            if governor:
                governors[governor] = governors.get(governor, 0) + 1
    return governors, bool(governors)


def read_memlock(sysroot: SysRoot) -> dict[str, Any]:
    """The locked-memory limit this process got (a job started the same way gets the same)
    and where the node configures it: pam_limits files for logins, DefaultLimitMEMLOCK for
    the services systemd starts (slurmd and its jobs)."""
    memlock = parse_proc_limits(sysroot.text('/proc/self/limits'))
    memlock['cap_ipc_lock'] = parse_cap_ipc_lock(sysroot.text('/proc/self/status', quiet=True))
    entries = parse_limits_conf(sysroot.text(LIMITS_CONF), LIMITS_CONF)
    for name in sysroot.listdir(LIMITS_D):
        if name.endswith('.conf'):
            path = LIMITS_D + '/' + name
            entries.extend(parse_limits_conf(sysroot.text(path), path))
    memlock['limits_conf'] = entries
    systemd = parse_system_conf(sysroot.text(SYSTEM_CONF), SYSTEM_CONF)
    for path in _conf_files(sysroot, SYSTEM_CONF_D):
        systemd.extend(parse_system_conf(sysroot.text(path), path))
    memlock['systemd'] = systemd
    return memlock


def read_persistent_modules(sysroot: SysRoot) -> dict[str, list[str]]:
    """{module: [files that load it at boot]}: modules-load.d, /etc/modules, rdma-core's
    /etc/rdma/modules and modules_load= on the kernel command line."""
    persistent: dict[str, list[str]] = {}

    def add(names: Iterable[str], path: str) -> None:
        for name in names:
            files = persistent.setdefault(name, [])
            if path not in files:
                files.append(path)

    sources = _conf_files(sysroot, MODULES_LOAD_D)
    for path in sources:
        add(parse_module_list(sysroot.text(path)), path)
    if not any(sysroot.resolve(path) == DEBIAN_MODULES for path in sources):
        add(parse_module_list(sysroot.text(DEBIAN_MODULES), debian=True), DEBIAN_MODULES)
    for name in sysroot.listdir(RDMA_CORE_MODULES):
        if name.endswith('.conf'):
            path = RDMA_CORE_MODULES + '/' + name
            add(parse_module_list(sysroot.text(path)), path)
    # systemd-modules-load also reads modules_load= (rd.modules_load= in the initrd), comma-separated.
    for word in (sysroot.text('/proc/cmdline', quiet=True) or '').split():
        key, sep, value = word.partition('=')
        if sep and key in ('modules_load', 'rd.modules_load'):
            add([n.replace('-', '_') for n in value.split(',') if n], '/proc/cmdline')
    return persistent


def read_host(sysroot: SysRoot) -> dict[str, Any]:
    """All host-layer facts of the node under ``sysroot``."""
    governors, cpufreq = read_governors(sysroot)
    return {
        'cpufreq': cpufreq,
        'cpu_governors': governors,
        'memlock': read_memlock(sysroot),
        'modules_loaded': parse_proc_modules(sysroot.text('/proc/modules')),
        'modules_persistent': read_persistent_modules(sysroot),
        'default_route_interface': parse_default_route(sysroot.text('/proc/net/route')),
    }
