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
- The broker killed or stopped and restarted: ``tests/integration/test_docker_restart.py``
  and ``tests/integration/test_lifecycle.py``.
"""
