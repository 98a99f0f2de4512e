"""One docker image per environment: the sandbox image with one env dir baked in.

``env_image(client, env_dir)`` builds ``codeloop-env:<first 16 of the env's name>`` with a
two-line Dockerfile ``FROM`` the sandbox image (scripts/build_sandbox_image.sh), the env
dir as the build context's only content, copied to ``/opt/codeloop-env/<name>``. The
build is offline: the base is a local image (never pulled) and nothing is installed
inside; the env dir was built on the host from the wheel cache. An existing tag is reused
(an env dir's name is its content's hash, so the tag names one content). A docker
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

REPO = "codeloop-env"
LABEL = "codeloop.env"


def env_tag(env_dir: str | Path) -> str:
    """The image tag of an env dir: its name's first 16 hex digits (a spec hash), or of
    the name's sha256 for a dir named otherwise (a ``--deps`` dir)."""
    name = Path(env_dir).name
    key = (
        name if re.fullmatch(r"[0-9a-f]{16,}", name) else hashlib.sha256(name.encode()).hexdigest()
    )
    return f"{REPO}:{key[:16]}"


def env_inside(env_dir: str | Path) -> str:
    """Where the env dir lies inside its image."""
    return f"{ENV_ROOT}/{Path(env_dir).name}"


def env_image(client, env_dir: str | Path, base: str) -> str:
    """The env dir's image tag, built FROM ``base`` unless the tag exists already."""
    env_dir = Path(env_dir)
    tag = env_tag(env_dir)
    try:
        client.images.get(tag)
        return tag
    except Exception:  # noqa: BLE001 - not there (docker.errors.ImageNotFound): build it
        pass
    if not env_dir.is_dir():
        raise SandboxError(f"env dir {env_dir} does not exist: no image to build for it")
    with tempfile.TemporaryDirectory(prefix="codeloop-envimg-") as ctx:
        shutil.copytree(env_dir, Path(ctx, "env"), symlinks=True)
        Path(ctx, "Dockerfile").write_text(
            f'FROM {base}\nCOPY env {env_inside(env_dir)}\nLABEL {LABEL}="{env_dir.name}"\n'
        )
        try:
            client.images.build(
                path=ctx, tag=tag, rm=True, forcerm=True, pull=False, network_mode="none"
            )
        except Exception as exc:  # noqa: BLE001 - BuildError / APIError: say which env
            raise SandboxError(f"cannot build image {tag} for env {env_dir.name}: {exc}") from exc
    return tag
