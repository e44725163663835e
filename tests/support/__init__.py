"""What the tests share besides fixtures: plain helpers, imported from here (``from
tests.support.configs import write_config``). The fixtures are in tests/conftest.py, which
pytest hands to every test; nothing imports from it, nor from a test module."""
