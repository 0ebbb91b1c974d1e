#!/bin/sh
# Builds istota-init, the sandbox's pid 1, as it ships: static (it runs inside sandboxes
# that bind no loader of their own choosing, and a static start is the fastest), stripped,
# hardened, warnings as errors. The one place its compiler flags live: the Makefile,
# scripts/appstore.sh and the tests (sandboxtest) all build it through this script.
#
#   build.sh CC OUT      e.g. build.sh cc bin/istota-init, build.sh aarch64-linux-gnu-gcc …
set -eu
[ $# -eq 2 ] || { echo "usage: $0 CC OUT" >&2; exit 2; }
cc=$1 out=$2
src=$(dirname "$0")/istota-init.c
# -D_FORTIFY_SOURCE needs optimisation; -z relro/now and the stack protector work static.
# -U first: some compilers predefine another FORTIFY level.
exec "$cc" -std=gnu11 -O2 -static -s -Wall -Wextra -Werror -Wshadow -Wformat=2 \
	-fstack-protector-strong -fstack-clash-protection -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2 \
	-Wl,-z,relro,-z,now,-z,noexecstack \
	-o "$out" "$src"
