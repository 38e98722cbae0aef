# CMake toolchain file for arm-none-eabi-gcc. The CPU flags default to the "stm32" board's (Cortex-M4F, QEMU
# netduinoplus2); for another board pass -DTINYAOT_CPU_FLAGS="..." (`tinyaot boards` and boards/*.toml list them;
# a generated CMakeLists.txt names the flags its model was verified with).
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR arm)
set(CMAKE_C_COMPILER arm-none-eabi-gcc)
# No linker script or startup code during CMake's compiler checks: test with a static library, not a program.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
set(TINYAOT_CPU_FLAGS "-mthumb -mcpu=cortex-m4 -mfpu=fpv4-sp-d16 -mfloat-abi=hard" CACHE STRING "core flags")
set(CMAKE_C_FLAGS_INIT "${TINYAOT_CPU_FLAGS} -O2 -ffunction-sections -fdata-sections")
