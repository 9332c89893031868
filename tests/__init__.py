"""The test suite: ``unit/<part>/`` per part of the package, ``cluster/`` for tests that
start real TensorFlow server processes, ``support/`` for the helpers they share.

A package (not a folder on ``sys.path``), so that test modules of the same name in two
folders do not clash and helpers import as ``tests.support.…`` from the repository root,
also in the subprocesses some tests start.
"""
