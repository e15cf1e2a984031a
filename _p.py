import torch, time
from benchmarks.gat import graph, methods, step_fn
x, ei = graph("cora", True, "/work/shared/data/cora.npz")
G = torch.randn(x.shape[0], 64)
for name, (layer, xin) in methods("cora", x, 0.6).items():
    s = step_fn(layer.train(), xin, ei, G); s(); s()
    with torch.profiler.profile() as prof:
        for _ in range(10): s()
    print(name)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
