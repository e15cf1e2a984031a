"""Write a Planetoid graph (Cora, CiteSeer, PubMed) as the .npz that the examples' --data reads.

    pip install torch-geometric                      # PyG (in the test and bench extras)
    python examples/planetoid_npz.py Cora cora.npz   # downloads the raw files once, into ./planetoid
    python examples/gcn.py --data cora.npz

The .npz holds plain NumPy arrays (no pickles):

    edge_index                      int64 (2, E): each undirected edge in both directions
    x_indptr, x_indices, x_data     the bag-of-words features as CSR (float32, unnormalised)
    x_shape                         int64 (2,): nodes, features
    y                               int64 (nodes,): the class of each node
    train_idx, val_idx, test_idx    int64: the nodes of the standard split
"""
import argparse

import numpy as np


def arrays(data) -> dict:
    """The .npz arrays of a PyG `Data` with x, edge_index, y and train/val/test masks."""
    x = data.x.float().to_sparse_csr()
    out = {
        "edge_index": data.edge_index.long().numpy(),
        "x_indptr": x.crow_indices().long().numpy(),
        "x_indices": x.col_indices().long().numpy(),
        "x_data": x.values().numpy(),
        "x_shape": np.array(x.shape, dtype=np.int64),
        "y": data.y.long().numpy(),
    }
    for split in ("train", "val", "test"):
        out[f"{split}_idx"] = data[f"{split}_mask"].nonzero().flatten().long().numpy()
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("name", help="Cora, CiteSeer or PubMed")
    p.add_argument("out", help="the .npz file to write")
    p.add_argument("--root", default="planetoid", help="where PyG keeps the downloaded raw files")
    args = p.parse_args(argv)
    from torch_geometric.datasets import Planetoid

    data = Planetoid(args.root, args.name)[0]
    np.savez(args.out, **arrays(data))
    print(f"{args.out}: {data.num_nodes} nodes, {data.edge_index.shape[1]} edges (both directions), "
          f"{data.x.shape[1]} features, {int(data.y.max()) + 1} classes")


if __name__ == "__main__":
    main()
