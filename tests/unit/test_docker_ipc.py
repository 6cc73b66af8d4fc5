"""The host side of the ipc link: socket checks, connection file, removal (H-30, H-31)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interpreter.backends.docker import ipc
from interpreter.backends.docker.config import KernelUser
from interpreter.errors import KernelStartFailed

ROOT = os.geteuid() == 0
USER = KernelUser() if ROOT else KernelUser(os.geteuid(), os.getegid())


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # pytest's tmp_path can be longer than a unix socket path allows.
    path = Path(tempfile.mkdtemp(prefix="ipc-"))
    yield path
    ipc.remove_tree(path)


def _bind_all(runtime_dir: Path) -> list[socket.socket]:
    sockets = []
    for path in ipc.socket_paths(runtime_dir):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        if ROOT:
            os.chown(path, USER.uid, USER.gid)
        sockets.append(sock)
    return sockets


def test_socket_paths_use_fixed_ports(short_dir: Path) -> None:
    names = [p.name for p in ipc.socket_paths(short_dir)]
    assert names == ["k-1", "k-2", "k-3", "k-4", "k-5"]
    assert ipc.host_prefix(short_dir) == f"{short_dir}/k"
    assert ipc.container_prefix() == "/run/interp/k"


def test_too_long_runtime_dir_is_refused_clearly() -> None:
    ipc.check_path_length(Path("/r") / ("x" * 90))
    with pytest.raises(KernelStartFailed, match="too long"):
        ipc.check_path_length(Path("/r") / ("x" * 110))


def test_connection_info_keeps_key_bytes() -> None:
    info: dict[str, Any] = dict(ipc.connection_info("/x/k", b"secret"))
    assert info["key"] == b"secret"
    assert info["transport"] == "ipc"
    assert info["signature_scheme"] == "hmac-sha256"


def test_prepare_runtime_dir_starts_fresh(short_dir: Path) -> None:
    runtime = short_dir / "run"
    runtime.mkdir()
    (runtime / "stale").write_text("x")
    ipc.prepare_runtime_dir(runtime, USER)
    assert list(runtime.iterdir()) == []
    st = os.stat(runtime)
    assert st.st_mode & 0o777 == 0o700
    assert st.st_uid == USER.uid


def test_connection_file_is_written_once_readable_not_writable_by_the_kernel(
    short_dir: Path,
) -> None:
    runtime = short_dir / "run"
    ipc.prepare_runtime_dir(runtime, USER)
    ipc.write_connection_file(runtime, ipc.connection_info("/run/interp/k", b"abc"), USER)
    path = runtime / "kernel.json"
    data = json.loads(path.read_text())
    assert data["key"] == "abc" and data["ip"] == "/run/interp/k" and data["shell_port"] == 1
    st = os.stat(path)
    if os.geteuid() == 0:  # root's file, the kernel's group may only read it
        assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o640, 0, USER.gid)
    else:  # the broker's own user is the kernel's: nothing to take away
        assert st.st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        ipc.write_connection_file(runtime, ipc.connection_info("/run/interp/k", b"x"), USER)


def test_connection_file_never_follows_a_planted_symlink(short_dir: Path) -> None:
    runtime = short_dir / "run"
    ipc.prepare_runtime_dir(runtime, USER)
    victim = short_dir / "victim"
    victim.write_text("untouched")
    (runtime / "kernel.json").symlink_to(victim)
    with pytest.raises(FileExistsError):
        ipc.write_connection_file(runtime, ipc.connection_info("/run/interp/k", b"x"), USER)
    assert victim.read_text() == "untouched"


def test_real_sockets_pass(short_dir: Path) -> None:
    runtime = short_dir / "run"
    ipc.prepare_runtime_dir(runtime, USER)
    assert not ipc.sockets_present(runtime)
    sockets = _bind_all(runtime)
    try:
        assert ipc.sockets_present(runtime)
        ipc.verify_sockets(runtime, USER)
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize("kind", ["symlink", "file", "missing"])
def test_anything_but_a_socket_is_refused(short_dir: Path, kind: str) -> None:
    runtime = short_dir / "run"
    ipc.prepare_runtime_dir(runtime, USER)
    sockets = _bind_all(runtime)
    try:
        shell = ipc.socket_paths(runtime)[0]
        shell.unlink()
        if kind == "symlink":
            # The attack of H-31: point the endpoint at another socket (here one of the
            # kernel's own; in real life /var/run/docker.sock or another session's).
            shell.symlink_to(ipc.socket_paths(runtime)[1])
        elif kind == "file":
            shell.write_text("")
            if ROOT:
                os.chown(shell, USER.uid, USER.gid)
        with pytest.raises(KernelStartFailed):
            ipc.verify_sockets(runtime, USER)
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.skipif(not ROOT, reason="ownership checks need root to chown")
def test_socket_of_another_owner_is_refused(short_dir: Path) -> None:
    runtime = short_dir / "run"
    ipc.prepare_runtime_dir(runtime, USER)
    sockets = _bind_all(runtime)
    try:
        os.chown(ipc.socket_paths(runtime)[2], 0, 0)
        with pytest.raises(KernelStartFailed, match="owner"):
            ipc.verify_sockets(runtime, USER)
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.skipif(not ROOT, reason="only a root broker can take the directory back")
def test_lock_takes_the_directory_back(short_dir: Path) -> None:
    runtime = short_dir / "run"
    ipc.prepare_runtime_dir(runtime, USER)
    assert ipc.lock_runtime_dir(runtime)
    st = os.stat(runtime)
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o755)


@pytest.mark.skipif(not ROOT, reason="only a root broker can take the directory back")
def test_the_kernel_can_read_its_connection_file_at_every_step_of_the_lock(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ipykernel binds its sockets, then reads its connection file; the broker takes the
    directory back as soon as the sockets are there. Owned by root while still mode 0700,
    the directory was shut to the kernel between the two calls of the lock, and a kernel
    reading its file then died ("Could not find '/run/interp/kernel.json'"; under load
    about one Docker start in 150). After each call, a process of the kernel's uid and
    gid looks for the file."""
    os.chmod(short_dir, 0o755)  # mkdtemp's 0700 would shut the kernel out by itself
    runtime = short_dir / "run"
    ipc.prepare_runtime_dir(runtime, USER)
    ipc.write_connection_file(runtime, {"key": b"k", "transport": "ipc"}, USER)
    target = runtime / "kernel.json"

    def kernel_sees() -> bool:
        done = subprocess.run(
            ["stat", "--", str(target)],
            user=USER.uid,
            group=USER.gid,
            extra_groups=[],
            capture_output=True,
            timeout=30,
        )
        return done.returncode == 0

    seen: list[tuple[str, bool]] = []
    real_chown, real_chmod = os.chown, os.chmod

    def chown(*args: Any, **kwargs: Any) -> None:
        real_chown(*args, **kwargs)
        seen.append(("chown", kernel_sees()))

    def chmod(*args: Any, **kwargs: Any) -> None:
        real_chmod(*args, **kwargs)
        seen.append(("chmod", kernel_sees()))

    assert kernel_sees()
    monkeypatch.setattr(os, "chown", chown)
    monkeypatch.setattr(os, "chmod", chmod)
    assert ipc.lock_runtime_dir(runtime)
    monkeypatch.undo()
    assert sorted(step for step, _ in seen) == ["chmod", "chown"]
    assert all(ok for _, ok in seen), seen
    st = os.stat(runtime)
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o755)


def test_remove_tree_does_not_follow_symlinks(short_dir: Path) -> None:
    outside = short_dir / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    tree = short_dir / "tree"
    tree.mkdir()
    (tree / "link").symlink_to(outside, target_is_directory=True)
    ipc.remove_tree(tree)
    assert not tree.exists()
    assert (outside / "keep").read_text() == "x"
    ipc.remove_tree(tree)  # already gone: fine
