"""One docker image per environment: the sandbox image with one env dir baked in.

``env_image(client, env_dir)`` builds ``codeloop-env:<the env's name>`` (a spec hash as is;
any other name by its sha256) with a two-line Dockerfile ``FROM`` the sandbox image
(scripts/build_sandbox_image.sh), the env dir as the build context's only content, copied
to ``/opt/codeloop-env/<name>``. The build is offline: the base is a local image (never
pulled) and nothing is installed inside; the env dir was built on the host from the wheel
cache. Only a plain dir name of regular files is built (codeloop.sandbox.env_trust). The
image is labelled with the env's name and its content digest, and an existing tag is
reused only when both labels match the dir now; otherwise it is built again, so an
image never stands for another dir, or for this dir as it was before a change. A docker
executor with workspaces gives each environment (an env dir with a spec.json under its
envs root) such an image and a pool of containers of its own the first time a command's
env paths name it: ``env_inside`` then answers the baked copy's path, the command job
carries it (``CmdJob.image_env``) and runs on that pool; a pool whose zygote reports
another python than the spec names is refused. An executor started with
``env_dir`` runs its own containers from that env's image.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from pathlib import Path

from codeloop.sandbox.base import SandboxError
from codeloop.sandbox.cmdjobs import IMAGE_ENVS as ENV_ROOT  # where an image holds its env
from codeloop.sandbox.env_trust import EnvTrustError, check_name, tree_digest

REPO = "codeloop-env"
LABEL = "codeloop.env"  # the env dir's name
DIGEST_LABEL = "codeloop.env.digest"  # its content digest when the image was built


def env_tag(env_dir: str | Path) -> str:
    """The image tag of an env dir: its whole name when that is a spec hash (64 hex
    digits), else the name's sha256 (a ``--deps`` dir): never a prefix two names share."""
    name = Path(env_dir).name
    key = name if re.fullmatch(r"[0-9a-f]{64}", name) else hashlib.sha256(name.encode()).hexdigest()
    return f"{REPO}:{key}"


def env_inside(env_dir: str | Path) -> str:
    """Where the env dir lies inside its image."""
    return f"{ENV_ROOT}/{Path(env_dir).name}"


def env_image(client, env_dir: str | Path, base: str) -> str:
    """The env dir's image tag, built FROM ``base`` unless an image of that tag holds this
    very dir (its labels name it and its content digest). SandboxError when the dir is
    missing, not a plain name, or holds a link."""
    env_dir = Path(env_dir)
    if not env_dir.is_dir():
        raise SandboxError(f"env dir {env_dir} does not exist: no image to build for it")
    try:
        check_name(env_dir.name)
        digest = tree_digest(env_dir)
    except EnvTrustError as exc:
        raise SandboxError(f"no image for env dir {env_dir}: {exc}") from None
    tag = env_tag(env_dir)
    try:
        labels = client.images.get(tag).labels or {}
        if labels.get(LABEL) == env_dir.name and labels.get(DIGEST_LABEL) == digest:
            return tag
    except Exception:  # noqa: BLE001 - not there (docker.errors.ImageNotFound): build it
        pass
    with tempfile.TemporaryDirectory(prefix="codeloop-envimg-") as ctx:
        shutil.copytree(env_dir, Path(ctx, "env"), symlinks=True)
        Path(ctx, "Dockerfile").write_text(
            f"FROM {base}\nCOPY env {env_inside(env_dir)}\n"
            f'LABEL {LABEL}="{env_dir.name}" {DIGEST_LABEL}="{digest}"\n'
        )
        try:
            client.images.build(
                path=ctx, tag=tag, rm=True, forcerm=True, pull=False, network_mode="none"
            )
        except Exception as exc:  # noqa: BLE001 - BuildError / APIError: say which env
            raise SandboxError(f"cannot build image {tag} for env {env_dir.name}: {exc}") from exc
    return tag
