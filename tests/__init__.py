"""The test suite. A package, so that ``from tests.conftest import ...`` is the conftest pytest loaded."""
