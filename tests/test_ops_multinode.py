"""The multi-node recipe (docs/operations.md, "One night across N machines") as written.

Every command line and params block of that section is taken from the document itself:
Ray's lines are parsed by Ray's own command line, the params blocks are validated by
codeloop's config on top of the repository's params.yaml, the torchrun line runs as two
"nodes" of one process each on this machine (HEAD = 127.0.0.1, a shared workspace, as
on a shared filesystem) and must train the single-process candidate, the accelerate
line is parsed by accelerate's launcher with the repository's config file, and the DVC
remote lines run in a temporary DVC repository.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from codeloop.config import parse_params
from codeloop.paths import Paths
from tests._train_launch import BIN, REPO, SINGLE, copy_workspace, launch, make_workspace, weights

DOC = REPO / "docs" / "operations.md"
TRAIN = {"steps": 2, "lr": 0.01, "micro_batch_size": 4, "grad_accum": 1, "seed": 4}


def _section() -> str:
    text = DOC.read_text()
    start = text.index("## One night across N machines")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _blocks(lang: str) -> list[str]:
    return [b for lg, b in re.findall(r"```(\w+)\n(.*?)```", _section(), re.S) if lg == lang]


def _lines(program: str) -> list[list[str]]:
    """Every command of the section's bash blocks that starts with program, as argv."""
    out = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            argv = shlex.split(line, comments=True)
            if argv and argv[0] == program:
                out.append(argv)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_section_gives_every_line_the_recipe_needs():
    assert len(_lines("ray")) == 2
    assert len(_lines("torchrun")) == 1
    assert len(_lines("accelerate")) == 1
    assert len(_lines("dvc")) >= 2
    assert len(_blocks("yaml")) >= 2


def test_the_ray_lines_start_a_head_and_join_workers_to_it():
    from ray.scripts.scripts import start

    head, worker = (start.make_context("start", argv[2:]).params for argv in _lines("ray"))
    assert head["head"] and not worker["head"]
    assert worker["address"] == f"HEAD:{head['port']}"


def test_the_params_blocks_are_valid_codeloop_params():
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    for block in _blocks("yaml"):
        merged = dict(base)
        for section, values in yaml.safe_load(block).items():
            merged[section] = {**base.get(section, {}), **values}
        parse_params(merged, source="docs/operations.md")
    runner = next(yaml.safe_load(b)["runner"] for b in _blocks("yaml") if "runner:" in b)
    assert runner["kind"] == "ray" and runner["address"] == "HEAD:6379"


def test_the_accelerate_line_parses_with_the_repositorys_fsdp_config():
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    (argv,) = _lines("accelerate")
    args = launch_command_parser().parse_args(argv[2:])
    assert (REPO / args.config_file).is_file()
    assert load_config_from_file(str(REPO / args.config_file)).distributed_type == "FSDP"
    assert (
        args.num_machines == 2 and args.module and args.training_script == "codeloop.stages.train"
    )


def test_the_remote_lines_configure_a_dvc_repository(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")  # the lines read them as the shell would
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([str(BIN / "dvc"), "init", "-q"], cwd=tmp_path, check=True, env=env)
    for argv in _lines("dvc"):
        cmd = [str(BIN / "dvc"), *[os.path.expandvars(a) for a in argv[1:]]]
        subprocess.run(cmd, cwd=tmp_path, check=True, env=env, capture_output=True)
    listed = subprocess.run(
        [str(BIN / "dvc"), "remote", "list"], cwd=tmp_path, env=env, capture_output=True, text=True
    ).stdout
    assert "s3://my-bucket/codeloop" in listed
    assert "secret_access_key = s" in (tmp_path / ".dvc" / "config.local").read_text()
    assert "secret_access_key" not in (tmp_path / ".dvc" / "config").read_text()


def _as_local_node(argv: list[str], port: int, root: Path) -> list[str]:
    """The documented torchrun line with HEAD = this machine, one process per node, and
    the test's workspace (which has no data/clean for preflight to check)."""
    out = [str(BIN / "torchrun"), *(a.replace("HEAD:", "127.0.0.1:") for a in argv[1:])]
    out[out.index("--nproc_per_node") + 1] = "1"
    out[out.index("--rdzv_endpoint") + 1] = f"127.0.0.1:{port}"
    out[out.index("--root") + 1] = str(root)
    return [*out, "--skip-preflight"]


@pytest.mark.slow
def test_the_torchrun_line_as_two_nodes_trains_the_single_process_candidate(tmp_path):
    (argv,) = _lines("torchrun")
    fsdp = {**TRAIN, "strategy": "fsdp"}
    nodes = make_workspace(tmp_path / "nodes", fsdp, n_layer=2)
    single = copy_workspace(nodes, tmp_path / "single", TRAIN)
    cmd = _as_local_node(argv, _free_port(), nodes)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CODELOOP_THREADS": "1", "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outs)
    launch(SINGLE, single)
    got = weights(Paths(nodes).candidate_model)
    want = weights(Paths(single).candidate_model)
    init = weights(Paths(nodes).init_model)
    assert max(float((want[k] - init[k]).abs().max()) for k in want) > 1e-3
    for k in want:
        assert torch.allclose(got[k], want[k], atol=1e-4, rtol=0), k
