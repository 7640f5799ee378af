#!/usr/bin/env bash
# On the lent H200, after the kit's pieces were carried to PIECES_DIR (one per device call):
#
#   bench/gpu_pool_prepare.sh PIECES_DIR SHA256 ZSTANDARD_WHEEL KIT_DIR
#
# 1. joins and unpacks the kit (bench/gpu_kit_unpack.py checks the sha256) into KIT_DIR:
#    store/<backend>/{lib,include}, wh/ (cp312 wheels), samples/ (cudnn-frontend samples + COMMIT);
# 2. adds the machine's own backend tree (nvidia-cudnn-cu13 9.19.0.56 beside torch) to the store;
# 3. installs frontend 1.27.0 + nbclient/ipykernel into /tmp/site for the sequential loop
#    (the machine's torch, cuda-bindings and packaging stay; the tool itself needs only those).
set -euo pipefail
PIECES=$1; SHA=$2; ZS=$3; KIT=$4
python3 -m pip install -q --no-index --no-deps --target /tmp/zs "$ZS"
PYTHONPATH=/tmp/zs python3 "$(dirname "$0")/gpu_kit_unpack.py" "$PIECES" "$SHA" "$KIT"
OWN=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])")
VER=$(python3 -c "from importlib.metadata import version; print(version('nvidia-cudnn-cu13'))")
cp -a "$OWN" "$KIT/store/$VER"
ls "$KIT"/wh/*.whl | grep -v -e frontend-1.26 -e frontend-1.32 -e cutlass -e tvm_ffi -e cuda_bindings \
  -e cuda_pathfinder -e /protobuf- -e /packaging- -e /psutil- -e /typing_extensions- -e /attrs- \
  -e /pygments- -e /python_dateutil- -e /tzdata- -e /six- -e /nvidia_ml_py- >/tmp/site.txt
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $(cat /tmp/site.txt)
echo "store: $(ls "$KIT/store" | tr '\n' ' '); /tmp/site: $(wc -l </tmp/site.txt) wheels"
