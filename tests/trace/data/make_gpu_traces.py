"""How eager.pt.trace.json.gz and graph.pt.trace.json.gz were made (on an H200, torch 2.11).

Ten decode-like steps of 64 small bf16 layers (mm, relu, mul, add: 256 kernels, then a
sum and its .item(), one more kernel and a device-to-host copy), each in a
record_function("decode_step"); once eager and once replaying a CUDA graph of the layers.

    OUT=/some/dir python3 tests/trace/data/make_gpu_traces.py
"""

import os

import torch
from torch.profiler import ProfilerActivity, profile, record_function

weights = [torch.randn(256, 256, device="cuda", dtype=torch.bfloat16) / 16 for _ in range(64)]
x = torch.randn(1, 256, device="cuda", dtype=torch.bfloat16)


def step():
    y = x
    for w in weights:
        y = torch.relu(y @ w) * 0.5 + y
    return y


for _ in range(3):
    step()
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        step()
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    out = step()
torch.cuda.synchronize()

for mode in ("eager", "graph"):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            with record_function("decode_step"):
                if mode == "eager":
                    result = step()
                else:
                    graph.replay()
                    result = out
                result.sum().item()
        torch.cuda.synchronize()
    prof.export_chrome_trace(os.environ["OUT"] + f"/{mode}.pt.trace.json.gz")
