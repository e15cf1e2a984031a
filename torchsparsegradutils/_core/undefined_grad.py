"""What an autograd Function's backward does with an undefined output gradient.

A module of its own, which no backward calls into: the wrapper below sits on the call
stack above the backward it wraps, so it must not live in a module the backward enters
again (each call passes each module once)."""
import functools


def none_for_undefined(backward):
    """A Function's backward, given an undefined output gradient (None: its forward
    called ctx.set_materialize_grads(False)), returns None for every input, as
    PyTorch's own ops do, instead of zeros on A's pattern: a sparse zero that
    autograd.gradcheck's undefined-gradient check cannot compare (eq is not defined
    for sparse layouts), computed for nothing."""
    @functools.wraps(backward)
    def run(ctx, G):
        if G is None:
            return (None,) * len(ctx.needs_input_grad)
        return backward(ctx, G)
    return run
