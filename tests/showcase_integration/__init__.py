"""A test package laid out as a CopilotKit showcase integration (see conftest.py)."""
