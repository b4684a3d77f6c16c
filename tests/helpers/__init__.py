"""Helpers of the test suite (importable as ``helpers`` from tests/, which pytest puts on ``sys.path``)."""
