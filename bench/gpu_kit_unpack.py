"""Join the carried pieces of the GPU kit and unpack it on the lent machine.

    python bench/gpu_kit_unpack.py PIECES_DIR SHA256 DEST

PIECES_DIR holds `piece.00`, `piece.01`, ... of one zstd (`--long=31`) tar, made here by
`tar -C kit -cf - . | zstd -6 --long=31` and `split -b 29M -d -a 2`. The joined stream's sha256
must equal SHA256. The tar holds `store/<version>/{lib,include}` (backend trees), `wh/` (wheels),
`cut/<wheel name>/` (the unzipped nvidia-cutlass-dsl-libs wheels, which compress far better
unzipped: they are zipped again into `wh/` here) and `samples/`. Needs the `zstandard` module.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

import zstandard  # type: ignore[import-not-found]  # only on the GPU machine


class _Joined(io.RawIOBase):
    """The pieces read back to back, hashing as they go."""

    def __init__(self, pieces: list[Path]) -> None:
        self._pieces = iter(pieces)
        self._fh: io.BufferedReader | None = None
        self.sha = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buf: memoryview) -> int:  # type: ignore[override]
        while True:
            if self._fh is None:
                nxt = next(self._pieces, None)
                if nxt is None:
                    return 0
                self._fh = nxt.open("rb")
            n: int = self._fh.readinto(buf)
            if n:
                self.sha.update(memoryview(buf)[:n])
                return n
            self._fh.close()
            self._fh = None


def main(pieces_dir: Path, sha256: str, dest: Path) -> int:
    pieces = sorted(pieces_dir.glob("piece.*"))
    joined = _Joined(pieces)
    reader = zstandard.ZstdDecompressor(max_window_size=2**31).stream_reader(joined)
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        tar.extractall(dest, filter="tar")
    if joined.sha.hexdigest() != sha256:
        print(
            f"sha256 mismatch over {len(pieces)} pieces: {joined.sha.hexdigest()}", file=sys.stderr
        )
        return 1
    cut = dest / "cut"
    for unzipped in sorted(cut.iterdir()) if cut.is_dir() else ():
        wheel = dest / "wh" / f"{unzipped.name}.whl"
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
            for path in sorted(unzipped.rglob("*")):
                if path.is_file():
                    zf.write(path, path.relative_to(unzipped).as_posix())
        shutil.rmtree(unzipped)
    print(
        f"{len(pieces)} pieces, sha256 ok; store: {sorted(p.name for p in (dest / 'store').iterdir())}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])))
