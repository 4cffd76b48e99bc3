"""flash-attn (setuptools + torch.utils.cpp_extension, built with no build isolation).

Its ``setup.py`` (v2.8.3) is driven only by environment variables, compared
literally: ``FLASH_ATTENTION_FORCE_BUILD`` must be exactly ``TRUE`` or setup.py
downloads a prebuilt wheel instead of compiling; ``FLASH_ATTN_CUDA_ARCHS``
accepts only the tokens 80, 90, 100 and 120; ``NVCC_THREADS`` becomes
``nvcc --threads``; ``MAX_JOBS`` is ninja's parallelism; and
``FLASH_ATTN_LOCAL_VERSION`` becomes the ``+local`` part of the version.
"""

from __future__ import annotations

from pathlib import Path

from specrig.builder.backend import BuildContext
from specrig.builder.definition import BuildDefinition
from specrig.core.errors import ConfigError

__all__ = ["FlashAttnBackend", "FORCE_BUILD"]

FORCE_BUILD = "TRUE"


class FlashAttnBackend:
    def check_archs(self, definition: BuildDefinition, archs: tuple[str, ...]) -> None:
        valid = definition.valid_archs
        bad = [a for a in archs if valid and a not in valid]
        if bad:
            raise ConfigError(
                f"{definition.name} {definition.version} cannot build arch {', '.join(bad)}: its setup.py knows only "
                f"{', '.join(valid)} (other tokens are silently ignored)",
                hint="give --arch with those values, e.g. --arch 120",
            )

    def environment(self, ctx: BuildContext) -> dict[str, str]:
        env = dict(ctx.definition.env)
        if env.get("FLASH_ATTENTION_FORCE_BUILD", FORCE_BUILD) != FORCE_BUILD:
            raise ConfigError(
                f"{ctx.definition.path}: FLASH_ATTENTION_FORCE_BUILD must be exactly 'TRUE' "
                "(any other value lets setup.py download a prebuilt wheel)",
                hint='set FLASH_ATTENTION_FORCE_BUILD = "TRUE" in [env]',
            )
        env.update(
            {
                "FLASH_ATTENTION_FORCE_BUILD": FORCE_BUILD,
                "FLASH_ATTN_CUDA_ARCHS": ";".join(ctx.archs),
                "NVCC_THREADS": str(ctx.cap.nvcc_threads),
                "MAX_JOBS": str(ctx.cap.jobs),
                "FLASH_ATTN_LOCAL_VERSION": ctx.local_version,
            }
        )
        return env

    def config_settings(self, ctx: BuildContext) -> list[str]:
        return []

    def prepare_tree(self, ctx: BuildContext, tree: Path) -> list[str]:
        # A .git folder would make setup.py run `git submodule update` (network); the sdist has none.
        if (tree / ".git").exists():
            raise ConfigError(
                f"{tree} is a git checkout: flash-attn's setup.py would run `git submodule update` (network)",
                hint='build from the pinned sdist (source.kind = "sdist")',
            )
        return []
