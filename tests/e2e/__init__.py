"""End-to-end tests: fastaiagent chains, agents and swarms, one process per phase."""
