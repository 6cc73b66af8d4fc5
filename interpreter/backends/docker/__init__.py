"""The Docker backend: every kernel in its own hardened container, ZMQ over ipc sockets.

Modules, lowest first: ``config`` (the container's configuration as a pure function of the
launch options), ``ipc`` (the socket files shared with the container), ``engine`` (the
Docker client and its errors), ``container`` (one kernel container), ``provisioner`` (the
jupyter_client provisioner), ``pool`` (warm kernels), ``backend`` (what the broker sees).
"""
