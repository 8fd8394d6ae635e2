#!/bin/sh
# Tests on 64-bit ARM (a Grace node: GH200, GB200) from an x86-64 Debian machine, under
# qemu-user: Debian's arm64 Python 3.11 in a sysroot, and the aarch64 wheels pip would install
# on such a node (Hyperscan's included: pyproject.toml asks for it there too).
#
#   sudo scripts/check-aarch64.sh                       # tests/test_scan.py (both literal engines)
#   sudo scripts/check-aarch64.sh tests/test_bars.py -m "not integration"
#
# Needs root (apt-get, binfmt_misc: the tests start `sys.executable`) and the Debian and PyPI
# registries. Emulated: ~15x slower than native, so timing-bound tests say nothing here.
set -eu
cd "$(dirname "$0")/.."
A64=${LOGWATCH_A64:-/tmp/logwatch-aarch64}
PY=${PYTHON:-python3}
mkdir -p "$A64/debs" "$A64/sysroot"

command -v qemu-aarch64-static >/dev/null || apt-get install -y -qq qemu-user-static
if [ ! -x "$A64/sysroot/usr/bin/python3.11" ]; then
    dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
    apt-get update -qq
    (cd "$A64/debs" && for p in libc6 libgcc-s1 libstdc++6 zlib1g libexpat1 libssl3 libffi8 \
            libbz2-1.0 liblzma5 libsqlite3-0 libuuid1 libncursesw6 libtinfo6 libreadline8 \
            libcrypt1 libnsl2 libtirpc3 libdb5.3 libgssapi-krb5-2 libkrb5-3 libk5crypto3 \
            libcom-err2 libkrb5support0 libkeyutils1 libpython3.11-minimal \
            libpython3.11-stdlib python3.11-minimal; do
        apt-get -o APT::Sandbox::User=root download "$p:arm64" >/dev/null
    done)
    for d in "$A64"/debs/*.deb; do dpkg -x "$d" "$A64/sysroot"; done
fi

if [ ! -d "$A64/site/hyperscan" ]; then
    # the project's dependencies and the tests' (markers dropped: every one is wanted here)
    deps=$("$PY" -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(" ".join(d.split(";")[0] for d in p["dependencies"] + ["pytest", "hypothesis"]))')
    plats=""
    for t in manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_26 manylinux_2_27 \
             manylinux_2_28; do plats="$plats --platform ${t}_aarch64"; done
    # shellcheck disable=SC2086
    "$PY" -m pip install -q --target "$A64/site" $plats --python-version 3.11 \
        --implementation cp --abi cp311 --only-binary :all: $deps
fi

if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    printf '%s' ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:F' \
        > /proc/sys/fs/binfmt_misc/register
fi

export QEMU_LD_PREFIX="$A64/sysroot" PYTHONPATH="$A64/site:$PWD" XDG_CACHE_HOME="$A64/cache"
"$A64/sysroot/usr/bin/python3.11" -c \
    'import platform, hyperscan; print("python", platform.python_version(), platform.machine(), "hyperscan", hyperscan.__version__)'
[ $# -gt 0 ] || set -- tests/test_scan.py
exec "$A64/sysroot/usr/bin/python3.11" -m pytest -q -p no:cacheprovider "$@"
