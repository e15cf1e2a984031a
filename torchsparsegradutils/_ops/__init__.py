"""The kernels as PyTorch custom operators (torch.library), one family a module:

    products.py  tsgu::spmm, spmm_t, sddmm          S(a) X, S(a)^T Y, U V^T at S's entries
    arg.py       tsgu::spmm_arg, spmm_t_arg, sddmm_arg, gather_arg   reduce="amax"/"amin"
    spgemm.py    tsgu::spgemm, spgemm_grad          sparse @ sparse
    trisolve.py  tsgu::trisolve                     M^{-1} B, M = S(a) triangular
    lse.py       tsgu::lse, lse_grad, lse_wsum      log-sum-exp of the stored values
    softmax.py   tsgu::softmax, softmax_grad, softmax_gsum   softmax over rows or columns
    grouped.py   tsgu::group_rows, grouped_mm, grouped_mm_tn  gather_mm, segment_mm
    gat.py       tsgu::gat, gat_grad                graph attention on a pattern
    gatv2.py     tsgu::gatv2, gatv2_grad            GATv2 attention (scores from both rows) on a pattern
    order.py     tsgu::rcm                          the reverse Cuthill-McKee ordering of a pattern
    aggr.py      tsgu::max_aggregation, _backward, _backward2  the graph layers' max (PyG's gradient)
                 tsgu::edge_structure_padded        an edge_index's adjacency (repeats counted)

S is the pattern of a sparse operand (row pointers `ptr`, columns `col`, and `rows` for
a hypersparse COO view, see _core/view.py) of shape `shape`, holding values `a` (one
entry per stored position).  Each module states its ops and their derivatives; every
op's backward is made of its family's ops (the triangular solve's of the products'
too), so a backward run with create_graph=True records a graph of the same kernels
(second derivatives never densify; spgemm and gat are differentiable once), and
torch.compile traces them as single nodes with the shapes their fake implementations
give.  The fake implementations check the pattern's arrays as the real ones do
(view_of), so that what the real op refuses never gets an output shape.  The ops take
only dense tensors: Dynamo cannot take torch sparse tensors, so a compiled program
passes the components (see SparseCSR).

Importing this package (or any family module) registers every op.  The wrappers (on a
CSRView) are re-exported here.  Each public op is one call into its family module,
run_<op>(spec, ...): the arguments checked against the op's spec (_core/validate.py),
then a SparseCSR through the ops above and a torch sparse tensor through the family's
autograd Function, run eagerly; sampled.py (sampled_addmm, on tsgu::sddmm) and solve.py
(the generic solve and least squares, on an outside solver and tsgu::sddmm) hold such
entries and Functions alone.
"""
from . import aggr
from .arg import sddmm_arg, spmm_arg, spmm_t_arg
from .gat import gat
from .gatv2 import gatv2
from .grouped import group_rows, grouped_mm, grouped_mm_tn
from .lse import lse
from .order import rcm
from .products import sddmm, spmm, spmm_t
from .softmax import softmax
from .spgemm import spgemm
from .trisolve import trisolve, trisolve_backward

__all__ = ["aggr", "gat", "gatv2", "group_rows", "grouped_mm", "grouped_mm_tn", "lse", "rcm", "sddmm", "sddmm_arg", "softmax",
           "spgemm", "spmm", "spmm_arg", "spmm_t", "spmm_t_arg", "trisolve", "trisolve_backward"]
