"""Shared assertions (a layer against a reference layer, torch.compile against eager) and
the thread-count switch."""
import contextlib

import torch


def assert_layer_matches(ours, theirs, x, adjacency):
    """ours(x, adjacency) equals theirs (a reference layer with the same weights) in its
    output and its gradients w.r.t. x and every parameter, and ours on x made sparse
    (the same numbers) gives the same output.  Returns theirs' output."""
    a, b = theirs(x, adjacency), ours(x, adjacency)
    torch.testing.assert_close(b, a)
    G = torch.randn_like(a)
    for g, r in zip(torch.autograd.grad(b, [x, *ours.parameters()], G),
                    torch.autograd.grad(a, [x, *theirs.parameters()], G)):
        torch.testing.assert_close(g, r)
    torch.testing.assert_close(ours(x.detach().to_sparse(), adjacency), a.detach())
    return a


@contextlib.contextmanager
def num_threads(t: int):
    old = torch.get_num_threads()
    torch.set_num_threads(t)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def assert_compiles_like_eager(model, *inputs):
    """model(*inputs) under torch.compile(fullgraph=True) (no graph break) gives the eager
    output and parameter gradients (of the output's sum of squares)."""
    torch._dynamo.reset()
    try:
        out_c = torch.compile(model, fullgraph=True, backend="aot_eager")(*inputs)
        grads_c = torch.autograd.grad(out_c.square().sum(), list(model.parameters()))
    finally:
        torch._dynamo.reset()
    out_e = model(*inputs)
    grads_e = torch.autograd.grad(out_e.square().sum(), list(model.parameters()))
    torch.testing.assert_close(out_c, out_e, rtol=1e-5, atol=1e-5)
    for gc, ge in zip(grads_c, grads_e):
        torch.testing.assert_close(gc, ge, rtol=1e-5, atol=1e-5)
