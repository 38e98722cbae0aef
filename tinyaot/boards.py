"""Boards are data: one TOML file per board in `boards/`, read into a frozen `Board`.

Adding a board is adding a file; nothing here names a particular board. Every key is required and unknown keys are
rejected, so a typo in a board file is an error at load time rather than a silently ignored setting.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path

from tinyaot import paths
from tinyaot.core.target import OPTIMIZE, Target
from tinyaot.errors import TinyaotError

# The M-profile architectures the HAL's startup code knows how to bring up.
ARCHES = ("armv6-m", "armv7-m", "armv7e-m", "armv8-m.base", "armv8-m.main", "armv8.1-m.main")
# The ones whose cores have no unaligned word access (Cortex-M0/M0+/M1, M23): every access there is aligned anyway.
NO_UNALIGNED_ARCHES = ("armv6-m", "armv8-m.base")
# The compiler flag of an aligned-only build: GCC and Clang then leave __ARM_FEATURE_UNALIGNED undefined, so the
# kernels take their aligned-only paths (tinyaot_compiler.h: TINYAOT_ALIGNED_ONLY), and make only aligned accesses
# themselves; the verification harness runs invoke with CCR.UNALIGN_TRP set (templates/harness/verify_main.c).
ALIGNED_ONLY_FLAG = "-mno-unaligned-access"


@dataclass(frozen=True)
class Board:
    name: str
    aliases: tuple[str, ...]
    description: str
    core: str                    # e.g. "cortex-m4"
    arch: str                    # one of ARCHES
    cpu_flags: tuple[str, ...]   # passed verbatim to arm-none-eabi-gcc when compiling and linking
    has_fpu: bool
    has_dsp: bool                # ARMv7E-M style SIMD32 (SMLAD, SXTB16): arm_acle.h's __smlad and friends
    has_mve: bool                # Helium (arm_mve.h)
    qemu_machine: str            # qemu-system-arm -M value
    flash_origin: int
    flash_bytes: int
    ram_origin: int
    ram_bytes: int
    stack_bytes: int             # stack reserved by the linker script (and painted for the high-water mark)
    clock_hz: int                # the core clock of the real board, for turning instruction counts into rough times
    set_msplim: bool             # v8-M: program MSPLIM so a stack overflow faults instead of corrupting RAM
    path: Path                   # the file the board came from

    @property
    def float_abi(self) -> str:
        """"hard", "softfp" or "soft", as the cpu flags select it (gcc's default is soft)."""
        for flag in self.cpu_flags:
            if flag.startswith("-mfloat-abi="):
                return flag.split("=", 1)[1]
        return "soft"

    @property
    def unaligned_access(self) -> bool:
        """Whether the core can make unaligned word accesses at all (ARMv7-M and v8-M Mainline and later)."""
        return self.arch not in NO_UNALIGNED_ARCHES

    @property
    def aligned_only(self) -> bool:
        """Whether code built for this board makes aligned accesses only: a core without unaligned access, or
        -mno-unaligned-access in its cpu flags (aligned_only_board)."""
        return not self.unaligned_access or ALIGNED_ONLY_FLAG in self.cpu_flags

    def target(self, optimize: str = "speed") -> Target:
        """The code-generation target of this board: its core and ISA features, and what to optimize for."""
        if optimize not in OPTIMIZE:
            raise TinyaotError(f"--optimize must be one of {', '.join(OPTIMIZE)}, got {optimize!r}")
        return Target(core=self.core, has_dsp=self.has_dsp, has_mve=self.has_mve, optimize=optimize,
                      stack_bytes=self.stack_bytes)


# Keys of a board file and the Python type each must have (path is filled in by the loader).
_SCHEMA: dict[str, type] = {f.name: f.type for f in fields(Board) if f.name != "path"}
_TYPES = {"str": str, "bool": bool, "int": int, "tuple[str, ...]": list}


def _parse(path: Path) -> Board:
    try:
        with path.open("rb") as fh:
            raw = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TinyaotError(f"cannot read board file {path}: {exc}") from exc

    missing = sorted(set(_SCHEMA) - set(raw))
    unknown = sorted(set(raw) - set(_SCHEMA))
    if missing or unknown:
        raise TinyaotError(f"board file {path}: missing keys {missing}, unknown keys {unknown}")
    values: dict[str, object] = {}
    for key, type_name in _SCHEMA.items():
        want = _TYPES[type_name]
        value = raw[key]
        # bool is a subclass of int: a `flash_bytes = true` must not pass as an integer.
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise TinyaotError(f"board file {path}: '{key}' must be {want.__name__}, got {value!r}")
        if want is list:
            if not all(isinstance(item, str) for item in value):
                raise TinyaotError(f"board file {path}: '{key}' must be a list of strings")
            value = tuple(value)
        values[key] = value
    board = Board(path=path, **values)  # type: ignore[arg-type]

    problems = []
    if board.name != path.stem:
        problems.append(f"name '{board.name}' differs from the file name '{path.stem}'")
    if board.arch not in ARCHES:
        problems.append(f"arch '{board.arch}' is not one of {', '.join(ARCHES)}")
    for region in ("flash", "ram"):
        origin, size = getattr(board, f"{region}_origin"), getattr(board, f"{region}_bytes")
        if origin % 4 or size <= 0 or size % 4:
            problems.append(f"{region} origin/size must be positive multiples of 4")
    # The stack is 8-byte aligned by the AAPCS and must leave RAM for data.
    if board.stack_bytes <= 0 or board.stack_bytes % 8 or board.stack_bytes >= board.ram_bytes:
        problems.append("stack_bytes must be a positive multiple of 8 smaller than ram_bytes")
    if problems:
        raise TinyaotError(f"board file {path}: " + "; ".join(problems))
    return board


def list_boards() -> list[Board]:
    """All boards in `boards/`, sorted by name."""
    boards = [_parse(p) for p in sorted(paths.BOARDS.glob("*.toml"))]
    seen: dict[str, str] = {}
    for board in boards:
        for key in (board.name, *board.aliases):
            if key in seen and seen[key] != board.name:
                raise TinyaotError(f"board name or alias '{key}' is used by both '{seen[key]}' and '{board.name}'")
            seen[key] = board.name
    return boards


def aligned_only_board(board: Board, aligned_only: bool | None) -> Board:
    """`board` as a build with `aligned_only` (CompileOptions.aligned_only, --aligned-only) asks: True adds
    -mno-unaligned-access to its cpu flags (every build of the model, the generated Makefile and CMakeLists included,
    then compiles with it); None (automatic) does so on a core without unaligned access, where it changes no code
    but states the build as it is; False keeps the board as it is, and is refused on such a core."""
    if aligned_only is False and not board.unaligned_access:
        raise TinyaotError(f"board '{board.name}' ({board.core}) has no unaligned access: its builds are "
                           "aligned-only whatever is asked (drop --no-aligned-only)")
    if aligned_only is False or ALIGNED_ONLY_FLAG in board.cpu_flags:
        return board
    if aligned_only or not board.unaligned_access:
        return replace(board, cpu_flags=(*board.cpu_flags, ALIGNED_ONLY_FLAG))
    return board


def load_board(name_or_alias: str) -> Board:
    """The board called `name_or_alias` (a name or alias, case-insensitive), or a board file given by its path."""
    candidate = Path(name_or_alias)
    if candidate.suffix == ".toml" and candidate.is_file():
        return _parse(candidate)
    wanted = name_or_alias.strip().lower()
    boards = list_boards()
    for board in boards:
        if wanted == board.name.lower() or wanted in (a.lower() for a in board.aliases):
            return board
    known = ", ".join(b.name + (f" ({', '.join(b.aliases)})" if b.aliases else "") for b in boards)
    raise TinyaotError(f"unknown board '{name_or_alias}'; known boards: {known}")
