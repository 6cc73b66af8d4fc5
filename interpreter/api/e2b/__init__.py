"""An E2B-compatible surface: the unmodified E2B Code Interpreter SDK against this broker.

The routes translate E2B's wire format (NDJSON executions, contexts, envd files and its
Connect-RPC filesystem calls, the sandbox control plane) onto the broker's sessions,
executions and workspaces; nothing here runs code by another path, and what has no
equivalent here answers 501 naming the call. See docs/design.md ("E2B-compatible
surface") for the departures.
"""
