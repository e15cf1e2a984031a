"""What the tests share that is not a fixture (conftest.py keeps pytest's hooks and the
fixtures), one module per job:

- operands: seeded generators, random_dense, to_sparse (every layout and memory
  arrangement) and to_layout, dense operands, reading a sparse tensor's entries back
- references: each op's computation in dense PyTorch
- cases, registry, malformed: the op registry (OPS, one Op per public op and surface)
  that test_hygiene.py and test_properties.py sweep; each op's case builder; the
  bad-input sources
- children: running code in a child process (run_child, child_outcomes)
- routes: one call or layer on the C route and the Triton route (both_routes,
  layer_on_both_routes)
- pyg: PyTorch Geometric's layers as the tests build them (pyg_sage_conv)
- checks: shared assertions and the thread-count switch
- mm, lse, grouped, spgemm: one op family's cases and checks, shared by its test files
- gat: the graphs of the GAT and GATv2 tests and a layer's comparison with PyG's

Test files import from here (``from support.<module> import ...``), never from each other.
"""
