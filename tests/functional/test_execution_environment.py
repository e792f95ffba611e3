# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The execution environment as AWX / Ansible Automation Platform users build it: an
execution-environment.yml (ansible-builder's version 3 format) that installs the collection
from its built tarball, `ansible-builder create` (the build context: no container engine), then
the two steps of the context's Containerfile that find the requirements, run here as the image
build would run them: its galaxy stage (ansible-galaxy collection install -r requirements.yml
from the context) and its builder stage (the context's own scripts/introspect.py over the
installed collections, writing the pip and bindep files the final stage installs). The
requirements it resolves must be meta/ee-requirements.txt's and meta/ee-bindep.txt's, named
as this collection's.

Skipped only where ansible-builder is not installed (requirements-dev.txt has it, so
scripts/test.sh runs it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
BUILDER = shutil.which('ansible-builder', path=BIN) or shutil.which('ansible-builder')

pytestmark = pytest.mark.skipif(BUILDER is None, reason='ansible-builder is not installed (requirements-dev.txt)')


def _env(collections_path):
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0', ANSIBLE_COLLECTIONS_PATH=collections_path,
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH='false')
    for name in ('PYTHONPATH', 'ANSIBLE_CONFIG'):
        env.pop(name, None)
    return env


def _run(cmd, cwd, env):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False)


def _requirements(path):
    """The requirement lines of a pip or bindep file, comments and blank lines dropped."""
    with open(path) as handle:
        return [line.split('#', 1)[0].strip() for line in handle if line.split('#', 1)[0].strip()]


def test_meta_names_the_requirement_files():
    with open(os.path.join(REPO, 'meta', 'execution-environment.yml')) as handle:
        meta = yaml.safe_load(handle)
    assert meta['version'] == 1
    assert meta['dependencies'] == {'python': 'meta/ee-requirements.txt', 'system': 'meta/ee-bindep.txt'}
    python = _requirements(os.path.join(REPO, 'meta', 'ee-requirements.txt'))
    # What the controller imports beyond ansible-core; ansible-core itself is the base image's, never pinned here.
    assert {'jmespath', 'netaddr', 'pyyaml'} <= set(python)
    assert not [line for line in python if re.match(r'ansible([-_]core)?\b', line, re.I)]


def test_ansible_builder_create_resolves_the_collection_requirements(tmp_path):
    build, context, installed, work = (str(tmp_path / name) for name in ('build', 'context', 'installed', 'work'))
    os.mkdir(work)
    env = _env(installed)
    built = _run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'build', '--output-path', build, REPO], work, env)
    assert built.returncode == 0, built.stdout + built.stderr
    (tarball,) = os.listdir(build)

    # The smallest definition a user writes (README "Running from AWX / AAP"): the tarball copied into the
    # context, installed from there. The base image is only named: create pulls nothing.
    definition = {
        'version': 3,
        'images': {'base_image': {'name': 'quay.io/ansible/awx-ee:latest'}},
        'additional_build_files': [{'src': os.path.join(build, tarball), 'dest': 'collections'}],
        'dependencies': {'galaxy': {'collections': [{'name': 'collections/' + tarball, 'type': 'file'}]}},
    }
    with open(os.path.join(work, 'execution-environment.yml'), 'w') as handle:
        yaml.safe_dump(definition, handle)
    created = _run([BUILDER, 'create', '-f', 'execution-environment.yml', '-c', context,
                    '--output-filename', 'Containerfile'], work, env)
    assert created.returncode == 0, created.stdout + created.stderr
    stage = os.path.join(context, '_build')
    assert os.path.isfile(os.path.join(stage, 'collections', tarball))
    with open(os.path.join(stage, 'requirements.yml')) as handle:
        assert yaml.safe_load(handle)['collections'] == [{'name': 'collections/' + tarball, 'type': 'file'}]
    with open(os.path.join(context, 'Containerfile')) as handle:
        containerfile = handle.read()
    assert 'introspect.py introspect' in containerfile and 'ansible-galaxy collection install' in containerfile

    # The galaxy stage: the collection installed from the context, as the image build installs it.
    galaxy = _run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'install', '-r', 'requirements.yml', '-p', installed],
                  stage, env)
    assert galaxy.returncode == 0, galaxy.stdout + galaxy.stderr
    assert os.path.isfile(os.path.join(installed, 'ansible_collections', 'hpc', 'gpu_fabric', 'meta', 'execution-environment.yml'))

    # The builder stage: the context's introspect script resolves what the final stage installs.
    pip_out, bindep_out = str(tmp_path / 'requirements.txt'), str(tmp_path / 'bindep.txt')
    introspect = _run([sys.executable, os.path.join(stage, 'scripts', 'introspect.py'), 'introspect', installed,
                       '--write-pip', pip_out, '--write-bindep', bindep_out], work, env)
    assert introspect.returncode == 0, introspect.stdout + introspect.stderr
    with open(pip_out) as handle:
        pip_lines = [line.strip() for line in handle if line.strip()]
    with open(bindep_out) as handle:
        bindep_lines = [line.strip() for line in handle if line.strip()]
    # Each line as the image gets it, named as this collection's: exactly meta/'s lists, less PyYAML, which
    # introspect.py leaves out (its EXCLUDE_REQUIREMENTS: every image has it, ansible-core requires it).
    assert sorted(pip_lines) == sorted('%s  # from collection hpc.gpu_fabric' % line
                                       for line in _requirements(os.path.join(REPO, 'meta', 'ee-requirements.txt'))
                                       if line != 'pyyaml'), pip_lines
    assert {'jmespath  # from collection hpc.gpu_fabric', 'netaddr  # from collection hpc.gpu_fabric'} <= set(pip_lines)
    assert sorted(bindep_lines) == sorted('%s  # from collection hpc.gpu_fabric' % line
                                          for line in _requirements(os.path.join(REPO, 'meta', 'ee-bindep.txt'))), bindep_lines
    assert 'openssh-clients [platform:rpm]  # from collection hpc.gpu_fabric' in bindep_lines
