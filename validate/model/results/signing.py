"""The per-run key every results line is signed with (HMAC-SHA256), and where it is kept."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from validate.model.results.durable import write_durable

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["RUN_KEY_ENV", "RunKey"]

#: Environment variable through which a parent tool hands a run's key to its own runner (the docker
#: path); the store pops it at once, so no case process ever inherits it.
RUN_KEY_ENV: Final = "CUDNN_MATRIX_RUN_KEY"
_SEALED_KEY: Final = "results.key"


def _state_dir() -> Path:
    """Where unsealed run keys live: never inside a run folder a case could read from."""
    override = os.environ.get("CUDNN_MATRIX_STATE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "cudnn-matrix" / "run-keys"


def _canonical(data: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in data.items() if k != "mac"}
    return json.dumps(body, sort_keys=True, default=str, separators=(",", ":")).encode("utf-8")


_MAC_OPEN: Final = b',"mac":"'
#: `,"mac":"<64 hex digits>"}`: how a signed line ends
_MAC_TAIL: Final = len(_MAC_OPEN) + 64 + 2


@dataclass(frozen=True)
class RunKey:
    """The secret that the tool's lines in one run's results.jsonl are signed with.

    Design (issue: results integrity): an HMAC per line rather than a hash chain or file
    permissions, because case processes run as the same user as the tool. While the run is live,
    the key exists only in the tool's memory and in a 0600 file under the user's state folder
    (`$XDG_STATE_HOME/cudnn-matrix/run-keys/`, for `--resume` after a kill), keyed by the run
    folder's path; it is never in a case's environment nor in the run folder. When the run ends,
    `seal` writes it as `<run>/results.key`, so the folder is self-contained. This detects lines a
    case appends (by accident or on purpose) while it runs; it does not stop a process that goes
    looking for the state file -- the docker executor, where cases cannot see the host's files, is
    the isolation for that.
    """

    secret: bytes

    def sign(self, data: Mapping[str, Any]) -> str:
        return hmac.new(self.secret, _canonical(data), hashlib.sha256).hexdigest()

    def signed_line(self, data: Mapping[str, Any]) -> bytes:
        """`data` as one results line (no newline), its MAC appended as the last key: the bytes
        before it are the canonical form the MAC covers, so a reader checks a line without
        encoding it again (`verifies_line`), and `verifies` on the decoded line agrees."""
        body = _canonical(data)
        mac = hmac.new(self.secret, body, hashlib.sha256).hexdigest().encode("ascii")
        return body[:-1] + _MAC_OPEN + mac + b'"}'

    def verifies_line(self, raw: bytes) -> bool:
        """Whether a line as `signed_line` writes it carries a valid MAC (False for any other
        shape, e.g. lines of older versions, whose MAC sits in key order: ask `verifies`)."""
        if len(raw) <= _MAC_TAIL or raw[-_MAC_TAIL : -_MAC_TAIL + len(_MAC_OPEN)] != _MAC_OPEN:
            return False
        if not raw.endswith(b'"}'):
            return False
        body = raw[:-_MAC_TAIL] + b"}"
        mac = hmac.digest(self.secret, body, "sha256").hex().encode("ascii")
        return hmac.compare_digest(mac, raw[-_MAC_TAIL + len(_MAC_OPEN) : -2])

    def verifies(self, data: Mapping[str, Any]) -> bool:
        mac = data.get("mac")
        return isinstance(mac, str) and hmac.compare_digest(mac, self.sign(data))

    @staticmethod
    def _private_file(run_dir: Path) -> Path:
        digest = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:32]
        return _state_dir() / f"{digest}.key"

    @classmethod
    def for_run(cls, run_dir: Path, *, create: bool = False) -> RunKey:
        """The run's key: handed over by the parent tool, sealed in the folder, or kept privately
        for a live or killed run; a new one when `create` and none exists (else KeyError)."""
        handed = os.environ.pop(RUN_KEY_ENV, None)
        if handed:
            key = cls(bytes.fromhex(handed))
            key._keep(run_dir)
            return key
        for candidate in (run_dir / _SEALED_KEY, cls._private_file(run_dir)):
            try:
                return cls(bytes.fromhex(candidate.read_text(encoding="ascii").strip()))
            except (OSError, ValueError):
                continue
        if not create:
            raise KeyError(str(run_dir))
        key = cls(secrets.token_bytes(32))
        key._keep(run_dir)
        return key

    def _keep(self, run_dir: Path) -> None:
        """The private copy, durable before any line is signed with it: a result whose key was
        lost in a power cut would not verify, which is as good as lost."""
        path = self._private_file(run_dir)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_durable(path, self.secret.hex().encode("ascii"), 0o600)

    def seal(self, run_dir: Path) -> None:
        """`results.key` beside the results, durable before the private copy is dropped."""
        write_durable(run_dir / _SEALED_KEY, self.secret.hex().encode("ascii") + b"\n")
        self._private_file(run_dir).unlink(missing_ok=True)
