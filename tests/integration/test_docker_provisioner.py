"""The Docker provisioner for real: AsyncKernelManager + AsyncKernelClient over ipc sockets.

Every test starts real hardened containers from the kernel image and checks, from inside
the kernel, what docs/security.md §2.B promises; teardown (``docker_lab.lab``) asserts with the
docker SDK that no container labelled for the test's broker id is left.
"""

from __future__ import annotations

import asyncio
import json
import time

import docker.errors
import pytest

from interpreter.backends.base import LAUNCH_KWARG
from interpreter.backends.docker.config import LABEL_BROKER
from interpreter.backends.docker.engine import docker_client
from interpreter.backends.docker.provisioner import DockerProvisioner, reattach
from interpreter.errors import KernelStartFailed
from interpreter.kernel import send_interrupt
from tests.integration.docker_lab import Lab, lab, run, short_base, wait_for, wait_for_iopub

pytestmark = [pytest.mark.docker]
__all__ = ["lab", "short_base"]  # fixtures, shared with the pool tests

CANARY = "INTERP_TEST_BROKER_SECRET"


PROBE = r"""
import json, os, socket
r = {"uid": os.getuid(), "gid": os.getgid(), "cwd": os.getcwd()}
try:
    socket.create_connection(("1.1.1.1", 80), timeout=3)
    r["tcp"] = "connected"
except OSError as exc:
    r["tcp"] = f"{type(exc).__name__}: {exc}"
try:
    socket.getaddrinfo("example.com", 80)
    r["dns"] = "resolved"
except OSError as exc:
    r["dns"] = f"{type(exc).__name__}: {exc}"
try:
    open("/probe-root", "w").close()
    r["rootfs"] = "writable"
except OSError as exc:
    r["rootfs"] = exc.errno
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
r["caps"] = {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
r["nnp"] = status["NoNewPrivs"].strip()
r["seccomp"] = status["Seccomp"].strip()
with open("/workspace/probe.txt", "w") as f:
    f.write("ok")
r["workspace"] = open("/workspace/probe.txt").read()
st = os.statvfs("/tmp")
r["tmp_bytes"] = st.f_blocks * st.f_frsize
r["ifaces"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:])
r["env"] = dict(os.environ)
rows = open("/proc/self/limits").read().splitlines()[1:]
lim = {row[:26].strip(): row[26:].split()[:2] for row in rows}
r["nofile"] = lim["Max open files"]
r["core"] = lim["Max core file size"]
print(json.dumps(r))
"""


async def test_lifecycle(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    # A secret in the broker's environment must never reach the kernel (H-24).
    monkeypatch.setenv(CANARY, "do-not-leak")
    options = lab.options()

    t0 = time.perf_counter()
    km = await lab.start(options)
    kc = await lab.client(km)
    cold_start = time.perf_counter() - t0
    provisioner = km.provisioner
    assert isinstance(provisioner, DockerProvisioner)
    assert provisioner.container is not None
    first_id = provisioner.container.container_id
    assert km.transport == "ipc"
    assert lab.labelled() == [first_id]

    reply = await run(kc, "1+1")
    assert reply["status"] == "ok" and reply["result"] == "2"

    # `1+1` round trips over ipc.
    t0 = time.perf_counter()
    for _ in range(20):
        await run(kc, "1+1")
    round_trip_ms = (time.perf_counter() - t0) / 20 * 1000

    # Idle memory of the kernel container (cgroup usage, as `docker stats` shows it).
    stats = await asyncio.to_thread(docker_client().api.stats, first_id, stream=False)
    idle_mib = stats["memory_stats"]["usage"] / 2**20
    print(
        f"\nMEASURE cold start (launch to kernel_info reply): {cold_start:.2f} s; "
        f"1+1 round trip: {round_trip_ms:.1f} ms; idle container memory: {idle_mib:.0f} MiB"
    )

    # In-kernel probes of the hardening.
    reply = await run(kc, PROBE)
    assert reply["status"] == "ok", reply
    probe = json.loads(reply["stdout"])
    assert probe["uid"] != 0 and probe["gid"] != 0
    assert probe["cwd"] == "/workspace"
    assert probe["tcp"] != "connected" and "unreachable" in probe["tcp"].lower()
    assert probe["dns"] != "resolved"
    assert probe["rootfs"] == 30  # EROFS
    assert set(probe["caps"].values()) == {"0000000000000000"}
    assert probe["nnp"] == "1"
    assert probe["seccomp"] == "2"
    assert probe["workspace"] == "ok"
    assert (options.workspace / "probe.txt").read_text() == "ok"
    assert probe["tmp_bytes"] <= 32 * 2**20
    assert probe["ifaces"] == ["lo"]
    assert probe["nofile"] == ["1024", "1024"] and probe["core"] == ["0", "0"]
    env = probe["env"]
    assert CANARY not in env
    assert env["INTERP_SESSION_ID"] == options.session_id
    assert env["HOME"] == "/tmp"
    assert not [k for k in env if k.startswith(("DOCKER", "INTERP_API", "JPY_", "PYTEST"))]

    # The container carries the hardened configuration (H-01 ... H-21).
    inspect = await asyncio.to_thread(docker_client().api.inspect_container, first_id)
    host = inspect["HostConfig"]
    assert host["NetworkMode"] == "none" and host["Privileged"] is False
    assert host["ReadonlyRootfs"] is True and host["Init"] is True
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert host["Memory"] == host["MemorySwap"] == 512 * 2**20
    assert host["PidsLimit"] == 128 and host["NanoCpus"] == 10**9
    assert sorted(m["Destination"] for m in inspect["Mounts"]) == ["/run/interp", "/workspace"]
    assert inspect["Config"]["Labels"][LABEL_BROKER] == lab.broker_id

    # Interrupt a sleeping cell; the kernel survives with its state.
    await run(kc, "x = 42")
    # stop_on_error=False, as the broker sends it: otherwise ipykernel answers requests
    # that reach it just after an error (this interrupt) with "aborted".
    msg_id = kc.execute(
        "import time; print('sleeping', flush=True); time.sleep(30)", stop_on_error=False
    )
    # Wait for output of the cell itself: SIGINT that lands before the cell runs is lost.
    await wait_for_iopub(kc, msg_id, "stream")
    t0 = time.perf_counter()
    # One interrupt, acknowledged by the kernel before anything else is sent; never a
    # second one, which could reach the interrupted cell's wind-down or the next cell.
    assert await send_interrupt(kc)
    reply = await kc.get_shell_msg(timeout=30)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    assert time.perf_counter() - t0 < 15
    after = await run(kc, "x")
    assert after["result"] == "42", after

    # Reattach from provisioner info in a fresh manager: same container, same state.
    info = json.loads(json.dumps(await provisioner.get_provisioner_info()))
    km2 = lab.manager(options)
    attached = await reattach(km2, info, options)
    assert attached.container is not None
    assert attached.container.container_id == first_id
    assert await km2.is_alive()
    kc2 = await lab.client(km2)
    assert (await run(kc2, "x"))["result"] == "42"
    kc.stop_channels()
    lab.managers.remove(km)  # km2 manages the container from now on

    # Restart: a fresh container (tmpfs and processes gone), same session directories.
    # Clients of one manager share a ZMQ identity (its session id): the old client must be
    # stopped, or its reconnect may take the identity and the new client's requests vanish.
    kc2.stop_channels()
    await km2.restart_kernel(now=True)
    assert attached.container is not None
    second_id = attached.container.container_id
    assert second_id != first_id
    with pytest.raises(docker.errors.NotFound):
        await asyncio.to_thread(docker_client().api.inspect_container, first_id)
    kc3 = await lab.client(km2)
    reply = await run(kc3, "x")
    assert reply["status"] == "error" and reply["ename"] == "NameError"
    assert (await run(kc3, "open('/workspace/probe.txt').read()"))["result"] == "'ok'"

    # Shutdown: the container and the runtime directory are gone, the workspace stays.
    kc3.stop_channels()
    await km2.shutdown_kernel(now=False)
    assert not km2.has_kernel
    assert lab.labelled() == []
    assert not options.runtime_dir.exists()
    assert (options.workspace / "probe.txt").exists()
    assert await attached.exit_reason() is not None


async def test_oom_is_reported_and_restart_recovers(lab: Lab) -> None:
    options = lab.options(memory_mb=128)
    km = await lab.start(options)
    kc = await lab.client(km)
    provisioner = km.provisioner
    assert isinstance(provisioner, DockerProvisioner)
    # Pin tmpfs memory too: after an OOM only a fresh container gets it back (H-18).
    await run(kc, "open('/tmp/pinned', 'wb').write(b'p' * (20 << 20))")
    kc.execute("hog = b'x' * (512 << 20)")

    async def dead() -> bool:
        return not await km.is_alive()

    await wait_for(dead, 30, "the kernel to be OOM-killed")
    assert await provisioner.poll() == 137
    assert await provisioner.exit_reason() == "oom_killed"

    kc.stop_channels()
    await km.restart_kernel(now=True)
    kc = await lab.client(km)
    reply = await run(kc, "import os; os.path.exists('/tmp/pinned'), 1+1")
    assert reply["result"] == "(False, 2)"
    assert await provisioner.exit_reason() is None


async def test_death_by_exit_is_reported(lab: Lab) -> None:
    km = await lab.start(lab.options())
    kc = await lab.client(km)
    provisioner = km.provisioner
    assert isinstance(provisioner, DockerProvisioner)
    kc.execute("import os; os._exit(3)")

    async def dead() -> bool:
        return not await km.is_alive()

    await wait_for(dead, 20, "the kernel to exit")
    assert await provisioner.exit_reason() == "exit:3"
    await km.shutdown_kernel(now=True)
    assert await provisioner.exit_reason() == "exit:3"  # remembered after removal


async def test_missing_image_says_how_to_build_it(lab: Lab) -> None:
    options = lab.options(image="interp-kernel:does-not-exist")
    km = lab.manager(options)
    with pytest.raises(KernelStartFailed, match="interp images build"):
        await km.start_kernel(**{LAUNCH_KWARG: options})
    assert lab.labelled() == []
    assert not options.runtime_dir.exists()


async def test_too_long_runtime_path_fails_clearly(lab: Lab) -> None:
    options = lab.options(runtime_dir=lab.base / ("r" * 120))
    km = lab.manager(options)
    with pytest.raises(KernelStartFailed, match="too long"):
        await km.start_kernel(**{LAUNCH_KWARG: options})
