"""GPU script case: a cuDNN graph matmul checked against torch; passes on a working stack."""

import cudnn
import torch

handle = cudnn.create_handle()
a = torch.randn(4, 64, 128, device="cuda", dtype=torch.float16)
b = torch.randn(4, 128, 32, device="cuda", dtype=torch.float16)
graph = cudnn.pygraph(
    handle=handle,
    io_data_type=cudnn.data_type.HALF,
    intermediate_data_type=cudnn.data_type.FLOAT,
    compute_data_type=cudnn.data_type.FLOAT,
)
A, B = graph.tensor_like(a), graph.tensor_like(b)
C = graph.matmul(name="mm", A=A, B=B)
C.set_output(True)
graph.validate()
graph.build_operation_graph()
graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
graph.check_support()
graph.build_plans()
c = torch.empty(4, 64, 32, device="cuda", dtype=torch.float16)
ws = torch.empty(graph.get_workspace_size(), device="cuda", dtype=torch.uint8)
graph.execute({A: a, B: b, C: c}, ws, handle=handle)
torch.cuda.synchronize()
torch.testing.assert_close(c, torch.matmul(a, b), atol=5e-3, rtol=3e-3)
print(f"VERDICT pass: cudnn {cudnn.backend_version()} matmul matches torch")
