"""scikit-build-core CMake projects: sgl-kernel, and the test fixture.

Everything reaches CMake as ``-C cmake.define.NAME=VALUE``: the arch list,
nvcc's thread count, the definition's fixed defines, and for each FetchContent
dependency ``FETCHCONTENT_SOURCE_DIR_<NAME>`` pointing into the source cache,
with ``FETCHCONTENT_FULLY_DISCONNECTED=ON`` so configure never reaches the
network. Ninja's parallelism comes from ``CMAKE_BUILD_PARALLEL_LEVEL``.
"""

from __future__ import annotations

import re
from pathlib import Path

from specrig.builder.backend import BuildContext
from specrig.builder.definition import BuildDefinition
from specrig.builder.sources import fetchcontent_var
from specrig.core import atomic
from specrig.core.errors import BuildError, ConfigError

__all__ = ["ScikitBuildBackend", "apply_rewrites"]


class ScikitBuildBackend:
    def check_archs(self, definition: BuildDefinition, archs: tuple[str, ...]) -> None:
        valid = definition.valid_archs
        bad = [a for a in archs if valid and a not in valid]
        if bad:
            raise ConfigError(
                f"{definition.name} is set up for archs {', '.join(valid)} only, not {', '.join(bad)}",
                hint="give --arch with one of those values",
            )

    def environment(self, ctx: BuildContext) -> dict[str, str]:
        env = dict(ctx.definition.env)
        env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(ctx.cap.jobs)
        return env

    def defines(self, ctx: BuildContext) -> dict[str, str]:
        c = ctx.definition.cmake
        d = dict(c.defines)
        d[c.arch_define] = c.arch_join.join(c.arch_format.format(arch=a) for a in ctx.archs)
        if c.threads_define:
            d[c.threads_define] = str(ctx.cap.nvcc_threads)
        if ctx.definition.dependencies:
            d["FETCHCONTENT_FULLY_DISCONNECTED"] = "ON"
            for dep in ctx.definition.dependencies:
                if not dep.fetch:
                    continue
                where = ctx.dep_dirs.get(dep.name)
                d[fetchcontent_var(dep.name)] = (
                    str(where) if where else f"<source-cache>/{dep.name}/{dep.sha256 or '<unpinned>'}"
                )
        return d

    def config_settings(self, ctx: BuildContext) -> list[str]:
        out = [f"cmake.define.{k}={v}" for k, v in self.defines(ctx).items()]
        out.append("build.verbose=true")
        return out

    def prepare_tree(self, ctx: BuildContext, tree: Path) -> list[str]:
        done = apply_rewrites(ctx.definition, tree, ctx.archs)
        if ctx.definition.cmake.version_in_pyproject:
            done.append(_stamp_version(tree / "pyproject.toml", ctx.definition.version, ctx.local_version))
        return done


def apply_rewrites(definition: BuildDefinition, tree: Path, archs: tuple[str, ...]) -> list[str]:
    """Apply the ``[[rewrite]]`` edits of a build for ``archs``; each must match exactly as often as declared."""
    done = []
    for rw in definition.rewrites_for(archs):
        f = tree / rw.file
        if not f.is_file():
            raise BuildError(
                f"rewrite target {rw.file} is missing from the source", hint=f"fix [[rewrite]] in {definition.path}"
            )
        text = f.read_text()
        new, n = re.subn(rw.pattern, rw.replacement, text, flags=re.MULTILINE)
        if (rw.count and n != rw.count) or n == 0:
            raise BuildError(
                f"rewrite of {rw.file} ({rw.why or rw.pattern!r}) matched {n} times, expected {rw.count or 'at least 1'}: "
                "the pinned source is not what the build definition was written for",
                hint=f"review [[rewrite]] in {definition.path} against the source",
            )
        atomic.write_bytes(f, new.encode(), mode=f.stat().st_mode & 0o7777)  # keeps an executable bit
        done.append(f"{rw.file}: {rw.why or rw.pattern} ({n}x)")
    return done


def _stamp_version(pyproject: Path, version: str, local: str) -> str:
    text = pyproject.read_text()
    new, n = re.subn(
        r'(?m)^(version\s*=\s*")' + re.escape(version) + r'(")', rf"\g<1>{version}+{local}\g<2>", text, count=1
    )
    if n != 1:
        raise BuildError(
            f'{pyproject} has no static `version = "{version}"` to stamp the local tag onto',
            hint="check build.version in the definition against the source's pyproject.toml",
        )
    atomic.write_bytes(pyproject, new.encode(), mode=pyproject.stat().st_mode & 0o7777)
    return f"pyproject.toml: version {version} -> {version}+{local}"
