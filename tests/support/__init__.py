"""Shared pieces of the tests that are not fixtures: the operands, references and checks
that several test files use (conftest.py keeps the fixtures, the op registry and the
child-process runners).  Test files import from here, never from each other."""
