"""PyTorch Geometric's layers as the tests build them (PyG is a test extra: imported here
only when a test asks, skipped without it)."""
import pytest


def pyg_sage_conv(*args, **kwargs):
    """PyG's SAGEConv(*args, **kwargs) in float64, its class's propagate() able to fuse.

    PyG makes a layer class's propagate() from a template once a process (cached in
    sys.modules), as the class's first instance is built, with the fused path for a
    sparse adj_t only where that instance's aggregation can run fused: after a first
    SAGEConv whose aggregation cannot (a list, a module, "lstm"), one that can raises
    NotImplementedError when given a sparse adj_t.  Which test builds the first one
    depends on the order the tests run in, so a fusable one is built first here; the
    propagate() made from it takes every aggregation (the others skip the fused path)."""
    gnn = pytest.importorskip("torch_geometric.nn")
    if "_jinja_propagate" not in gnn.SAGEConv.__dict__:
        gnn.SAGEConv(1, 1, aggr="mean")
    return gnn.SAGEConv(*args, **kwargs).double()
