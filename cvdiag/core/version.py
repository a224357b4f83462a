"""The package's version: one place, read by the command's ``--version`` and the OpenTelemetry
bridge's instrumentation scope (pyproject.toml says the same; tests/project/test_packaging.py
holds them equal)."""

__version__ = "0.1.0"
