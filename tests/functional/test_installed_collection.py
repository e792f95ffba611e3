# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The collection as users get it: ansible-galaxy builds the tarball, installs it, and
hpc.gpu_fabric.validate_fabric runs from the installed copy, not from this tree.

Built from the tree this test lives in (under scripts/test.sh, the copy of the files git
knows; from a checkout, galaxy.yml's build_ignore keeps .venv, out/ and the like out). The
run is on this machine for real: without a GPU or an RDMA device it writes its report (to
./fabric-report of the directory it runs in, not inside the installed copy) and ends with exit
status 2, the report's finding being HOST_NOTHING_TO_CHECK (fail closed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def _env(collections_path):
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0', ANSIBLE_COLLECTIONS_PATH=collections_path,
               # Nothing but the installed copy: no collection from sys.path (scripts/test.sh puts the
               # tree on PYTHONPATH), no ansible.cfg of a checkout.
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH='false')
    for name in ('PYTHONPATH', 'ANSIBLE_CONFIG'):
        env.pop(name, None)
    return env


def _files(top):
    """Every path below top but Python's bytecode caches."""
    return set(os.path.relpath(os.path.join(base, name), top) for base, dirs, files in os.walk(top)
               for name in dirs + files if '__pycache__' not in os.path.join(base, name))


def run(cmd, cwd, env):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_built_tarball_installs_and_validate_fabric_runs_from_it(tmp_path):
    build, install, work = (str(tmp_path / name) for name in ('build', 'install', 'work'))
    os.mkdir(work)
    env = _env(install)

    # What a first run from the checkout leaves in it (README "First run on one real node": the default
    # gpu_fabric_output_dir ./fabric-report, capture.yml's ./fabric-snapshots): a node's report, facts and
    # snapshots, which must not ship (galaxy.yml build_ignore). Left alone where a real run left them.
    made = []
    for top, files in (('fabric-report', ('report.json', 'report.html', 'facts/gpu01.json', 'bench-records/gpu01.records.json.gz')),
                       ('fabric-snapshots', ('gpu01.tar.gz', 'capture.json'))):
        if not os.path.exists(os.path.join(REPO, top)):
            made.append(os.path.join(REPO, top))
            for name in files:
                os.makedirs(os.path.dirname(os.path.join(REPO, top, name)), exist_ok=True)
                with open(os.path.join(REPO, top, name), 'w') as handle:
                    handle.write('{}')
    try:
        built = run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'build', '--output-path', build, REPO], work, env)
    finally:
        for path in made:
            shutil.rmtree(path)
    assert built.returncode == 0, built.stdout + built.stderr
    tarballs = os.listdir(build)
    assert len(tarballs) == 1 and tarballs[0].startswith('hpc-gpu_fabric-'), tarballs
    tarball = os.path.join(build, tarballs[0])
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
    # What must ship, and what must not (galaxy.yml build_ignore).
    assert {'playbooks/validate_fabric.yml', 'plugins/filter/report_html.yml', 'changelogs/changelog.yaml',
            'tests/fixtures/real/h200-vm-snapshot/vm.tar.gz'} <= names
    assert not [n for n in names if n.split('/')[0] in ('.venv', '.collections', 'out', '.ci', 'fabric-report', 'fabric-snapshots')
                or n.endswith('.pyc')]

    installed = run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'install', '-p', install, tarball], work, env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    root = os.path.join(install, 'ansible_collections', 'hpc', 'gpu_fabric')
    listed = run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'list', 'hpc.gpu_fabric', '--format', 'json'], work, env)
    assert listed.returncode == 0, listed.stderr
    # The only hpc.gpu_fabric Ansible sees is the installed one.
    assert list(json.loads(listed.stdout)) == [os.path.dirname(os.path.dirname(root))], listed.stdout

    # Without gpu_fabric_output_dir: ./fabric-report, where the user runs - nothing inside the installed copy
    # (Python's bytecode caches aside).
    before = _files(install)
    played = run([os.path.join(BIN, 'ansible-playbook'), 'hpc.gpu_fabric.validate_fabric', '-i', 'localhost,', '-c', 'local',
                  '-e', 'ansible_python_interpreter=' + sys.executable], work, env)
    assert played.returncode == 2, played.stdout[-3000:] + played.stderr[-3000:]
    out = os.path.join(work, 'fabric-report')
    with open(os.path.join(out, 'report.json')) as handle:
        report = json.load(handle)
    assert [(f['code'], f['host']) for f in report['findings'] if f['severity'] == 'error'] == \
        [('HOST_NOTHING_TO_CHECK', 'localhost')], report['findings']
    assert {'report.html', 'report.md', 'junit.xml', 'gpu_fabric.prom'} <= set(os.listdir(out))
    # Each node's facts beside the report in the default directory too, not only with gpu_fabric_output_dir given.
    with open(os.path.join(out, 'facts', 'localhost.json')) as handle:
        assert {'ib', 'gdr'} <= set(json.load(handle))
    # The console without the checkout's ansible.cfg (ansible-core's default result format, json): the summary is
    # one console line per line, as from a checkout - not one JSON string with '\n' escapes.
    lines = played.stdout.splitlines()
    assert 'localhost: 0 RDMA device(s), 0/0 port(s) ACTIVE; 0 GPU(s); GPUDirect RDMA NOT ready' in lines, played.stdout[-3000:]
    assert not [line for line in lines if 'RDMA device(s)' in line and ('\\n' in line or '"' in line)], played.stdout[-3000:]
    assert '1 host(s): 0 ok, 1 with errors, 0 unreachable; 1 error(s), 0 warning(s), 1 root cause(s).' in lines
    # report.md links the HTML by its absolute path, in the user's directory.
    with open(os.path.join(out, 'report.md')) as handle:
        assert 'Full report: %s/report.html' % os.path.realpath(out) in handle.read()
    assert _files(install) == before, sorted(_files(install) ^ before)
    assert sorted(os.listdir(work)) == ['fabric-report']
