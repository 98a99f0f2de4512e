"""A real S3 API for tests: moto's server on 127.0.0.1 (a free port), one bucket made
with boto3, and a DVC remote pointed at it the way a user points one at MinIO.

Nothing is mocked: dvc-s3 talks HTTP to the server, which keeps the objects in memory
until it stops. Credentials are moto's dummies, set with ``dvc remote modify --local``
(the untracked .dvc/config.local), as docs/operations.md says to.
"""

from __future__ import annotations

import json
from pathlib import Path

from codeloop.ops.vcs import dvc

CREDENTIALS = {"access_key_id": "testing", "secret_access_key": "testing"}


class MotoS3:
    """A started moto S3 server holding one empty bucket; ``stop()`` closes its port."""

    def __init__(self, bucket: str = "codeloop"):
        self.bucket = bucket
        self._server = None

    def __enter__(self) -> MotoS3:
        import boto3
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        keys = {f"aws_{k}": v for k, v in CREDENTIALS.items()}
        self.client = boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1", **keys
        )
        self.client.create_bucket(Bucket=self.bucket)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def keys(self) -> set[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
        return {o["Key"] for page in pages for o in page.get("Contents", [])}

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()


def use_s3_remote(repo: Path, url: str, endpoint: str, name: str = "s3") -> None:
    """Make ``url`` (s3://bucket/path) the repo's default remote, served at ``endpoint``."""
    dvc(repo, "remote", "add", "-d", "-f", name, url)
    dvc(repo, "remote", "modify", name, "endpointurl", endpoint)
    set_credentials(repo, name)


def set_credentials(repo: Path, name: str = "s3") -> None:
    """The remote's keys, in the untracked .dvc/config.local (each clone sets its own)."""
    for key, value in CREDENTIALS.items():
        dvc(repo, "remote", "modify", "--local", name, key, value)


def object_key(prefix: str, md5: str) -> str:
    """Where DVC 3 stores the object of hash ``md5`` under a remote's path."""
    return f"{prefix}/files/md5/{md5[:2]}/{md5[2:]}"


def dir_entries(s3: MotoS3, prefix: str, dir_md5: str) -> list[dict]:
    """A pushed directory's manifest (its ``.dir`` object): one {md5, relpath} per file."""
    return json.loads(s3.read(object_key(prefix, dir_md5)))
