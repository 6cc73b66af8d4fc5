"""The fault suite (issue 14 item 7): things broken on purpose under a running service.

Here: ``test_kernel_faults.py`` (kill -9 of the kernel, ``docker kill``, ``docker rm -f``,
mid-cell and idle), ``test_broker_faults.py`` (the broker SIGKILLed with two long cells
running, one container lost and one frozen while it was down), ``test_notebook_faults.py``
(a notebook damaged, removed or unwritable on disk, while the session runs, while the
broker is down, after the session closed).

Elsewhere, referenced rather than repeated:

- SIGSTOP of the kernel, a paused container: ``tests/integration/test_heartbeat.py``.
- Requested restarts with a queue: ``tests/integration/test_api_execution.py::
  test_a_requested_restart_ends_the_running_cell_once`` and ``::
  test_a_requested_restart_cancels_the_queue_unless_asked_to_keep_it``.
- Requested restarts of running cells past the automatic restart budget:
  ``tests/integration/test_api_execution.py::
  test_requested_restarts_of_running_cells_past_the_budget_never_close_the_session``.
- The broker killed or stopped and restarted: ``tests/integration/test_docker_restart.py``
  and ``tests/integration/test_lifecycle.py`` (a real SIGTERM during a drain: ``::
  test_a_real_sigterm_drains_with_503_and_records_what_happened``).
- The data directory full, and the disk quotas around it (loop-mounted filesystems, root
  only): ``tests/adversarial/test_disk_floor.py`` (the data disk running low: 507
  ``storage_full`` for new work, outputs that no longer fit, quotas across a broker
  restart or crash), ``tests/adversarial/test_disk.py`` (a workspace filling its quota),
  ``tests/adversarial/test_disk_unavailable.py`` (a broker that cannot make quotas),
  ``tests/unit/test_spill.py::test_a_full_disk_stops_spilling_and_keeps_what_was_written``,
  ``tests/unit/test_disk_bounds.py`` and ``tests/adversarial/test_guard.py``. They skip
  where loop mounts or root are missing; under ``INTERP_REQUIRE_DOCKER=1`` (CI) that skip is
  a failure (``tests/conftest.py``: ``require_quotas``, ``skip_or_fail``).
"""
