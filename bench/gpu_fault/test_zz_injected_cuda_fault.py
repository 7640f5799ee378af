"""A real CUDA fault for the H200 comparison with pytest-xdist (issue #27, item 8).

bench/gpu_suite.sh copies this file into the frontend checkout's test/python on the lent machine
only (FAULT=1); it is ours, not the frontend's. An out-of-bounds index on the GPU trips a
device-side assert, which poisons the CUDA context; the frontend's conftest wraps
`torch.cuda.synchronize` and turns the error into `os._exit`, so the pytest process (or xdist
worker) running it dies. The test after it in the same file must still get its own verdict.
"""

import pytest
import torch


@pytest.mark.L0
def test_device_assert_poisons_the_context() -> None:
    x = torch.zeros(4, device="cuda")
    x[torch.tensor([1 << 20], device="cuda")] = 1.0  # out of bounds: device-side assert
    torch.cuda.synchronize()


@pytest.mark.L0
def test_after_the_fault() -> None:
    y = torch.ones(1024, device="cuda") * 2
    torch.cuda.synchronize()
    assert float(y.sum()) == 2048.0
