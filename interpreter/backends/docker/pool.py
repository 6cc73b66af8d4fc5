"""A warm pool of kernel containers, started before sessions ask for them.

A cold kernel start costs a container start plus the kernel's own imports (seconds). The
pool keeps ``size`` kernels started with the broker's default limits, each already answering
``kernel_info``. A session whose options match those defaults claims one: the pool renames
the kernel's workspace to the session's (bind mounts follow a renamed directory, so the
kernel notices nothing) and refills in the background. The kernel keeps its runtime
directory, whose random name says nothing of a slot or a session (rundirs).

Rules (docs/security.md H-26): a container is handed out once and removed when its session
ends; it is never returned to the pool. Its labels cannot change after creation, so a
pooled container keeps ``org.interp.session=pool-<slot>`` and ``org.interp.pool=<slot>``;
the session it went to is recorded in that session's provisioner info. The kernel's
``INTERP_SESSION_ID`` is likewise ``pool-<slot>``. Its name can change: a claimed
container is renamed from ``interp-pool-<slot>-<hex>`` to ``interp-<session>-<hex>`` just
after the claim, so ``docker ps`` tells a session's kernel from a warm one.

Layout: ``<root>/<slot>/ws`` (workspace), root ``<data_dir>/pool`` by default, and
``<run_root>/<random>`` (ipc directory). Claims need the session's workspace on the same
filesystem as the root (a rename); otherwise the session simply starts cold.

With a workspace disk quota (``disk_mb``, interpreter.quota) a slot's workspace is its own
loop-mounted filesystem, ``<root>/<slot>/workspace.img`` on ``<root>/<slot>/ws``; a claim
moves that mount (``mount --move``) and its image to the session instead of renaming.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import os
import re
import secrets
import stat
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import docker.errors
import zmq.asyncio
from jupyter_client.asynchronous.client import AsyncKernelClient

from interpreter import quota
from interpreter.backends.base import LaunchOptions
from interpreter.backends.docker import ipc, rundirs
from interpreter.backends.docker.config import (
    NORMAL_CPU_SHARES,
    container_name,
    kernel_command,
)
from interpreter.backends.docker.container import (
    START_TIMEOUT_S,
    KernelContainer,
    absolute_options,
    discard_container,
    exit_reason_of,
    kernel_user,
    new_key,
    start_kernel_container,
)
from interpreter.backends.docker.engine import (
    call_docker,
    inspect_state,
    list_broker_containers,
    remove_container,
    rename_container,
    set_cpu_shares,
)
from interpreter.backends.docker.provisioner import DEFAULT_ARGV
from interpreter.channels import stop_channels
from interpreter.errors import InterpreterError, KernelStartFailed
from interpreter.heartbeat import echoes, hb_url
from interpreter.readiness import wait_ready
from interpreter.zmqctx import Context

log = logging.getLogger(__name__)

#: Longest pause between attempts when starting pool kernels keeps failing.
MAX_BACKOFF_S = 60.0
#: Run once in each pool kernel before it is handed out. IPython's first cell in a kernel
#: takes several milliseconds more than later ones (measured: 10 ms against 4 for ``1+1``);
#: this pays that before a session waits for it. Not silent (a silent cell skips part of
#: that first-run path), without history and without a value, so it leaves no trace: the
#: session's first cell is still number 1 and ``_`` is untouched.
WARM_UP_CODE = "None"
#: After a claim, how long the refill waits while the pool still holds a ready kernel.
#: Starting a container takes the engine and the new kernel about half a CPU-second; on a
#: small machine that slowed the claimed session's first cells by a third (measured, issue
#: 10). A claim that empties the pool refills at once.
REFILL_PAUSE_S = 0.5
#: After a claim, how long the kernel keeps the pool's CPU weight before it gets a session's.
#: Raising it is an engine call that runs ``runc`` on the host: done at once, it took the CPU
#: from the claimed session's own start and first cell (create 3 ms and the first ``1+1``
#: 5 ms slower on 2 cores, measured, issue 10). Within this pause no refill starts either, so
#: the low weight only matters against other sessions' kernels, and only for this long.
PROMOTE_AFTER_S = 0.5
#: How long a claim waits for a pooled kernel's heartbeat echo before asking the engine.
HEARTBEAT_PROOF_S = 0.25
#: What a slot name looks like (it becomes a path component).
_SLOT = re.compile(r"[0-9a-f]{16}")


class ContainerPool:
    """Keeps ``size`` ready kernel containers for sessions with default options.

    ``await pool.start()``; the backend then hands it to provisioners in the launch options
    of each session; ``await pool.close()`` removes what was not claimed.

    Args:
        size: how many ready kernels to keep; 0 disables the pool.
        template: the broker's default launch options. Used: ``memory_mb``, ``cpus``,
            ``pids``, ``tmp_size_mb``, ``image``, ``runtime``, ``env`` and
            ``extra["broker_id"]`` (containers are labelled with it). Its session id,
            owner and paths are ignored.
        data_dir: the broker's data directory; the pool lives in ``<data_dir>/pool``.
        root: a different pool directory, e.g. on the filesystem of the workspaces.
        run_root: where the kernels' runtime directories go (the broker's directory of
            them, rundirs); ``<data_dir>/run`` by default.
        argv: the kernelspec's argv (``{connection_file}`` is substituted).
        start_timeout_s: how long one pool kernel may take to answer ``kernel_info``.
    """

    def __init__(
        self,
        size: int,
        template: LaunchOptions,
        data_dir: Path,
        *,
        root: Path | None = None,
        run_root: Path | None = None,
        argv: Sequence[str] = DEFAULT_ARGV,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        if size < 0:
            raise ValueError("size must be >= 0")
        self.size = size
        self.template = template
        self.root = (root or data_dir / "pool").absolute()
        self.run_root = (run_root or data_dir / "run").absolute()
        self.command = kernel_command(argv)
        self.start_timeout_s = start_timeout_s
        self.broker_id = str(template.extra.get("broker_id", ""))
        self._user = kernel_user()
        self._ready: collections.deque[KernelContainer] = collections.deque()
        self._wanted = asyncio.Event()
        #: Set when a claim takes the last ready kernel (the refill then waits no longer).
        self._emptied = asyncio.Event()
        #: When the last claim took a kernel (loop time); ``None`` before the first.
        self._last_claim: float | None = None
        self.refill_pause_s = REFILL_PAUSE_S
        self.promote_after_s = PROMOTE_AFTER_S
        #: Set at close: weight raises still waiting for their pause are made at once.
        self._promote_now = asyncio.Event()
        self._filler: asyncio.Task[None] | None = None
        self._closed = False
        #: Counters for metrics and tests.
        self.started = 0
        self.claimed = 0
        #: Renames and CPU-weight updates of claimed kernels still under way.
        self._promotions: set[asyncio.Task[None]] = set()
        self._ctx: zmq.asyncio.Context | None = None
        self.failures = 0

    # -- public -------------------------------------------------------------------------

    @property
    def ready_count(self) -> int:
        """Kernels ready to be claimed right now."""
        return len(self._ready)

    def matches(self, options: LaunchOptions) -> bool:
        """Whether a session with these options may get a pooled kernel."""
        t = self.template
        return (
            options.memory_mb == t.memory_mb
            and options.cpus == t.cpus
            and options.pids == t.pids
            and options.tmp_size_mb == t.tmp_size_mb
            and options.disk_mb == t.disk_mb
            and options.image == t.image
            and options.runtime == t.runtime
            and options.env == t.env
            and str(options.extra.get("broker_id", "")) == self.broker_id
        )

    async def start(self) -> None:
        """Remove what an earlier broker's pool left, then fill the pool in the background.

        Call it after the broker's startup reconciliation (which removes claimed pool
        containers whose session did not come back). Returns at once; kernels become
        claimable as they come up.

        Raises:
            KernelStartFailed: the pool directory is too deep for unix socket paths.
            BackendUnavailable: the Docker engine cannot be reached.
        """
        ipc.check_path_length(rundirs.new_kernel_dir(self.run_root))
        await asyncio.to_thread(self._remove_leftovers)
        if self.size > 0:
            self._wanted.set()
            self._filler = asyncio.create_task(self._fill(), name="docker-pool-fill")

    async def claim(
        self, options: LaunchOptions, *, command: Sequence[str] | None = None
    ) -> KernelContainer | None:
        """Hand a ready kernel to a session, or None (the caller then starts one cold).

        Called by ``DockerProvisioner.launch_kernel`` on a session's first launch. None
        when the pool is closed or empty, the options differ from the template, the
        session's workspace already holds something, or it is on another filesystem.

        Args:
            options: the session's launch options.
            command: the kernel command the caller would run; must equal the pool's.
        """
        if self._closed or not self.matches(options):
            return None
        if command is not None and list(command) != self.command:
            return None
        options = absolute_options(options)
        if not self._ready:
            return None
        # The targets' check and the first kernel's liveness check (an engine call) overlap.
        usable: asyncio.Future[bool] | None = asyncio.ensure_future(
            asyncio.to_thread(self._target_usable, options.workspace, options.disk_mb)
        )
        while self._ready:
            kernel = self._ready.popleft()
            self._last_claim = asyncio.get_running_loop().time()  # before the refill wakes
            if not self._ready:
                self._emptied.set()
            self._wanted.set()
            try:
                running = await self._still_running(kernel)
            except BaseException:  # cancelled: the kernel stays the pool's, not lost
                self._ready.appendleft(kernel)
                raise
            if usable is not None:
                check, usable = usable, None
                try:
                    ok = await check
                except BaseException:
                    self._ready.appendleft(kernel)  # the next claim checks it again
                    raise
                if not ok:
                    if running:
                        self._ready.appendleft(kernel)  # not used: still the next to hand out
                    else:
                        await self._discard(kernel)
                    return None
            if not running:
                await self._discard(kernel)
                continue
            try:
                await asyncio.to_thread(self._hand_over, kernel, options)
            except (OSError, InterpreterError):
                log.warning("could not hand pooled kernel %s over", kernel.name, exc_info=True)
                await discard_container(kernel.container_id, kernel.runtime_dir)
                await asyncio.to_thread(_remove_slot, kernel.workspace.parent)
                if options.disk_mb:  # the cold start needs the session's own quota back
                    await asyncio.to_thread(
                        quota.attach, options.session_dir, options.workspace, options.disk_mb
                    )
                return None
            self.claimed += 1
            # Named after its session, so that `docker ps` does not show a session's kernel
            # (one kept past the broker, say) as a warm container. A rename is an engine
            # call of about 13 ms, over half a claim: it runs after the claim. Then the
            # weight a session's container has, once the session's first moments are over
            # (PROMOTE_AFTER_S; the claim never waits).
            name = container_name(options.session_id, secrets.token_hex(4))
            for step in (
                self._rename(kernel.container_id, name),
                self._promote(kernel.container_id),
            ):
                task = asyncio.create_task(step)
                self._promotions.add(task)
                task.add_done_callback(self._promotions.discard)
            return dataclasses.replace(kernel, name=name, workspace=options.workspace)
        if usable is not None:
            await usable
        return None

    async def _discard(self, kernel: KernelContainer) -> None:
        """Remove a pooled kernel that died while it waited, and its slot."""
        await discard_container(kernel.container_id, kernel.runtime_dir)
        await asyncio.to_thread(_remove_slot, kernel.workspace.parent)

    async def _rename(self, container_id: str, name: str) -> None:
        try:
            await call_docker(
                "name a claimed kernel after its session", rename_container, container_id, name
            )
        except docker.errors.NotFound:
            log.debug("claimed kernel %s ended before it was renamed", container_id)
        except InterpreterError as exc:
            log.warning("claimed kernel %s keeps its pool name: %s", container_id, exc)

    async def _promote(self, container_id: str) -> None:
        if self.promote_after_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._promote_now.wait(), self.promote_after_s)
        try:
            await call_docker(
                "give a claimed kernel its CPU weight",
                set_cpu_shares,
                container_id,
                NORMAL_CPU_SHARES,
            )
        except docker.errors.NotFound:
            log.debug("claimed kernel %s ended before its CPU weight was raised", container_id)
        except InterpreterError as exc:
            log.warning("claimed kernel %s keeps its pool CPU weight: %s", container_id, exc)

    async def close(self) -> None:
        """Uninstall, stop filling and remove every unclaimed container and its directories."""
        self._closed = True
        self._promote_now.set()  # kernels kept past the broker keep a session's weight
        for task in list(self._promotions):
            with contextlib.suppress(Exception):
                await task
        if self._filler is not None:
            self._filler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._filler
            self._filler = None
        while self._ready:
            kernel = self._ready.popleft()
            await discard_container(kernel.container_id, kernel.runtime_dir)
        await asyncio.to_thread(self._remove_root)
        if self._ctx is not None:
            self._ctx.destroy(linger=0)
            self._ctx = None

    def _zmq(self) -> zmq.asyncio.Context:
        """The pool's ZMQ context: its handshakes and its claims' heartbeat pings."""
        if self._ctx is None:
            self._ctx = Context()
        return self._ctx

    # -- filling ------------------------------------------------------------------------

    async def _fill(self) -> None:
        backoff = 1.0
        while not self._closed:
            await self._wanted.wait()
            self._wanted.clear()
            while not self._closed and len(self._ready) < self.size:
                await self._pause_after_claim()
                try:
                    kernel = await self._start_one()
                except InterpreterError as exc:
                    self.failures += 1
                    log.warning(
                        "warm pool: could not start a kernel (%s); retry in %.0f s", exc, backoff
                    )
                    # A claim does not cut the pause short: a failing engine or a missing
                    # image is not fixed by demand, and cold starts still work meanwhile.
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                    continue
                backoff = 1.0
                self.started += 1
                self._ready.append(kernel)

    async def _pause_after_claim(self) -> None:
        """Leave a just-claimed kernel's first moments to its session: while a ready kernel
        is left, wait until ``refill_pause_s`` has passed since the last claim."""
        loop = asyncio.get_running_loop()
        while self._ready and not self._closed and self._last_claim is not None:
            left = self._last_claim + self.refill_pause_s - loop.time()
            if left <= 0:
                return
            self._emptied.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._emptied.wait(), left)

    async def _start_one(self) -> KernelContainer:
        slot = secrets.token_hex(8)
        slot_dir = self.root / slot
        options = dataclasses.replace(
            absolute_options(self.template),
            session_id=f"pool-{slot}",
            owner="",
            session_dir=slot_dir,
            workspace=slot_dir / "ws",
            runtime_dir=rundirs.new_kernel_dir(self.run_root),
        )
        await asyncio.to_thread(self._make_slot_dir, slot_dir)
        try:
            if options.disk_mb:
                await asyncio.to_thread(quota.attach, slot_dir, options.workspace, options.disk_mb)
            kernel = await start_kernel_container(
                options,
                command=self.command,
                user=self._user,
                key=new_key(),
                pool_slot=slot,
                start_timeout_s=self.start_timeout_s,
            )
        except BaseException:
            await asyncio.to_thread(_remove_slot, slot_dir)
            raise
        try:
            await self._wait_kernel_info(kernel)
        except BaseException:
            await asyncio.shield(discard_container(kernel.container_id, kernel.runtime_dir))
            await asyncio.to_thread(_remove_slot, slot_dir)
            raise
        return kernel

    async def _wait_kernel_info(self, kernel: KernelContainer) -> None:
        """Wait until the kernel answers ``kernel_info``, then run :data:`WARM_UP_CODE`, so
        a claim gets a ready kernel whose first cell costs what later ones do."""
        client = AsyncKernelClient(context=self._zmq())
        client.load_connection_info(
            ipc.connection_info(ipc.host_prefix(kernel.runtime_dir), kernel.key)
        )
        # Shell and IOPub only. jupyter_client's own handshake needs a heartbeat channel,
        # a thread per kernel that polled it in 0.2 s steps before the first kernel_info;
        # whether the kernel still runs is asked of the pool's own check instead.
        client.start_channels(hb=False, stdin=False, control=False)
        try:
            kernel.ready_reply = await wait_ready(
                client, self.start_timeout_s, alive=partial(self._still_running, kernel)
            )
            await _warm_up(client, self.start_timeout_s)
        except (RuntimeError, TimeoutError) as exc:
            raise KernelStartFailed(f"pool kernel did not answer: {exc!r}") from exc
        finally:
            stop_channels(client)

    async def _still_running(self, kernel: KernelContainer) -> bool:
        """Whether a pooled kernel can take a session now: its process runs (when the
        broker sees it) and its heartbeat echoes. A paused container's process runs but
        answers nothing (a claim of one waited for the start timeout, twice)."""
        if kernel.host_process is not None and not kernel.host_process.alive():
            return False
        # A kernel that echoes its heartbeat runs: no engine call on the claim's path
        # (an inspect took 3-5 ms). Only one that does not is asked about.
        url = hb_url(ipc.connection_info(ipc.host_prefix(kernel.runtime_dir), kernel.key))
        try:
            if await echoes(self._zmq(), url, HEARTBEAT_PROOF_S):
                return True
        except zmq.ZMQError:  # no answer either way: the engine decides
            log.debug("no heartbeat check of pooled kernel %s", kernel.name, exc_info=True)
        try:
            state = await call_docker(
                "inspect a kernel container", inspect_state, kernel.container_id
            )
        except InterpreterError:
            return False
        if state is not None and state.get("Paused"):
            log.warning("pooled kernel %s is paused; it is replaced", kernel.name)
            return False
        return exit_reason_of(state) is None

    # -- filesystem (worker threads) ---------------------------------------------------

    def _make_slot_dir(self, slot_dir: Path) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        slot_dir.mkdir(mode=0o700)

    def _target_usable(self, workspace: Path, disk_mb: int | None) -> bool:
        """The workspace absent or an empty directory, on the pool's filesystem (with a
        quota, it may be the session's own fresh quota: the claim replaces it)."""
        try:
            pool_dev = os.stat(self.root).st_dev
        except FileNotFoundError:
            return False
        if disk_mb and quota.is_mounted(workspace):
            if any(workspace.iterdir()):
                return False
            workspace = workspace.parent / ".unused"  # only its parent's device counts
        try:
            st = os.lstat(workspace)
        except FileNotFoundError:
            return os.stat(_nearest_existing(workspace.parent)).st_dev == pool_dev
        return stat.S_ISDIR(st.st_mode) and st.st_dev == pool_dev and not any(workspace.iterdir())

    def _hand_over(self, kernel: KernelContainer, options: LaunchOptions) -> None:
        """Move the kernel's workspace to the session's and check its sockets."""
        self._move(kernel, options)
        ipc.verify_sockets(kernel.runtime_dir, self._user)

    @staticmethod
    def _move(kernel: KernelContainer, options: LaunchOptions) -> None:
        slot_dir = kernel.workspace.parent
        if quota.is_mounted(kernel.workspace):
            quota.move(slot_dir, kernel.workspace, options.session_dir, options.workspace)
        else:
            target = options.workspace
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                target.rmdir()  # only ever an empty directory (checked before)
            os.rename(kernel.workspace, target)
        ipc.remove_tree(slot_dir)  # the now empty slot directory

    def _remove_leftovers(self) -> None:
        """Remove the unclaimed containers and directories an earlier broker process left.

        A pooled container keeps its pool labels after a claim, so the labels cannot tell
        claimed from unclaimed ones; the slot directory can: a claim moves its contents
        away and removes it. Containers whose slot directory is gone belong to sessions
        (or to sessions that ended): the broker's reconciliation decides about those.
        """
        if self.broker_id:
            for summary in list_broker_containers(self.broker_id):
                slot = summary.pool_slot
                if slot is not None and _SLOT.fullmatch(slot) and (self.root / slot).exists():
                    remove_container(summary.id)
                    if summary.runtime_dir and rundirs.owns(self.run_root, summary.runtime_dir):
                        ipc.remove_tree(Path(summary.runtime_dir))
        self._remove_root()

    def _remove_root(self) -> None:
        if self.root.is_dir():
            for slot_dir in self.root.iterdir():
                _remove_slot(slot_dir)
        ipc.remove_tree(self.root)


def _remove_slot(slot_dir: Path) -> None:
    """Remove a slot directory, its workspace quota unmounted and released first."""
    quota.detach(slot_dir, slot_dir / "ws")
    ipc.remove_tree(slot_dir)


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


async def _warm_up(client: AsyncKernelClient, timeout_s: float) -> None:
    """Run :data:`WARM_UP_CODE` and wait for its reply."""
    msg_id = client.execute(WARM_UP_CODE, silent=False, store_history=False, allow_stdin=False)
    async with asyncio.timeout(timeout_s):
        while True:
            reply = await client.get_shell_msg()
            if reply["parent_header"].get("msg_id") == msg_id:
                return
