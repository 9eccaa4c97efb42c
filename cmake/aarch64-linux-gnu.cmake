# Cross-compiling for a Raspberry Pi (Raspberry Pi OS / Debian 12, aarch64) on a Debian x86
# machine: `make cross-check` (CMakePresets.json, preset `cross`; docs/raspberry-pi.md).
# Debian's cross compiler (g++-aarch64-linux-gnu) brings the target's C and C++ libraries in
# /usr/aarch64-linux-gnu; qemu-user runs what the build makes (gtest's test discovery, ctest,
# and the stage binaries the tests start: harness/launcher.cpp).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Libraries come from the target's tree only (an x86 libstdc++ must never be linked). Headers
# and CMake package files may also come from the host's /usr: the header-only packages the build
# uses (libcli11-dev, nlohmann-json3-dev, googletest's sources) are architecture-independent,
# and Debian's cross compiler searches /usr/include after its own tree anyway.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# -L: where qemu finds the target's dynamic loader and shared libraries.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
