"""What every op shares, below the backends: the C extension as configured (native),
the CSR view of a sparse operand and the tensors built on its pattern (view), the
intake of torch sparse tensors into views (intake), the checked structures and their
caches (structures), the compile-friendly operand (sparse_csr), the argument contracts (validate), and the
saving of operands for backward (saved).  Nothing here chooses a backend."""
