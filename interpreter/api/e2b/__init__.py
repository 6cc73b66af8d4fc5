"""An E2B-compatible surface: the unmodified E2B Code Interpreter SDK against this broker.

The routes translate E2B's wire format (NDJSON executions, contexts, envd files, the
sandbox control plane) onto the broker's sessions and executions; nothing here runs code
by another path. See docs/design.md ("E2B-compatible surface") for the departures.
"""
