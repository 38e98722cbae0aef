"""What the code is generated for: the core's instruction-set features and what to optimize for.

Ops read a `Target` to decide which kernel variants they may offer for a layer (a DSP variant only where the
core has ARMv7E-M SIMD32, a Helium one only with MVE); `tinyaot.boards.Board.target()` builds one from a board
file. Plain data, so the ops (which import only core and ir) can see it without knowing about boards.
"""
from __future__ import annotations

from dataclasses import dataclass

OPTIMIZE = ("speed", "size")


@dataclass(frozen=True)
class Target:
    core: str = "generic"   # e.g. "cortex-m4"; "generic" when no board is known (host builds, evaluate)
    has_dsp: bool = False   # ARMv7E-M SIMD32 (SMLAD, SXTB16)
    has_mve: bool = False   # Helium (arm_mve.h)
    optimize: str = "speed"  # "speed": the cheapest variant per layer; "size": the generic kernels everywhere
    stack_bytes: int = 0     # the stack the board reserves (0: unknown); kernels that decode weights into a
    #                          stack tile (ops/decoded.py) are offered only where it holds one

    def __post_init__(self):
        if self.optimize not in OPTIMIZE:
            raise ValueError(f"optimize must be one of {', '.join(OPTIMIZE)}, got {self.optimize!r}")


# No board features: every layer keeps its generic kernel (today's generated C, byte for byte).
GENERIC = Target()
