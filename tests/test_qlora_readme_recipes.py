"""The README's "Switching to a real model" recipes are valid params: each yaml block of
that section, merged over the repo's params.yaml, passes codeloop's validation."""

from __future__ import annotations

import re

import yaml

from codeloop.config import parse_params
from tests._tiny_repo import merge


def _recipes(repo_root) -> list[dict]:
    text = (repo_root / "README.md").read_text()
    section = text.split("## Switching to a real model", 1)[1].split("\n## ", 1)[0]
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, re.S)]


def test_the_section_has_the_chat_base_lora_and_qlora_recipes(repo_root):
    recipes = _recipes(repo_root)
    lora = [r["train"]["lora"] for r in recipes if "lora" in r.get("train", {})]
    assert any(r.get("policy", {}).get("model", "").endswith("-Instruct") for r in recipes)
    assert any(r.get("policy", {}).get("model") == "Qwen/Qwen2.5-Coder-0.5B" for r in recipes)
    assert any(cfg.get("quantize", "none") == "none" for cfg in lora)
    assert any(cfg.get("quantize") == "4bit" for cfg in lora)


def test_every_recipe_validates_over_params_yaml(repo_root):
    base = yaml.safe_load((repo_root / "params.yaml").read_text())
    for i, recipe in enumerate(_recipes(repo_root)):
        parse_params(merge(base, recipe), source=f"README recipe {i}")  # raises if invalid
