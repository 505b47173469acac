#!/usr/bin/env bash
# Installs the Python client as README.md says, into a venv of the build tree:
#   install_client.sh PYTHON SOURCE_DIR WORK_DIR
# PYTHON is Debian's /usr/bin/python3 (the only interpreter that sees Debian's
# python3-grpcio, -numpy, -torch, ...). pip builds in the tree it is given, so it
# gets a copy of python/ and proto/: the source tree stays clean and two build
# trees never build in the same directory.
set -euo pipefail
python="$1" src="$2" work="$3"
rm -rf "$work/venv" "$work/src"
mkdir -p "$work/src"
cp -r "$src/python" "$src/proto" "$work/src/"
rm -rf "$work/src/python/build" "$work/src/python/"*.egg-info
"$python" -m venv --system-site-packages "$work/venv"
PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$work/venv/bin/pip" install --no-index --no-build-isolation "$work/src/python"
"$work/venv/bin/python" -c "import attnserve.v1.sessions_pb2_grpc, attnserve; print('installed', attnserve.__file__)"
