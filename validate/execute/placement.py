"""Where a case's processes run: which GPUs they see and which CPUs they may use.

The one value the ledger (the pool's account of each GPU and of the host) hands to the launcher
(the one place that starts a case's processes). `gpus=None` leaves the inherited
``CUDA_VISIBLE_DEVICES`` alone; `cpus=None` leaves the CPU affinity alone. Docker maps the same
value to ``--gpus device=N`` and ``--cpuset-cpus``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["UNPLACED", "Placement", "cpu_list"]


@dataclass(frozen=True, kw_only=True)
class Placement:
    """The GPU indices (host numbering) and CPU ids one case runs on."""

    gpus: tuple[int, ...] | None = None
    cpus: frozenset[int] | None = None

    def env(self) -> dict[str, str]:
        """Environment entries that pin a process to its GPUs (empty: inherit). The indices are
        nvidia-smi's (NVML's), so CUDA is told to number the GPUs the same way (DOMAIN.md §12)."""
        if self.gpus is None:
            return {}
        return {
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in self.gpus),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }

    def describe(self) -> str:
        """For logs and notes: ``gpu 2, cpus 0-7`` (what is left alone is not named)."""
        parts: list[str] = []
        if self.gpus is not None:
            parts.append("gpu " + (",".join(map(str, self.gpus)) or "none"))
        if self.cpus is not None:
            parts.append(f"cpus {cpu_list(self.cpus)}")
        return ", ".join(parts) or "unplaced"


UNPLACED = Placement()


def cpu_list(ids: Iterable[int]) -> str:
    """CPU ids as the kernel's lists write them: ``0-3,8``."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
