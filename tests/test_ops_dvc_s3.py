"""The DVC remote on a real S3 API: moto's server (tests/_s3.py), real git, real dvc, real
Prefect, the toy pipeline with its score stage (tests/_toy_pipeline.py).

One scenario, run once (module scope: each night costs several dvc calls): a night with
pull and push on promotes against the bucket; its checkpoint, trajectory archive and
stage outputs are listed in the bucket, object by object; a fresh clone of the repo
(no cache, no outputs) pulls them back byte for byte; then the server stops and the next
night must fail before any stage runs, naming the remote, promoting nothing.
"""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import pytest
import yaml

from codeloop.ops.remote import RemoteError, check_remote
from codeloop.ops.vcs import dvc
from tests._s3 import MotoS3, dir_entries, object_key, set_credentials, use_s3_remote
from tests._toy_pipeline import add_score_stage, git, make_toy_repo, stage_env

PREFIX = "dvc"
URL = f"s3://codeloop/{PREFIX}"
# Pushed directories: the promoted checkpoint, the trajectory archive, two stage outputs.
PUSHED = ("models/iter-0001", "data/archive", "data/trajectories", "models/candidate")


def _dir_md5s(repo: Path) -> dict[str, str]:
    """The .dir hash of each pushed directory, from its .dvc file or dvc.lock."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    md5s = {o["path"]: o["md5"] for stage in lock.values() for o in stage.get("outs", [])}
    for name in ("models/iter-0001.dvc", "data/archive.dvc"):
        for o in yaml.safe_load((repo / name).read_text())["outs"]:  # paths beside the file
            md5s[str(Path(name).parent / o["path"])] = o["md5"]
    return {path: md5 for path, md5 in md5s.items() if path in PUSHED}


def _content(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _state(repo: Path) -> dict:
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "tags": git(repo, "tag").split(),
        "status": git(repo, "status", "--porcelain"),
        "params": (repo / "params.yaml").read_text(),
        "models": sorted(p.name for p in (repo / "models").glob("iter-*") if p.is_dir()),
    }


def _silent_check(clone: Path) -> Exception | None:
    """check_remote against an endpoint that accepts connections and never answers."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        dvc(clone, "remote", "modify", "--local", "s3", "endpointurl", endpoint)
        return _fails(lambda: check_remote(clone, timeout_s=3))


def _fails(run) -> Exception | None:
    try:
        run()
    except Exception as exc:  # the failing night is part of the scenario
        return exc
    return None


@pytest.fixture(scope="module")
def s3_nights(tmp_path_factory, prefect_harness) -> dict:
    from flows.nightly import nightly

    root = tmp_path_factory.mktemp("s3-remote")
    repo = make_toy_repo(root)
    add_score_stage(repo)
    builds = root / "candidates.log"
    with MotoS3() as s3, stage_env(), pytest.MonkeyPatch.context() as env:
        env.setenv("TOY_CANDIDATES_LOG", str(builds))
        env.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore: a refused connection fails at once
        env.setenv("CODELOOP_DVC_RETRY_DELAY_S", "0")
        use_s3_remote(repo, URL, s3.endpoint)
        git(repo, "commit", "-qam", "dvc: S3 remote")
        out = nightly(repo=str(repo), pull=True, push=True)
        md5s = _dir_md5s(repo)
        keys = s3.keys()
        entries = {path: dir_entries(s3, PREFIX, md5) for path, md5 in md5s.items()}
        clone = root / "clone"
        git(root, "clone", "-q", str(repo), str(clone))
        set_credentials(clone)
        dvc(clone, "pull")
        dvc(clone, "remote", "modify", "--local", "s3", "url", "s3://no-such-bucket/dvc")
        no_bucket = _fails(lambda: check_remote(clone))
        silent = _silent_check(clone)
        built = builds.read_text().split()
        s3.stop()
        before = _state(repo)
        down = _fails(lambda: nightly(repo=str(repo), pull=False, push=True))
    return {
        "repo": repo,
        "clone": clone,
        "out": out,
        "md5s": md5s,
        "keys": keys,
        "entries": entries,
        "no_bucket": no_bucket,
        "silent": silent,
        "built": built,
        "built_after": builds.read_text().split(),
        "before": before,
        "after": _state(repo),
        "down": down,
        "endpoint": s3.endpoint,
    }


def test_a_night_with_pull_and_push_on_promotes_against_the_s3_remote(s3_nights):
    assert s3_nights["out"]["promoted"] and s3_nights["out"]["tag"] == "iter-0001"


@pytest.mark.parametrize("path", PUSHED)
def test_every_file_of_the_promoted_night_landed_in_the_bucket(s3_nights, path):
    files = [object_key(PREFIX, e["md5"]) for e in s3_nights["entries"][path]]
    assert files and set(files) <= s3_nights["keys"]


@pytest.mark.parametrize("path", PUSHED)
def test_the_bucket_holds_each_pushed_directory_manifest(s3_nights, path):
    assert object_key(PREFIX, s3_nights["md5s"][path]) in s3_nights["keys"]


def test_nothing_was_pushed_to_the_toy_repos_old_local_remote(s3_nights):
    assert not (s3_nights["repo"].parent / "remote").exists()


@pytest.mark.parametrize("path", PUSHED)
def test_a_fresh_clone_pulls_the_night_back_byte_for_byte(s3_nights, path):
    pulled = _content(s3_nights["clone"] / path)
    assert pulled and pulled == _content(s3_nights["repo"] / path)


def test_a_bucket_that_does_not_exist_is_a_configuration_error_not_retried(s3_nights):
    err = s3_nights["no_bucket"]
    assert isinstance(err, RemoteError) and not err.transient
    assert "s3://no-such-bucket/dvc" in str(err) and "misconfigured" in str(err)


def test_a_remote_that_never_answers_is_cut_off_by_the_timeout_and_retried(s3_nights):
    err = s3_nights["silent"]
    assert isinstance(err, RemoteError) and err.transient
    assert "DVC remote 's3'" in str(err) and "did not answer within 3 s" in str(err)


def test_a_night_whose_remote_is_down_fails_naming_the_remote_and_its_url(s3_nights):
    err = str(s3_nights["down"])
    assert "DVC remote 's3'" in err and URL in err and s3_nights["endpoint"] in err
    assert "unreachable" in err


def test_a_night_whose_remote_is_down_runs_no_stage(s3_nights):
    assert s3_nights["built_after"] == s3_nights["built"] == ["50@1"]


def test_a_night_whose_remote_is_down_promotes_nothing(s3_nights):
    after = s3_nights["after"]
    assert after == s3_nights["before"]
    assert after["tags"] == ["iter-0001"] and after["models"] == ["iter-0001"]
    assert after["status"] == ""


def test_a_directory_that_is_no_dvc_repo_has_no_usable_remote(tmp_path):
    with pytest.raises(RemoteError, match="no usable default DVC remote") as err:
        check_remote(tmp_path)
    assert not err.value.transient
