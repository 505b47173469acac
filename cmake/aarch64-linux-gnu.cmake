# Cross-compiling attnserve for arm64 (aarch64) on a Debian x86-64 host
# (scripts/arm64.sh sets it all up): Debian's cross compiler, the arm64
# libraries of Debian's multiarch (/usr/lib/aarch64-linux-gnu, headers shared
# in /usr/include), and the -dev packages that cannot be installed beside
# their amd64 twins (oneDNN's, prometheus-cpp's) unpacked under
# .deps/arm64/usr of this checkout. Programs built for the host (protoc, the
# gRPC plugin) are the host's; tests run under qemu-aarch64.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
list(PREPEND CMAKE_PREFIX_PATH "${CMAKE_CURRENT_LIST_DIR}/../.deps/arm64/usr")
# Nothing of the host's own architecture: a missing arm64 package fails the
# configure instead of linking an x86-64 library.
set(CMAKE_IGNORE_PATH /usr/lib/x86_64-linux-gnu /usr/include/x86_64-linux-gnu
                      /lib/x86_64-linux-gnu)
set(PKG_CONFIG_EXECUTABLE aarch64-linux-gnu-pkg-config)
