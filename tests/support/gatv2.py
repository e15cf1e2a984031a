"""graph_attention_v2's and GATv2Conv's cases for the op registry (one Case each, see
cases.py), and GATv2Conv's dense reference."""
from dataclasses import replace

import torch

import torchsparsegradutils as tsgu

from support.cases import Case, Spec, _edge_index, _spec_dense
from support.operands import dense_operand, pattern_of, seeded, structure_of, to_sparse
from support.references import dense_graph_attention_v2


def make_graph_attention_v2(spec: Spec) -> Case:
    """graph_attention_v2 on the pattern of a sparse A in spec.layout (its values unread),
    1 + spec.variant heads of spec.p features; leaves x_src, x_dst, att, and with variant 1
    an edge_term and an edge_score per stored entry."""
    gen = seeded("graph_attention_v2", spec)
    D = _spec_dense(replace(spec, batched=False), gen)
    A = to_sparse(D, spec.layout, spec.itype, seeded("layout", spec))
    pattern, H, C = pattern_of(A), 1 + spec.variant, spec.p
    nnz = int(pattern.sum())
    leaves = {"x_src": dense_operand((spec.m, H, C), spec.dtype, gen, spec.bmode),
              "x_dst": dense_operand((spec.n, H, C), spec.dtype, gen, spec.bmode),
              "att": dense_operand((H, C), spec.dtype, gen, spec.bmode)}
    if spec.variant:
        leaves["edge_term"] = dense_operand((nnz, H, C), spec.dtype, gen, spec.bmode)
        leaves["edge_score"] = dense_operand((nnz, H), spec.dtype, gen, spec.bmode)
        return Case(leaves, structure_of(A),
                    lambda xl, xr, att, et, b: tsgu.graph_attention_v2(A, xl, xr, att, 0.2, edge_term=et,
                                                                       edge_score=b),
                    lambda xl, xr, att, et, b: dense_graph_attention_v2(pattern, xl, xr, att, 0.2, et, b)[0])
    return Case(leaves, structure_of(A), lambda xl, xr, att: tsgu.graph_attention_v2(A, xl, xr, att, 0.2),
                lambda xl, xr, att: dense_graph_attention_v2(pattern, xl, xr, att, 0.2)[0])


# (heads, concat, add_self_loops, share_weights) of the GATv2Conv variants
GATV2_VARIANTS = ((1, True, True, False), (3, True, True, False), (3, False, True, True), (2, True, False, False))


def dense_gatv2_conv(x, edge_index, Wl, bl, Wr, br, att, bias, concat, loops, slope=0.2):
    """GATv2Conv in dense PyTorch with PyG's semantics: each edge (source -> target)
    counted once per occurrence; with loops, the given self loops dropped and one per node
    added.  Per head, the softmax over each target's edges of att . LeakyReLU(x_l[j] +
    x_r[i]), as an (n, E) masked matrix; then alpha @ x_l[sources]."""
    n, (H, C) = x.shape[0], att.shape
    tgt, src = edge_index[1].long(), edge_index[0].long()
    if loops:
        keep = tgt != src
        tgt, src = torch.cat([tgt[keep], torch.arange(n)]), torch.cat([src[keep], torch.arange(n)])
    xl = (x @ Wl.t() + bl).view(n, H, C)
    xr = (x @ Wr.t() + br).view(n, H, C)
    z = (torch.nn.functional.leaky_relu(xl[src] + xr[tgt], slope) * att).sum(-1)      # (E, H)
    mask = tgt[None, :] == torch.arange(n)[:, None]                                      # (n, E)
    alpha = torch.softmax(z.t()[:, None, :].masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)   # (H, n, E)
    out = torch.einsum("hne,ehc->nhc", alpha, xl[src])
    return (out.reshape(n, H * C) if concat else out.mean(1)) + bias


def make_gatv2_conv(spec: Spec) -> Case:
    """GATv2Conv(m -> p, heads, concat, add_self_loops, share_weights by
    GATV2_VARIANTS[spec.variant]) on spec.n nodes; its weights, biases, attention vector and
    bias the test's leaves (lin_r's the same as lin_l's when shared)."""
    gen = seeded("GATv2Conv", spec)
    ei = _edge_index(spec, gen)
    heads, concat, loops, share = GATV2_VARIANTS[spec.variant]
    import torchsparsegradutils.nn as tnn
    conv = tnn.GATv2Conv(spec.m, spec.p, heads=heads, concat=concat, add_self_loops=loops,
                         share_weights=share).to(spec.dtype)
    HC = heads * spec.p
    leaves = {"x": dense_operand((spec.n, spec.m), spec.dtype, gen, spec.bmode),
              "weight_l": torch.randn(HC, spec.m, generator=gen, dtype=spec.dtype),
              "bias_l": torch.randn(HC, generator=gen, dtype=spec.dtype),
              "att": torch.randn(1, heads, spec.p, generator=gen, dtype=spec.dtype),
              "bias": torch.randn(HC if concat else spec.p, generator=gen, dtype=spec.dtype)}
    if not share:
        leaves["weight_r"] = torch.randn(HC, spec.m, generator=gen, dtype=spec.dtype)
        leaves["bias_r"] = torch.randn(HC, generator=gen, dtype=spec.dtype)

    def apply(x, Wl, bl, att, b, Wr=None, br=None):
        params = {"lin_l.weight": Wl, "lin_l.bias": bl, "att": att, "bias": b}
        if not share:
            params.update({"lin_r.weight": Wr, "lin_r.bias": br})
        return torch.func.functional_call(conv, params, (x, ei))

    def ref(x, Wl, bl, att, b, Wr=None, br=None):
        Wr, br = (Wl, bl) if share else (Wr, br)
        return dense_gatv2_conv(x, ei, Wl, bl, Wr, br, att.view(heads, spec.p), b, concat, loops)
    return Case(leaves, (ei,), apply, ref)
