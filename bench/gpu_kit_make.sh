#!/usr/bin/env bash
# Build the kit that bench/gpu_pool.sh needs on the lent H200 (which has no network), here, on a
# host that reaches PyPI:
#
#   bench/gpu_kit_make.sh KIT_DIR FRONTEND_GIT_DIR BACKEND [BACKEND...]
#
# e.g. bench/gpu_kit_make.sh .carry /work/.mirror/NVIDIA+cudnn-frontend/repo 9.24.0.43 9.25.1.1
# (the two cells of the affected/fixed issue: 15 pieces, about a minute here). gpu_pool.sh's part
# c needs every backend of its matrix and FRONTENDS=1.26.0,1.27.0,1.32.0; a cell whose backend or
# frontend wheel the kit lacks comes out as `error` (environment build failed), never as a pass.
#
# KIT_DIR/tree, what gpu_kit_unpack.py unpacks:
#   store/<backend>/{lib,include}  each backend wheel's nvidia/cudnn tree, every sub-library;
#   wh/      cp312 manylinux x86_64 wheels: the frontends (FRONTENDS, default 1.27.0) and what a
#            cell environment and the `jupyter execute` loop install (nbclient, nbformat,
#            ipykernel, nvidia-ml-py and their dependencies); torch and CUDA are the machine's;
#   cut/     empty (gpu_kit_unpack.py zips unzipped cutlass wheels from here; none are needed);
#   samples/ samples/python of the frontend checkout at FRONTEND_REF (default HEAD), and COMMIT;
#   frontend/test/python  the same commit's pytest suite (bench/gpu_suite.sh's KIT/frontend/test/python),
#            and frontend/COMMIT.
# EXTRA_WHEELS (default looseversion==1.3.0: the suite's conftest imports it, the frontend wheel
# does not require it; `validate --tests ... --with looseversion==1.3.0` installs it from wh/).
# STORE_FROM=DIR: a backend already unpacked in DIR/<backend> (an earlier kit's tree/store) is
# hard-linked from there instead of downloaded again.
# The tar is made with --sort=name, so the backends lie in version order: zstd's 2 GiB window
# (--long=31) then spans neighbouring releases, which share most of their bytes.
# KIT_DIR/carry/pNN/piece.NN: the tree as one tar, `zstd -6 --long=31`, split into PIECE_MIB
# (default 56) MiB pieces,
# one folder each (a device call carries one folder, so KIT_DIR is an ignored folder of the
# checkout, e.g. .carry listed in .git/info/exclude); KIT_DIR/SHA256 is the joined stream's.
# Each device call then carries one folder and copies its piece out
# (`mkdir -p /tmp/pieces && cp .carry/carry/pNN/piece.NN /tmp/pieces/`); the last
# runs bench/gpu_pool_prepare.sh /tmp/pieces "$(cat SHA256)" /tmp/zs/zstandard-*.whl /tmp/kit
# (KIT_DIR/carry/zs holds that wheel, 5 MB: carry it with the last piece, the short one).
# A call's 64 MiB also counts the checkout's tracked files: 38 MiB with reports/, 1.4 MiB without.
# For the piece calls hide reports/ (`git sparse-checkout set --no-cone '/*' '!/reports/'`; its
# files stay tracked and unchanged) and bring it back before committing (`git sparse-checkout
# disable`). Run gpu_pool.sh from the carried checkout itself, or from a copy of the whole of it
# (its embedded matrix is matrix/ beside validate/): a copy of validate/ and bench/ alone exits 2 at
# the matrix file.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 KIT_DIR FRONTEND_GIT_DIR BACKEND [BACKEND...]" >&2; exit 2; }
KIT=$(realpath -m "$1"); GIT=$2; shift 2
FRONTENDS=${FRONTENDS:-1.27.0}; PIECE_MIB=${PIECE_MIB:-56}
TREE="$KIT/tree"; DL="$KIT/download"
mkdir -p "$TREE/store" "$TREE/wh" "$TREE/cut" "$DL"
PLATFORM=(--only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64
  --platform manylinux_2_17_x86_64)

for backend in "$@"; do
  if [ -f "$TREE/store/$backend/lib/libcudnn.so.9" ]; then continue; fi
  if [ -n "${STORE_FROM:-}" ] && [ -f "$STORE_FROM/$backend/lib/libcudnn.so.9" ]; then
    cp -al "$STORE_FROM/$backend" "$TREE/store/$backend"; continue
  fi
  python3 -m pip download -q --no-deps "${PLATFORM[@]}" -d "$DL" "nvidia-cudnn-cu13==$backend"
  wheel=$(ls "$DL"/nvidia_cudnn_cu13-"$backend"-*.whl)
  rm -rf "$DL/unzip" && mkdir -p "$DL/unzip"
  python3 -m zipfile -e "$wheel" "$DL/unzip"
  mv "$DL/unzip/nvidia/cudnn" "$TREE/store/$backend"
  rm -rf "$DL/unzip" "$wheel"
  ls "$TREE/store/$backend/lib" | grep -q libcudnn_ops || { echo "$backend: no libcudnn_ops" >&2; exit 1; }
done

python3 -m pip download -q "${PLATFORM[@]}" -d "$TREE/wh" nbclient nbformat ipykernel nvidia-ml-py
for extra in ${EXTRA_WHEELS-looseversion==1.3.0}; do
  python3 -m pip download -q --no-deps "${PLATFORM[@]}" -d "$TREE/wh" "$extra"
done
# one resolve per frontend: two pins of one package in one `pip download` cannot both hold
for fe in ${FRONTENDS//,/ }; do
  python3 -m pip download -q "${PLATFORM[@]}" -d "$TREE/wh" "nvidia-cudnn-frontend==$fe"
done

REF=${FRONTEND_REF:-HEAD}
rm -rf "$TREE/samples" "$TREE/frontend" && mkdir -p "$TREE/samples" "$TREE/frontend"
git --git-dir="$GIT" archive "$REF" samples/python | tar -x -C "$TREE/samples"
git --git-dir="$GIT" rev-parse --short "$REF" >"$TREE/samples/COMMIT"
git --git-dir="$GIT" archive "$REF" test/python | tar -x -C "$TREE/frontend"
cp "$TREE/samples/COMMIT" "$TREE/frontend/COMMIT"

rm -rf "$KIT/carry" && mkdir -p "$KIT/carry/zs"
# the unpacker's zstandard module, for the machine's Python 3.12
python3 -m pip download -q --no-deps "${PLATFORM[@]}" -d "$KIT/carry/zs" zstandard
tar --sort=name -C "$TREE" -cf - . | zstd -q -6 -T2 --long=31 | split -b "${PIECE_MIB}M" -d -a 2 - "$KIT/carry/piece."
cat "$KIT"/carry/piece.* | sha256sum | cut -d' ' -f1 >"$KIT/SHA256"
for piece in "$KIT"/carry/piece.*; do  # p00, p01, ...
  folder="$KIT/carry/p${piece##*.}"; mkdir -p "$folder"; mv "$piece" "$folder/"
done
echo "kit: $(du -sh "$TREE" | cut -f1) unpacked, $(ls -d "$KIT"/carry/p* | wc -l) pieces of $PIECE_MIB MiB," \
  "sha256 $(cat "$KIT/SHA256"); store: $(ls "$TREE/store" | tr '\n' ' '); wheels: $(ls "$TREE/wh" | wc -l);" \
  "frontend suite: $(find "$TREE/frontend/test/python" -name 'test_*.py' | wc -l) test files at $(cat "$TREE/frontend/COMMIT")"
