"""Machine facts and verdicts: host, virtualization, GPUs through NVML, GPU pairs.

`--comm` adds measurements (torch, loaded only inside the functions that need it).
"""
