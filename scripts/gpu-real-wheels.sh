#!/usr/bin/env bash
# The wheels scripts/gpu-real-check.sh installs on the device machine (its image has python3
# 3.12 with torch, aiohttp, PyYAML, rich, regex, prometheus-client; nothing can be fetched
# there): logwatch's other dependencies, for CPython 3.12 on x86-64 Linux, into build/whl
# (ignored by git; name it in the device run's `carry`).  Run here, from the repository root.
set -eu
cd "$(dirname "$0")/.."
mkdir -p build/whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d build/whl \
    google-re2==1.1.20251105 hyperscan==0.9.1 structlog==26.1.0 watchdog==7.1.1 asyncssh==2.24.1 \
    cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 wheel
ls -la build/whl
