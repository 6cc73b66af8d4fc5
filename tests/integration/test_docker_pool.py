"""The warm pool for real: claims are fast, the pool refills, close leaves nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import docker.errors
import pytest
import zmq.asyncio
from jupyter_client.channels import HBChannel

import interpreter.backends.docker.pool as pool_module
import interpreter.kernel
from interpreter import quota, readiness, zmqctx
from interpreter.backends.docker.backend import DockerBackend
from interpreter.backends.docker.engine import docker_client, list_broker_containers
from interpreter.backends.docker.pool import ContainerPool
from interpreter.backends.docker.provisioner import DockerProvisioner
from interpreter.kernel import Kernel, RestartBudget
from interpreter.settings import Settings
from tests.integration.docker_lab import Lab, lab, require_docker, run, short_base, wait_for

pytestmark = [pytest.mark.docker]
__all__ = ["lab", "short_base"]  # fixtures from docker_lab


@pytest.fixture
async def pool(lab: Lab) -> AsyncIterator[ContainerPool]:
    require_docker()
    template = lab.options()
    pool = ContainerPool(1, template, lab.base, root=lab.base / "pool")
    await pool.start()
    try:
        yield pool
    finally:
        await pool.close()


async def _ready(pool: ContainerPool) -> None:
    async def ready() -> bool:
        return pool.ready_count == pool.size

    await wait_for(ready, 90, "the pool to fill")


async def test_claim_is_fast_and_the_pool_refills(lab: Lab, pool: ContainerPool) -> None:
    await _ready(pool)
    pooled_id = pool._ready[0].container_id
    engine = docker_client()
    waiting = await asyncio.to_thread(engine.api.inspect_container, pooled_id)
    assert waiting["HostConfig"]["CpuShares"] == 128

    options = dataclasses.replace(pool.template, pool=pool, **_fresh_paths(lab))
    t0 = time.perf_counter()
    km = await lab.start(options)
    kc = await lab.client(km)
    claim_s = time.perf_counter() - t0
    print(f"\nMEASURE claim from the pool (launch to kernel_info reply): {claim_s:.2f} s")

    provisioner = km.provisioner
    assert isinstance(provisioner, DockerProvisioner)
    kernel = provisioner.container
    assert kernel is not None
    assert kernel.container_id == pooled_id and kernel.pool_slot is not None
    # The workspace moved to the session's; the runtime directory stays where the pool
    # made it, under a random name that names neither a slot nor the session.
    assert kernel.workspace == options.workspace
    assert kernel.runtime_dir.parent == pool.run_root
    assert kernel.pool_slot not in str(kernel.runtime_dir)
    assert claim_s < 2.0
    # The pool's warm-up cell left no trace: this is cell 1, with no earlier result or
    # history (pool.WARM_UP_CODE).
    first = await run(kc, "print(repr(_), len(Out), len(In)); 1+1")
    assert first["execution_count"] == 1, first
    assert first["stdout"] == "'' 0 2\n" and first["result"] == "2", first
    # Waiting in the pool it had a low CPU weight; claimed, it gets a session's.

    async def promoted() -> bool:
        config = await asyncio.to_thread(engine.api.inspect_container, pooled_id)
        return bool(config["HostConfig"]["CpuShares"] == 1024)

    await wait_for(promoted, 30, "the claimed kernel's CPU weight")
    # The workspace the kernel sees is the session's directory now.
    await run(kc, "open('/workspace/hello.txt', 'w').write('hi')")
    assert (options.workspace / "hello.txt").read_text() == "hi"
    assert pool.claimed == 1

    # The pool refills with a new container; the claimed one is never handed out again.
    await _ready(pool)
    assert pool._ready[0].container_id != pooled_id

    # A session with other limits starts cold.
    other = dataclasses.replace(pool.template, pool=pool, memory_mb=384, **_fresh_paths(lab))
    km_cold = await lab.start(other)
    cold = km_cold.provisioner
    assert isinstance(cold, DockerProvisioner) and cold.container is not None
    assert cold.container.pool_slot is None

    # Shutting the session down removes its (pooled) container for good (H-26).
    kc.stop_channels()
    await km.shutdown_kernel(now=True)
    with pytest.raises(docker.errors.NotFound):
        await asyncio.to_thread(docker_client().api.inspect_container, pooled_id)
    assert not kernel.runtime_dir.exists()
    assert (options.workspace / "hello.txt").exists()


async def test_a_claimed_container_is_renamed_after_its_session(
    lab: Lab, pool: ContainerPool
) -> None:
    # Exploration B, issue 19: a claimed container kept its interp-pool-* name, so a session's
    # kernel kept past the broker looked like a leaked warm container in `docker ps`. The
    # rename (about 13 ms) happens after the claim, off its path.
    await _ready(pool)
    pooled_id = pool._ready[0].container_id
    engine = docker_client()
    waiting = await asyncio.to_thread(engine.api.inspect_container, pooled_id)
    assert waiting["Name"].startswith("/interp-pool-")
    options = dataclasses.replace(pool.template, pool=pool, **_fresh_paths(lab))
    km = await lab.start(options)
    provisioner = km.provisioner
    assert isinstance(provisioner, DockerProvisioner) and provisioner.container is not None
    kernel = provisioner.container
    assert kernel.container_id == pooled_id
    assert kernel.name.startswith(f"interp-{options.session_id}-")
    info = await provisioner.get_provisioner_info()
    assert info["container_name"] == kernel.name

    async def renamed() -> bool:
        state = await asyncio.to_thread(engine.api.inspect_container, pooled_id)
        return bool(state["Name"] == "/" + kernel.name)

    await wait_for(renamed, 10, "the claimed container's new name")


async def test_restart_of_a_pooled_session_starts_cold(lab: Lab, pool: ContainerPool) -> None:
    await _ready(pool)
    options = dataclasses.replace(pool.template, pool=pool, **_fresh_paths(lab))
    km = await lab.start(options)
    provisioner = km.provisioner
    assert isinstance(provisioner, DockerProvisioner) and provisioner.container is not None
    assert _slot(provisioner) is not None
    await km.restart_kernel(now=True)
    assert _slot(provisioner) is None
    kc = await lab.client(km)
    assert (await run(kc, "1+1"))["result"] == "2"


async def test_a_cold_start_makes_the_quota_a_missed_claim_did_not_bring(lab: Lab) -> None:
    """The broker skips a session's own quota when a warm kernel is ready (its claim
    brings one); when the claim then falls through, the cold start must make it."""
    require_docker()
    if quota.unavailable_reason() is not None:
        pytest.fail(f"disk quotas unavailable here: {quota.unavailable_reason()}")
    options = lab.options(disk_mb=32)
    options.workspace.mkdir()
    assert not quota.is_mounted(options.workspace)
    km = await lab.start(options)
    try:
        assert quota.is_mounted(options.workspace)
        kc = await lab.client(km)
        size = await run(kc, "import os\ns = os.statvfs('.')\ns.f_blocks * s.f_frsize >> 20")
        assert 24 <= int(size["result"]) <= 32, size
    finally:
        await km.shutdown_kernel(now=True)
        quota.detach(options.session_dir, options.workspace)


async def test_close_removes_unclaimed_containers(lab: Lab) -> None:
    require_docker()
    pool = ContainerPool(2, lab.options(), lab.base, root=lab.base / "pool")
    await pool.start()
    try:
        await _ready(pool)
    finally:
        await pool.close()
    assert list_broker_containers(lab.broker_id) == []
    assert not (lab.base / "pool").exists()
    assert await pool.claim(lab.options()) is None


async def test_a_new_pool_keeps_claimed_containers(lab: Lab, pool: ContainerPool) -> None:
    # A broker restart: the new broker's pool removes what was never claimed, and leaves
    # the containers sessions took (the broker reattaches or removes those itself).
    await _ready(pool)
    km = await lab.start(dataclasses.replace(pool.template, pool=pool, **_fresh_paths(lab)))
    provisioner = km.provisioner
    assert isinstance(provisioner, DockerProvisioner) and provisioner.container is not None
    claimed_id = provisioner.container.container_id
    await _ready(pool)
    unclaimed_id = pool._ready[0].container_id

    successor = ContainerPool(0, pool.template, lab.base, root=pool.root)
    await successor.start()
    await successor.close()
    ids = {c.id for c in list_broker_containers(lab.broker_id)}
    assert claimed_id in ids and unclaimed_id not in ids
    assert await km.is_alive()


async def test_a_dead_pooled_kernel_is_never_handed_out(lab: Lab, pool: ContainerPool) -> None:
    """A pooled kernel that died while it waited does not echo its heartbeat; the claim
    then asks the engine, removes it, and the session starts cold (None)."""
    await _ready(pool)
    dead = pool._ready[0]
    engine = docker_client()
    await asyncio.to_thread(engine.api.kill, dead.container_id)
    options = dataclasses.replace(pool.template, **_fresh_paths(lab))
    assert await pool.claim(options) is None
    assert pool.claimed == 0
    with pytest.raises(docker.errors.NotFound):
        await asyncio.to_thread(engine.api.inspect_container, dead.container_id)
    assert not dead.workspace.parent.exists()  # its slot is gone too
    await _ready(pool)  # and the pool replaces it
    assert pool._ready[0].container_id != dead.container_id


async def test_a_paused_pooled_kernel_is_never_handed_out(lab: Lab, pool: ContainerPool) -> None:
    """A paused container's process runs (the broker sees it in /proc) but its kernel
    answers nothing: handed out, its session's start waited for the start timeout."""
    await _ready(pool)
    paused = pool._ready[0]
    engine = docker_client()
    await asyncio.to_thread(engine.api.pause, paused.container_id)
    options = dataclasses.replace(pool.template, **_fresh_paths(lab))
    assert await pool.claim(options) is None
    assert pool.claimed == 0
    with pytest.raises(docker.errors.NotFound):
        await asyncio.to_thread(engine.api.inspect_container, paused.container_id)
    await _ready(pool)
    assert pool._ready[0].container_id != paused.container_id


async def test_a_claim_cancelled_while_it_checks_leaves_the_kernel_in_the_pool(
    lab: Lab, pool: ContainerPool
) -> None:
    """A paused pooled kernel does not echo, so the claim waits on it; cancelled there (a
    broker stopping), the kernel goes back to the pool instead of running on unowned.
    The claim checks the heartbeat when the kernel's process is not visible on the host
    (a broker in a container of its own): as here, with its host process forgotten."""
    await _ready(pool)
    pool._ready[0] = dataclasses.replace(pool._ready[0], host_process=None)
    paused = pool._ready[0]
    engine = docker_client()
    await asyncio.to_thread(engine.api.pause, paused.container_id)
    try:
        claim = asyncio.create_task(
            pool.claim(dataclasses.replace(pool.template, **_fresh_paths(lab)))
        )
        await asyncio.sleep(0.1)  # within the heartbeat wait
        assert pool.ready_count == 0 and not claim.done()
        claim.cancel()
        with pytest.raises(asyncio.CancelledError):
            await claim
        assert [k.container_id for k in pool._ready] == [paused.container_id]
        assert pool.claimed == 0
    finally:
        await asyncio.to_thread(engine.api.unpause, paused.container_id)
    # Awake again, it is the kernel the next claim hands out.
    claimed = await pool.claim(dataclasses.replace(pool.template, **_fresh_paths(lab)))
    assert claimed is not None and claimed.container_id == paused.container_id
    await asyncio.to_thread(engine.api.remove_container, claimed.container_id, force=True)


async def test_the_refill_waits_while_a_ready_kernel_is_left(lab: Lab) -> None:
    """A claim that leaves a ready kernel lets the claimed session have the machine for
    ``refill_pause_s``; a claim that empties the pool starts the refill at once. The first
    fill follows no claim and waits for nothing, however long the pause and however
    recently the machine booted (the loop's clock starts near zero then)."""
    require_docker()
    pool = ContainerPool(2, lab.options(), lab.base, root=lab.base / "pool")
    pool.refill_pause_s = 1e9  # longer than any uptime: nothing here may wait for it
    await pool.start()
    try:
        await _ready(pool)
        assert pool.started == 2
        first = await pool.claim(dataclasses.replace(pool.template, **_fresh_paths(lab)))
        assert first is not None and pool.ready_count == 1
        await asyncio.sleep(3)  # a refill would have begun at once (its slot dir first)
        assert pool.started == 2 and list(pool.root.iterdir()) == [pool._ready[0].workspace.parent]
        second = await pool.claim(dataclasses.replace(pool.template, **_fresh_paths(lab)))
        assert second is not None and pool.ready_count == 0

        async def refilled() -> bool:
            return pool.ready_count == 1

        await wait_for(refilled, 90, "the refill of an emptied pool")
        assert pool.started == 3
        for kernel in (first, second):
            await asyncio.to_thread(
                docker_client().api.remove_container, kernel.container_id, force=True
            )
    finally:
        await pool.close()


def _slot(provisioner: DockerProvisioner) -> str | None:
    assert provisioner.container is not None
    return provisioner.container.pool_slot


def _fresh_paths(lab: Lab) -> dict[str, Any]:
    """Session id, owner and directories of a new session (to combine with a template)."""
    fresh = lab.options()
    return {
        "session_id": fresh.session_id,
        "owner": fresh.owner,
        "session_dir": fresh.session_dir,
        "workspace": fresh.workspace,
        "runtime_dir": fresh.runtime_dir,
    }


async def test_a_claimed_kernel_gets_a_sessions_weight_only_after_its_first_moments(
    lab: Lab,
) -> None:
    """Raising a claimed kernel's CPU weight is an engine call that runs ``runc``; made at
    once it took the CPU from the session's start and first cell. It waits
    ``promote_after_s`` (here: longer than the test), and a pool closing makes it at once,
    for the kernels that outlive it with their sessions."""
    require_docker()
    pool = ContainerPool(1, lab.options(), lab.base, root=lab.base / "pool")
    pool.promote_after_s = 1e9
    await pool.start()
    engine = docker_client()

    async def shares(container_id: str) -> int:
        config = await asyncio.to_thread(engine.api.inspect_container, container_id)
        return int(config["HostConfig"]["CpuShares"])

    try:
        await _ready(pool)
        km = await lab.start(dataclasses.replace(pool.template, pool=pool, **_fresh_paths(lab)))
        provisioner = km.provisioner
        assert isinstance(provisioner, DockerProvisioner) and provisioner.container is not None
        claimed_id = provisioner.container.container_id
        kc = await lab.client(km)
        assert (await run(kc, "1+1"))["result"] == "2"
        await asyncio.sleep(1)  # an update issued with the claim would have landed by now
        assert await shares(claimed_id) == 128
        assert len(pool._promotions) == 1
    finally:
        await pool.close()
    assert await shares(claimed_id) == 1024
    kc.stop_channels()
    await km.shutdown_kernel(now=True)


async def test_a_session_that_ends_before_its_weight_is_raised_leaves_no_error(
    lab: Lab, caplog: pytest.LogCaptureFixture
) -> None:
    require_docker()
    pool = ContainerPool(1, lab.options(), lab.base, root=lab.base / "pool")
    pool.promote_after_s = 1e9
    await pool.start()
    try:
        await _ready(pool)
        km = await lab.start(dataclasses.replace(pool.template, pool=pool, **_fresh_paths(lab)))
        await km.shutdown_kernel(now=True)  # its container is removed
    finally:
        with caplog.at_level("DEBUG", logger="interpreter.backends.docker.pool"):
            await pool.close()
    assert not pool._promotions
    assert "ended before its CPU weight was raised" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= 30], caplog.text


async def test_a_pooled_kernels_handshake_needs_no_heartbeat_thread_nor_context(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """jupyter_client's ``wait_for_ready`` needs a heartbeat channel, a thread per client
    that the handshake polled in 0.2 s steps, and a client made without a context makes a
    ZMQ context (an I/O thread) of its own: per refilled kernel, half a second longer to
    be ready and threads made only to be stopped. The pool's handshake uses shell and
    IOPub, and the pool's one context."""
    require_docker()
    heartbeats: list[object] = []
    contexts: list[object] = []
    real_hb_init = HBChannel.__init__

    def counted_hb(self: HBChannel, *args: Any, **kwargs: Any) -> None:
        heartbeats.append(self)
        real_hb_init(self, *args, **kwargs)

    class CountedContext(zmqctx.Context):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            contexts.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(HBChannel, "__init__", counted_hb)
    # Any context made, jupyter_client's default one or the broker's own.
    monkeypatch.setattr(zmq.asyncio, "Context", CountedContext)
    monkeypatch.setattr(pool_module, "Context", CountedContext)
    pool = ContainerPool(1, lab.options(), lab.base, root=lab.base / "pool")
    await pool.start()
    try:
        await _ready(pool)
        assert pool.started == 1
        assert heartbeats == []
        assert contexts == [pool._ctx]
        # The handshake's sockets are closed; the pool's context stays open for claims.
        assert pool._ctx is not None and not pool._ctx.closed
        # And the kernel it readied serves a session as before.
        options = dataclasses.replace(pool.template, pool=pool, **_fresh_paths(lab))
        km = await lab.start(options)
        kc = await lab.client(km)
        first = await run(kc, "1+1")
        assert first["result"] == "2" and pool.claimed == 1
    finally:
        await pool.close()
    assert pool._ctx is None and contexts[0].closed


@pytest.mark.parametrize("welcome_wait_s", [None, 0.0], ids=["welcomed", "no-welcome"])
async def test_a_claimed_kernels_session_asks_it_nothing_before_its_first_cell(
    lab: Lab, pool: ContainerPool, monkeypatch: pytest.MonkeyPatch, welcome_wait_s: float | None
) -> None:
    """The pool's handshake proved the kernel answers on shell and kept its ``kernel_info``
    reply, so the session's new client only waits for the kernel's ``iopub_welcome`` (its
    subscription took) and sends no request: 4.9 ms of a warm create became 2.5 ms (p50,
    measured). Without a welcome (here: no wait for one) it falls back to the whole
    handshake. Either way the first cell's output arrives whole, and a restart, which
    starts a container of the session's own, has the whole handshake."""
    if welcome_wait_s is not None:
        monkeypatch.setattr(readiness, "WELCOME_WAIT_S", welcome_wait_s)
    handshakes: list[object] = []
    real_wait_ready = interpreter.kernel.wait_ready

    async def counted(kc: Any, timeout_s: float, alive: Any = None) -> dict[str, Any]:
        handshakes.append(kc)
        return await real_wait_ready(kc, timeout_s, alive)

    monkeypatch.setattr(interpreter.kernel, "wait_ready", counted)
    iopub: list[dict[str, Any]] = []

    async def on_message(channel: str, msg: dict[str, Any]) -> None:
        if channel == "iopub":
            iopub.append(msg)

    await _ready(pool)
    backend = DockerBackend(Settings(data_dir=lab.base, pool_size=0))
    backend.pool = pool
    options = dataclasses.replace(pool.template, **_fresh_paths(lab))
    kernel = Kernel(
        name=options.session_id,
        backend=backend,
        options=options,
        start_timeout_s=60,
        budget=RestartBudget(3, 60),
        on_message=on_message,
    )
    await kernel.start()
    try:
        assert kernel.km is not None
        provisioner = kernel.km.provisioner
        assert isinstance(provisioner, DockerProvisioner) and _slot(provisioner) is not None
        assert provisioner.ready_reply is not None
        assert len(handshakes) == (0 if welcome_wait_s is None else 1)
        assert kernel.info.language == "python" and kernel.info.version.startswith("3.")
        assert kernel.language_info["name"] == "python"

        async def cell_output(msg_id: str) -> list[str]:
            async def idle() -> bool:
                return any(
                    m["parent_header"].get("msg_id") == msg_id
                    and m["header"]["msg_type"] == "status"
                    and m["content"]["execution_state"] == "idle"
                    for m in iopub
                )

            await wait_for(idle, 30, "the cell's idle status")
            return [
                m["header"]["msg_type"] for m in iopub if m["parent_header"].get("msg_id") == msg_id
            ]

        await kernel.execute("print('first')", "ex-first")
        assert await cell_output("ex-first") == ["status", "execute_input", "stream", "status"]
        before = len(handshakes)
        assert await kernel.restart(automatic=False) is interpreter.kernel.Restart.DONE
        assert _slot(provisioner) is None and provisioner.ready_reply is None
        assert len(handshakes) == before + 1
        await kernel.execute("print('after')", "ex-after")
        assert await cell_output("ex-after") == ["status", "execute_input", "stream", "status"]
    finally:
        await kernel.stop()
        kernel.close()
