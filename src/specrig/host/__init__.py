"""This machine, read once and handed to whoever needs it: GPUs, compute capability, driver, cores,
memory, disk (:mod:`.machine`), and the one nvcc / CUDA toolkit probe (:mod:`.toolchain`). Decides no policy."""

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ("core",)
