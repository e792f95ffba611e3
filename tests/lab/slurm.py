# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A real Slurm cluster on this one machine: munged, slurmctld and one slurmd per node name (n1..nN), each on its
own port, every file in a temporary directory; for the tests of role fabric_quarantine.

Debian's packages (slurmctld, slurmd, munge, slurm-client; scripts/test.sh installs them when root) run several
slurmd on one host: NodeHostname=localhost and a Port per node, ``slurmd -N <name>``. No cgroups (ProctrackType
proctrack/linuxproc, TaskPlugin task/none): the tests run in containers without a delegated cgroup tree.

    with SlurmLab(4) as lab:          # or lab = SlurmLab(4); lab.start(); ...; lab.stop()
        lab.scontrol('show', 'node', '-o')

Every daemon started is stopped by its own pid (and the job steps of the lab's jobs, found by their working
directory below the lab's), whatever happened.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

BINARIES = ('munged', 'slurmctld', 'slurmd', 'scontrol', 'sinfo', 'sbatch', 'squeue', 'scancel')
SBIN = ('/usr/sbin', '/usr/bin', '/sbin', '/bin')


def missing():
    """Why a lab cannot start here ('' when it can)."""
    if os.geteuid() != 0:
        return 'the Slurm lab runs munged, slurmctld and slurmd as root; not root'
    path = os.environ.get('PATH', '') + ':' + ':'.join(SBIN)
    absent = [name for name in BINARIES if not shutil.which(name, path=path)]
    if absent:
        return 'Slurm is not installed (%s missing; apt-get install slurmctld slurmd munge slurm-client)' % ', '.join(absent)
    return ''


def _free_ports(count):
    sockets = []
    try:
        for _index in range(count):
            sock = socket.socket()
            sock.bind(('127.0.0.1', 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


CONF = '''ClusterName=gflab
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={dir}/munge/munge.sock
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmdTimeout=300
{nodes}
PartitionName=lab Nodes={names} Default=YES MaxTime=INFINITE State=UP
'''


class SlurmLab:
    """A Slurm cluster of ``count`` nodes n1..n<count> on this machine."""

    def __init__(self, count=4):
        self.names = ['n%d' % (index + 1) for index in range(count)]
        self.dir = None
        self.env = None

    # --- life cycle
    def start(self, timeout=30):
        self.dir = tempfile.mkdtemp(prefix='gf-slurm-')
        for sub in ('munge', 'state', 'log', 'jobs') + tuple('spool/%s' % name for name in self.names):
            os.makedirs(os.path.join(self.dir, sub))
        os.chmod(os.path.join(self.dir, 'munge'), 0o700)
        with open(os.path.join(self.dir, 'munge', 'munge.key'), 'wb') as key:
            key.write(os.urandom(1024))
        os.chmod(os.path.join(self.dir, 'munge', 'munge.key'), 0o600)
        ports = _free_ports(len(self.names) + 1)
        nodes = '\n'.join('NodeName=%s NodeHostname=localhost Port=%d CPUs=2 RealMemory=500 State=UNKNOWN' % (name, port)
                          for name, port in zip(self.names, ports[1:]))
        conf = os.path.join(self.dir, 'slurm.conf')
        with open(conf, 'w') as handle:
            handle.write(CONF.format(dir=self.dir, ctld_port=ports[0], nodes=nodes, names=','.join(self.names)))
        self.env = dict(os.environ, SLURM_CONF=conf, SLURM_TIME_FORMAT='standard',
                        PATH=os.environ.get('PATH', '') + ':' + ':'.join(SBIN))
        try:
            munge = os.path.join(self.dir, 'munge')
            self._run(['munged', '--force', '--socket=%s/munge.sock' % munge, '--key-file=%s/munge.key' % munge,
                       '--pid-file=%s/munged.pid' % munge, '--log-file=%s/munged.log' % munge, '--seed-file=%s/munged.seed' % munge])
            self._run(['slurmctld', '-i', '-f', conf])
            for name in self.names:
                self._run(['slurmd', '-N', name, '-f', conf])
            self.wait(lambda: all(state == 'idle' for state in self.states().values()) and len(self.states()) == len(self.names),
                      timeout, 'the lab\'s nodes to be idle')
        except BaseException:
            self.stop()
            raise
        return self

    def _run(self, argv):
        subprocess.run(argv, env=self.env, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)

    def _pids(self):
        pids = []
        files = [os.path.join(self.dir, 'slurmd-%s.pid' % name) for name in self.names]
        files += [os.path.join(self.dir, 'slurmctld.pid'), os.path.join(self.dir, 'munge', 'munged.pid')]
        for path in files:
            try:
                with open(path) as handle:
                    pids.append(int(handle.read().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
        return pids

    def _steps(self):
        """The slurmstepd processes of this lab's jobs: every job runs in the lab's jobs/ directory."""
        found = []
        for entry in os.listdir('/proc'):
            if not entry.isdigit():
                continue
            try:
                with open('/proc/%s/cmdline' % entry, 'rb') as handle:
                    if not handle.read().startswith(b'slurmstepd'):
                        continue
                if os.readlink('/proc/%s/cwd' % entry).startswith(self.dir):
                    found.append(int(entry))
            except OSError:
                continue
        return found

    def stop(self):
        """Stop every daemon and job step of the lab, by pid; remove its directory."""
        if not self.dir:
            return
        try:
            if self.env:
                subprocess.run(['scancel', '--full', '-u', 'root'], env=self.env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            pass
        for group in (self._steps(), self._pids()):
            for pid in group:
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass
            deadline = time.time() + 10
            while time.time() < deadline and any(os.path.exists('/proc/%d' % pid) for pid in group):
                time.sleep(0.1)
            for pid in group:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- tools
    def run(self, *argv):
        """stdout of a Slurm command (argv), failing on a non-zero exit."""
        done = subprocess.run(list(argv), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=30, check=False)
        if done.returncode != 0:
            raise RuntimeError('%s failed (%d): %s' % (' '.join(argv), done.returncode, done.stderr.strip()))
        return done.stdout

    def scontrol(self, *args):
        return self.run('scontrol', *args)

    def states(self):
        """{node: sinfo's long state ('idle', 'drained', 'draining', 'mixed')}."""
        found = {}
        for line in self.run('sinfo', '-h', '-N', '-o', '%N %T').splitlines():
            words = line.split()
            if len(words) == 2:
                found[words[0]] = words[1]
        return found

    def node(self, name):
        """scontrol show node -o's line of one node."""
        return self.scontrol('show', 'node', '-o', name).strip()

    def submit(self, node, seconds=60):
        """A batch job sleeping ``seconds`` on ``node``; its id once it runs."""
        out = self.run('sbatch', '--parsable', '-w', node, '-N', '1', '-n', '1', '-D', os.path.join(self.dir, 'jobs'),
                       '-o', '/dev/null', '--wrap', 'sleep %d' % seconds)
        job = out.strip().split(';')[0]
        self.wait(lambda: self.run('squeue', '-h', '-j', job, '-o', '%T').strip() == 'RUNNING', 20, 'job %s to run' % job)
        return job

    @staticmethod
    def wait(condition, timeout, what):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if condition():
                    return
            except RuntimeError:
                pass
            time.sleep(0.2)
        raise TimeoutError('waited %ss for %s' % (timeout, what))
