"""Kernel backends, written as jupyter_client kernel provisioners.

The kernelspec chooses the provisioner (``metadata.kernel_provisioner.provisioner_name``):
``interpreter-local`` runs the kernel as a subprocess of the broker, ``interpreter-docker``
in its own hardened container. Per-session values reach the provisioner as one
:class:`~interpreter.backends.base.LaunchOptions` passed to ``start_kernel(interp=...)``;
jupyter_client keeps it in the kernel manager's launch arguments, so restarts reuse it.
"""
