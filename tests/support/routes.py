"""Running the same call on the C route and the Triton route (the triton_route fixture
in conftest.py switches between them)."""
import torch

from support.operands import seeded


def both_routes(route, fn, inputs, seed=0):
    """[outputs..., gradients of the inputs that require grad...] of fn(*leaf copies of
    inputs) for a random upstream gradient, on the C route and on the Triton route
    (`route`, the triton_route fixture's switch): (c_results, triton_results)."""
    results = []
    for on in (False, True):
        route(on)
        leaves = [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
                  for x in inputs]
        outs = fn(*leaves)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        diff = [o for o in outs if o.requires_grad]
        wanted = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
        grads = []
        if diff and wanted:
            gen = seeded("both_routes", seed)
            ups = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype) for o in diff]
            grads = list(torch.autograd.grad(diff, wanted, ups, allow_unused=True))
        results.append([o.detach() for o in outs] + grads)
    route(False)
    return results


def layer_on_both_routes(route, make, *inputs):
    """[output, every parameter's gradient (of the output's sum of squares)] of
    make()(*inputs) on the C route and on the Triton route (`route`, as both_routes'):
    the layer made under seed 3 and called under seed 4 (its dropout's)."""
    results = []
    for on in (False, True):
        route(on)
        torch.manual_seed(3)
        layer = make()
        torch.manual_seed(4)
        out = layer(*inputs)
        out.square().sum().backward()
        results.append([out.detach()] + [p.grad for p in layer.parameters()])
    route(False)
    return results


def assert_routes_agree(results, **tol):
    """The Triton route's results close to the C route's (a pair from both_routes or
    layer_on_both_routes)."""
    c, t = results
    assert len(c) == len(t)
    for a, b in zip(c, t):
        torch.testing.assert_close(b, a, **tol)
