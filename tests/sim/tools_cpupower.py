# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""cpupower stand-in: frequency-info and frequency-set on the simulated node at $GF_SIM_ROOT.

Follows the kernel's tools/power/cpupower: global options of utils/cpupower.c
(-c/--cpu all|LIST, -v/--version, -h/--help), the human output of
utils/cpufreq-info.c and the governor path of utils/cpufreq-set.c and
lib/cpufreq.c, including their exit codes: a negative errno returned by the
subcommand becomes the exit status (-EINVAL -> 234, -ENODEV -> 237).

The kernel refuses a governor that is not registered (scaling_available_governors
here): the write fails, lib/cpufreq.c turns that into -ENODEV, and frequency-set
prints its "Error setting new values" list on stdout after the CPUs it already set.

Only the governor is modelled by the simulator's profiles. What cpufreq-info also
prints (driver, limits, frequency) is read from the node when present and
otherwise taken from the intel_pstate node of
fixtures/public/cpupower/insights_core_intel_pstate_performance_4cpu.txt, whose
governors ('performance powersave') are those the simulator renders. Unlike the
real tool, frequency-set does not ask for root: the simulated node is a directory.
"""

from __future__ import annotations

import os
import re
import sys

EINVAL = 22
ENODEV = 19
EXIT_FAILURE = 1
VERSION = '6.1'
BUGREPORT = 'cpufreq@vger.kernel.org'
COMMANDS = ('frequency-info', 'frequency-set', 'idle-info', 'idle-set', 'powercap-info', 'set', 'info', 'monitor', 'help')
# Values of the intel_pstate fixture, for files a simulated node does not have (kHz).
FALLBACK = {'scaling_driver': 'intel_pstate', 'cpuinfo_min_freq': 800000, 'cpuinfo_max_freq': 3000000}
SET_ERROR = ('Error setting new values. Common errors:\n'
             '- Do you have proper administration rights? (super-user?)\n'
             '- Is the governor you requested available and modprobed?\n'
             '- Trying to set an invalid policy?\n'
             '- Trying to set a specific frequency, but userspace governor is not available,\n'
             '   for example because of hardware which cannot be set to a specific frequency\n'
             '   or because the userspace governor isn\'t loaded?\n')
INFO_OPTIONS = {'e': 'debug', 'p': 'policy', 'g': 'governors', 'd': 'driver', 'l': 'hwlimits',
                'f': 'freq', 'w': 'hwfreq', 'a': 'affected-cpus', 'r': 'related-cpus', 'y': 'latency'}


def print_help():
    print('Usage:\tcpupower [-c|--cpu cpulist ] <command> [<args>]')
    print('Supported commands are:')
    for cmd in COMMANDS:
        print('\t%s' % cmd)
    print('\nNot all commands can make use of the -c cpulist option.')
    print("\nUse 'cpupower help <command>' for getting help for above commands.")


class Node:
    """The CPUs of a simulated node, read and written like lib/cpufreq.c does under /sys."""

    def __init__(self, root):
        self.base = os.path.join(root, 'sys/devices/system/cpu')

    def cpus(self):
        names = os.listdir(self.base) if os.path.isdir(self.base) else []
        return sorted(int(name[3:]) for name in names if re.match(r'^cpu[0-9]+$', name))

    def online(self, cpu):
        # helpers/sysfs.c sysfs_is_cpu_online(): no cpuN directory is offline; no
        # 'online' file (cpu0 on x86) is online.
        if not os.path.isdir(os.path.join(self.base, 'cpu%d' % cpu)):
            return False
        value = self._read(os.path.join(self.base, 'cpu%d' % cpu, 'online'))
        return value is None or value == '1'

    @staticmethod
    def _read(path):
        try:
            with open(path) as handle:
                return handle.read().strip()
        except OSError:
            return None

    def read(self, cpu, name, fallback=True):
        value = self._read(os.path.join(self.base, 'cpu%d' % cpu, 'cpufreq', name))
        if value is None and fallback and self.has_cpufreq(cpu):
            value = FALLBACK.get(name)
        return value

    def has_cpufreq(self, cpu):
        return os.path.exists(os.path.join(self.base, 'cpu%d' % cpu, 'cpufreq', 'scaling_governor'))

    def governors(self, cpu):
        value = self.read(cpu, 'scaling_available_governors', fallback=False)
        return value.split() if value else []

    def policy(self, cpu):
        """(min, max, governor) as cpufreq_get_policy(), or None."""
        governor = self.read(cpu, 'scaling_governor', fallback=False)
        if not governor:
            return None
        low = self.read(cpu, 'scaling_min_freq') or self.read(cpu, 'cpuinfo_min_freq')
        high = self.read(cpu, 'scaling_max_freq') or self.read(cpu, 'cpuinfo_max_freq')
        return int(low), int(high), governor

    def set_governor(self, cpu, governor):
        """The kernel's store_scaling_governor(): only a registered governor is accepted."""
        path = os.path.join(self.base, 'cpu%d' % cpu, 'cpufreq', 'scaling_governor')
        if not os.path.exists(path) or governor not in self.governors(cpu):
            return -ENODEV
        with open(path, 'w') as handle:
            handle.write(governor + '\n')
        return 0


def speed(khz):
    """print_speed() of cpufreq-info.c, rounding as it does."""
    if khz > 1000000:
        if khz % 10000 >= 5000:
            khz += 10000
        return '%d.%02d GHz' % (khz // 1000000, (khz % 1000000) // 10000)
    if khz > 100000:
        if khz % 1000 >= 500:
            khz += 1000
        return '%d MHz' % (khz // 1000)
    if khz > 1000:
        if khz % 100 >= 50:
            khz += 100
        return '%d.%01d MHz' % (khz // 1000, (khz % 1000) // 100)
    return ''


def parse_cpu_list(text):
    """bitmask_parselist(): '0-3,8,10-15'; None when it does not parse."""
    chosen = set()
    for part in text.split(','):
        match = re.match(r'^([0-9]+)(?:-([0-9]+))?$', part)
        if not match:
            return None
        first = int(match.group(1))
        last = int(match.group(2) or first)
        if last < first:
            return None
        chosen.update(range(first, last + 1))
    return chosen


def info_policy(node, cpu):
    policy = node.policy(cpu)
    if policy is None:
        print('  Unable to determine current policy')
        return -EINVAL
    print('  current policy: frequency should be within %s and %s.' % (speed(policy[0]), speed(policy[1])))
    print('                  The governor "%s" may decide which speed to use' % policy[2])
    print('                  within this range.')
    return 0


def info_governors(node, cpu):
    governors = node.governors(cpu)
    if not governors:
        print('  available cpufreq governors: Not Available')
        return -EINVAL
    print('  available cpufreq governors: %s' % ' '.join(governors))
    return 0


def info_driver(node, cpu):
    driver = node.read(cpu, 'scaling_driver')
    if not driver:
        print('  no or unknown cpufreq driver is active on this CPU')
        return -EINVAL
    print('  driver: %s' % driver)
    return 0


def info_cpus(node, cpu, name, label):
    value = node.read(cpu, name)
    if value is None and node.has_cpufreq(cpu):
        value = str(cpu)
    print('  %s: %s' % (label, value if value else 'Not Available'))
    return 0 if value else -EINVAL


def info_latency(node, cpu):
    value = node.read(cpu, 'cpuinfo_transition_latency')
    if not value or int(value) in (0, 4294967295):
        print('  maximum transition latency:  Cannot determine or is not supported.')
        return -EINVAL
    print('  maximum transition latency: %.2f us' % (int(value) / 1000.0))
    return 0


def info_limits(node, cpu):
    low, high = node.read(cpu, 'cpuinfo_min_freq'), node.read(cpu, 'cpuinfo_max_freq')
    if not low or not high:
        print('Not Available')
        return -EINVAL
    print('  hardware limits: %s - %s' % (speed(int(low)), speed(int(high))))
    return 0


def info_hw_freq(node, cpu):
    value = node.read(cpu, 'cpuinfo_cur_freq', fallback=False)
    if not value:
        print('  current CPU frequency: Unable to call hardware')
        return -EINVAL
    print('  current CPU frequency: %s (asserted by call to hardware)' % speed(int(value)))
    return 0


def info_kernel_freq(node, cpu):
    value = node.read(cpu, 'scaling_cur_freq', fallback=False)
    policy = node.policy(cpu)
    if not value and policy:
        # performance runs at the top of the policy, anything else is shown at the bottom.
        value = policy[1] if policy[2] == 'performance' else policy[0]
    if not value:
        print('  current CPU frequency:  Unable to call to kernel')
        return -EINVAL
    print('  current CPU frequency: %s (asserted by call to kernel)' % speed(int(value)))
    return 0


def info_debug(node, cpu):
    """debug_output_one(): every section, errors printed but not returned."""
    info_driver(node, cpu)
    info_cpus(node, cpu, 'related_cpus', 'CPUs which run at the same hardware frequency')
    info_cpus(node, cpu, 'affected_cpus', 'CPUs which need to have their frequency coordinated by software')
    info_latency(node, cpu)
    info_limits(node, cpu)
    info_governors(node, cpu)
    info_policy(node, cpu)
    if info_hw_freq(node, cpu) < 0:
        info_kernel_freq(node, cpu)
    return 0


INFO = {
    'e': info_debug, 'p': info_policy, 'g': info_governors, 'd': info_driver, 'l': info_limits,
    'w': info_hw_freq, 'f': info_kernel_freq, 'y': info_latency,
    'a': lambda node, cpu: info_cpus(node, cpu, 'affected_cpus', 'CPUs which need to have their frequency coordinated by software'),
    'r': lambda node, cpu: info_cpus(node, cpu, 'related_cpus', 'CPUs which run at the same hardware frequency'),
}


def short_options(args, with_value):
    """getopt_long() for the few options used here: yields (letter, value), or ('?', arg)."""
    longs = dict((name, letter) for letter, name in INFO_OPTIONS.items())
    longs.update({'governor': 'g', 'min': 'd', 'max': 'u', 'freq': 'f', 'related': 'r', 'human': 'm', 'no-rounding': 'n',
                  'proc': 'o', 'stats': 's', 'boost': 'b'})
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg.startswith('--'):
            name, sep, value = arg[2:].partition('=')
            letter = longs.get(name, '?')
            if letter in with_value and not sep:
                if index >= len(args):
                    yield '?', arg
                    return
                value = args[index]
                index += 1
            yield letter, value
        elif arg.startswith('-') and len(arg) > 1:
            for pos, letter in enumerate(arg[1:], start=1):
                if letter in with_value:
                    value = arg[pos + 1:]
                    if not value:
                        if index >= len(args):
                            yield '?', arg
                            return
                        value = args[index]
                        index += 1
                    yield letter, value
                    break
                yield letter, None


def resolve(node, chosen, default):
    """The CPUs of -c: 'all' is every CPU the node has, no -c is the subcommand's default."""
    if chosen == 'all':
        return node.cpus()
    return sorted(chosen) if chosen else default


def cmd_freq_info(node, chosen, args):
    output = None
    for letter, _value in short_options(args, ()):
        if letter in ('m', 'n'):
            continue
        if letter in ('o', 's', 'b'):
            sys.stderr.write('cpupower (simulator stand-in): frequency-info -%s is not simulated\n' % letter)
            return EXIT_FAILURE
        if letter not in INFO:
            print('invalid or unknown argument')
            return -EINVAL
        if output:
            print("You can't specify more than one --cpu parameter and/or\nmore than one output-specific argument")
            return -EINVAL
        output = letter
    # The real tool shows the CPU it runs on (base_cpu); the simulated node has no such thing.
    for cpu in resolve(node, chosen, [0]):
        print('analyzing CPU %d:' % cpu)
        if not node.online(cpu):
            print(' *is offline\n')
            continue
        ret = INFO[output or 'e'](node, cpu)
        if ret:
            return ret
    return 0


def cmd_freq_set(node, chosen, args):
    governor = None
    for letter, value in short_options(args, ('g', 'd', 'u', 'f')):
        if letter == 'g':
            if governor is not None:
                print('the same parameter was passed more than once')
                return -EINVAL
            if not 3 <= len(value) <= 18:
                print('invalid or unknown argument')
                return -EINVAL
            governor = value
        elif letter in ('d', 'u', 'f', 'r'):
            sys.stderr.write('cpupower (simulator stand-in): frequency-set -%s is not simulated, only -g\n' % letter)
            return EXIT_FAILURE
        else:
            print('invalid or unknown argument')
            return -EINVAL
    if governor is None:
        print('At least one parameter out of -f/--freq, -d/--min, -u/--max, and\n-g/--governor must be passed')
        return -EINVAL
    # Default is: set all CPUs.
    for cpu in resolve(node, chosen, node.cpus()):
        if not node.online(cpu):
            continue
        print('Setting cpu: %d' % cpu)
        # lib/cpufreq.c verify_gov(): letters, '-' and '_' only.
        ret = -EINVAL if not re.match(r'^[A-Za-z_-]+$', governor) else node.set_governor(cpu, governor)
        if ret:
            sys.stdout.write(SET_ERROR)
            return ret
    return 0


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    chosen = None
    while args and args[0].startswith('-'):
        param = args.pop(0)
        if param in ('-h', '--help'):
            print_help()
            return 0
        if param in ('-v', '--version'):
            print('cpupower %s' % VERSION)
            print('Report errors and bugs to %s, please.' % BUGREPORT)
            return 0
        if param in ('-c', '--cpu'):
            if not args:
                print_help()
                return EXIT_FAILURE
            value = args.pop(0)
            chosen = 'all' if value == 'all' else parse_cpu_list(value)
            if chosen is None:
                sys.stderr.write('Error parsing cpu list\n')
                return EXIT_FAILURE
            continue
        sys.stderr.write('Unknown option: %s\n' % param)
        print_help()
        return EXIT_FAILURE
    if not args or args[0] not in COMMANDS:
        print_help()
        return EXIT_FAILURE
    if args[0] == 'help':
        print_help()
        return 0
    root = os.environ.get('GF_SIM_ROOT')
    if not root or not os.path.isdir(root):
        # The real tool would act on this machine's /sys: refuse, as it does without CPUs.
        sys.stderr.write('cpupower (simulator stand-in): GF_SIM_ROOT is not a simulated node root\n')
        sys.stderr.write('No valid cpus found.\n')
        return EXIT_FAILURE
    handlers = {'frequency-info': cmd_freq_info, 'frequency-set': cmd_freq_set}
    if args[0] not in handlers:
        sys.stderr.write('cpupower (simulator stand-in): %s is not simulated\n' % args[0])
        return EXIT_FAILURE
    return handlers[args[0]](Node(root), chosen, args[1:]) & 0xff


if __name__ == '__main__':
    sys.exit(main())
