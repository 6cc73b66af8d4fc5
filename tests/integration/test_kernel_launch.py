"""The real interpreter kernel (``python -m interpreter_kernel``) under jupyter_client.

The kernel is started from a copy of the repository's ``python3`` kernelspec without its
provisioner metadata, so jupyter_client's plain local provisioner runs exactly the kernel
command the broker's backends run. The environment is the broker's allowlisted one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
import pytest_asyncio
import zmq
import zmq.asyncio
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

from interpreter.backends.base import BASE_KERNEL_ENV
from interpreter.kernel import send_interrupt
from interpreter_kernel.app import STACKS_SIGNAL
from interpreter_kernel.ipythondir import PREFIX, remove_stale
from interpreter_kernel.kernel import INPUT_NOT_SUPPORTED
from interpreter_kernel.mime import CHART_MIME, DATAFRAME_MIME
from tests.conftest import over_ipc

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: Startup code a session could plant in its writable home or workspace; it must never run.
PLANTED = "import pathlib; pathlib.Path({marker!r}).write_text('ran'); planted = True\n"


async def until_idle(client: Any, msg_id: str) -> AsyncIterator[dict[str, Any]]:
    """The IOPub messages of request ``msg_id`` as they come, its final ``idle`` last."""
    while True:
        msg = await client.get_iopub_msg()
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        yield msg
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return


@dataclass
class Run:
    """Everything one execute request produced."""

    reply: dict[str, Any]
    messages: list[dict[str, Any]] = field(default_factory=list)

    def of_type(self, *types: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["msg_type"] in types]

    @property
    def stdout(self) -> str:
        return "".join(
            m["content"]["text"] for m in self.of_type("stream") if m["content"]["name"] == "stdout"
        )

    @property
    def error(self) -> dict[str, Any]:
        [error] = self.of_type("error")
        content: dict[str, Any] = error["content"]
        return content


@dataclass
class Kernel:
    manager: AsyncKernelManager
    client: Any
    home: Path
    marker: Path

    async def run(self, code: str, limit_s: float = 60) -> Run:
        """Execute ``code``; return once both the reply and the final ``idle`` arrived."""
        # stop_on_error=False, as the broker sends it: a cell that fails must not make
        # ipykernel answer the next request with "aborted".
        msg_id = self.client.execute(code, allow_stdin=False, stop_on_error=False)
        run = Run(reply={})
        async with asyncio.timeout(limit_s):
            run.messages = [msg async for msg in until_idle(self.client, msg_id)]
            while not run.reply:
                reply = await self.client.get_shell_msg()
                if reply["parent_header"].get("msg_id") == msg_id:
                    run.reply = reply
        return run


def kernelspec_without_provisioner(target: Path) -> Path:
    """Copy ``kernels/python3`` to ``target`` for jupyter_client's own local provisioner."""
    spec = json.loads((REPO / "kernels" / "python3" / "kernel.json").read_text())
    spec["metadata"].pop("kernel_provisioner", None)
    # The spec says "python"; this test must run the interpreter it runs under.
    spec["argv"][0] = sys.executable
    directory = target / "python3"
    directory.mkdir(parents=True)
    (directory / "kernel.json").write_text(json.dumps(spec))
    return target


def plant_startup_files(home: Path, marker: Path) -> dict[str, str]:
    """Plant every startup hook IPython or Python could pick up; return env pointing at them."""
    code = PLANTED.format(marker=str(marker))
    profile = home / ".ipython" / "profile_default"
    (profile / "startup").mkdir(parents=True)
    (profile / "startup" / "00-planted.py").write_text(code)
    for config in ("ipython_config.py", "ipython_kernel_config.py"):
        text = f"{code}c.InteractiveShellApp.exec_lines = ['planted = True']\n"
        (profile / config).write_text(text)
        (home / config).write_text(text)
    (home / "startup.py").write_text(code)
    return {"IPYTHONDIR": str(home / ".ipython"), "PYTHONSTARTUP": str(home / "startup.py")}


@contextlib.asynccontextmanager
async def start_kernel(
    root: Path, extra_env: dict[str, str], *, receive_queue: int = 0, stderr: IO[str] | None = None
) -> AsyncIterator[Kernel]:
    """Start a kernel whose home and working directory is ``root / "home"``; its client
    holds ``receive_queue`` messages at most (0: no limit, as the broker's reader). Its
    stderr goes to ``stderr`` if given (else the test's own, which pytest captures)."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = dict(BASE_KERNEL_ENV)
    env.update(HOME=str(home), PATH=os.environ.get("PATH", ""))
    env.update(extra_env)

    specs = KernelSpecManager(kernel_dirs=[str(kernelspec_without_provisioner(root / "specs"))])
    manager = over_ipc(AsyncKernelManager(kernel_spec_manager=specs, kernel_name="python3"))
    launch: dict[str, Any] = {} if stderr is None else {"stderr": stderr}
    await manager.start_kernel(env=env, cwd=str(home), **launch)
    context = zmq.asyncio.Context()
    context.setsockopt(zmq.RCVHWM, receive_queue)
    client = manager.client(context=context)
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        yield Kernel(manager, client, home, root / "planted-ran")
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)
        context.term()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def kernel(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Kernel]:
    root = tmp_path_factory.mktemp("kernel")
    (root / "home").mkdir()
    async with start_kernel(root, plant_startup_files(root / "home", root / "planted-ran")) as k:
        yield k


async def test_dataframe_result_carries_summary(kernel: Kernel) -> None:
    code = (
        "import pandas as pd\n"
        "df = pd.DataFrame({'city': ['Oslo', None], 'n': [1.5, float('nan')]})\n"
        "df"
    )
    run = await kernel.run(code)
    [result] = run.of_type("execute_result")
    data = result["content"]["data"]
    summary = data[DATAFRAME_MIME]
    # pandas 3 calls a column of strings "str", older releases "object".
    assert summary["columns"][0].pop("dtype") in ("str", "object")
    assert summary == {
        "version": 1,
        "kind": "dataframe",
        "shape": [2, 2],
        "columns": [
            {"name": "city", "nulls": 1},
            {"name": "n", "dtype": "float64", "nulls": 1},
        ],
        "index": {"type": "RangeIndex", "dtype": "int64", "names": [None], "values": [0, 1]},
        "rows": [["Oslo", 1.5], [None, None]],
        "truncated": False,
    }
    # pandas' own representations are still there.
    assert "Oslo" in data["text/plain"] and "<table" in data["text/html"]


async def test_pandas_display_options_apply_in_the_importing_cell(kernel: Kernel) -> None:
    run = await kernel.run("import pandas as pd\nprint(pd.get_option('display.max_rows'))")
    assert run.stdout.strip() == "30"


async def test_plot_sends_png_and_chart_in_one_message(kernel: Kernel) -> None:
    code = (
        "import matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots()\n"
        "ax.bar(['north', 'south'], [3, 5], label='units')\n"
        "ax.set_title('Units by region')\n"
        "ax.set_ylabel('units')\n"
        "plt.show()\n"
    )
    run = await kernel.run(code)
    [display] = run.of_type("display_data")
    data = display["content"]["data"]
    assert data["image/png"].startswith("iVBORw0KGgo")  # base64 of the PNG signature
    assert data[CHART_MIME] == {
        "version": 1,
        "suptitle": None,
        "axes": [
            {
                "kind": "bar",
                "title": "Units by region",
                "xlabel": None,
                "ylabel": "units",
                "series": [
                    {
                        "type": "bar",
                        "label": "units",
                        "categories": ["north", "south"],
                        "values": [3, 5],
                        "points": 2,
                        "truncated": False,
                        "stats": {"count": 2, "min": 3, "max": 5, "mean": 4},
                    }
                ],
            }
        ],
        "truncated": False,
    }
    # Figures are closed once shown, so a long session does not accumulate them.
    after = await kernel.run("print(len(plt.get_fignums()))")
    assert after.stdout.strip() == "0"


async def test_a_file_backend_asked_for_keeps_the_cells_figures(kernel: Kernel) -> None:
    """``matplotlib.use("Agg")``, as scripts (and models) write it, switched the session
    away from the inline backend: every later plot showed nothing, and the figures came out
    in a later cell that chose inline again (found by an outside agent tester)."""

    def pngs(run: Run) -> int:
        return sum("image/png" in m["content"]["data"] for m in run.of_type("display_data"))

    first = await kernel.run(
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3]); plt.savefig('agg.png'); print('saved')"
    )
    assert first.stdout == "saved\n" and pngs(first) == 1
    assert (kernel.home / "agg.png").stat().st_size > 0
    for code in (
        "plt.figure(); plt.plot([3, 2, 1]); plt.show()",
        "plt.switch_backend('agg'); plt.figure(); plt.plot([1]); plt.show()",
        "matplotlib.use('svg', force=True); plt.figure(); plt.plot([2]); plt.show()",
    ):
        assert pngs(await kernel.run(code)) == 1, code
    # One figure per cell: none held back for a later one.
    later = await kernel.run("%matplotlib inline\nplt.figure(); plt.plot([0]); plt.show()")
    assert pngs(later) == 1
    assert "inline" in (await kernel.run("print(matplotlib.get_backend())")).stdout


async def test_implicit_figure_at_cell_end_is_captured(kernel: Kernel) -> None:
    run = await kernel.run("import matplotlib.pyplot as plt\nplt.hist([1, 2, 2, 3, 3, 3], bins=3)")
    [display] = run.of_type("display_data")
    chart = display["content"]["data"][CHART_MIME]
    [axes] = chart["axes"]
    assert axes["kind"] == "hist"
    assert axes["series"][0]["counts"] == [1, 2, 3]


@pytest.mark.parametrize(
    "code", ["input('name? ')", "import getpass\ngetpass.getpass()"], ids=["input", "getpass"]
)
async def test_interactive_input_fails_at_once(kernel: Kernel, code: str) -> None:
    started = time.monotonic()
    run = await kernel.run(code, limit_s=10)
    assert time.monotonic() - started < 5
    assert run.reply["content"]["status"] == "error"
    assert run.error["ename"] == "StdinNotImplementedError"
    assert run.error["evalue"] == INPUT_NOT_SUPPORTED
    # The traceback ends at the cell's call, as for a built-in that fails; it ended in a
    # frame of the kernel's own module (interpreter_kernel/kernel.py, in raw_input).
    frames = [line for line in run.error["traceback"] if line.lstrip().startswith(("Cell", "File"))]
    assert len(frames) == 1 and frames[0].startswith("Cell In["), run.error["traceback"]
    assert "interpreter_kernel" not in "".join(run.error["traceback"])
    assert run.reply["content"]["ename"] == "StdinNotImplementedError"


async def test_stdin_reads_are_empty_not_blocking(kernel: Kernel) -> None:
    code = (
        "import sys, subprocess\n"
        "print(repr(sys.stdin.read()))\n"
        "print(subprocess.run(['cat'], capture_output=True, timeout=5).returncode)\n"
    )
    run = await kernel.run(code, limit_s=15)
    assert run.stdout.split() == ["''", "0"]


@pytest.mark.parametrize(
    "code",
    ["1 / 0", "def f(:\n    pass", "import json\njson.loads('{bad')"],
    ids=["runtime", "syntax", "library"],
)
async def test_tracebacks_have_no_ansi_codes(kernel: Kernel, code: str) -> None:
    run = await kernel.run(code)
    error = run.error
    assert error["traceback"], error
    for text in [*error["traceback"], error["evalue"]]:
        assert "\x1b[" not in text


async def test_planted_startup_files_never_run(kernel: Kernel) -> None:
    run = await kernel.run(
        "import os\nprint('planted' in globals())\nprint(os.environ['IPYTHONDIR'])"
    )
    planted, ipython_dir = run.stdout.split()
    assert planted == "False"
    assert not kernel.marker.exists()
    # IPython works from a directory of its own, not the one the environment named.
    assert Path(ipython_dir) != kernel.home / ".ipython"
    assert not Path(ipython_dir).is_relative_to(kernel.home)


#: Asked as a new kernel's first cell: did the warm-up run, and did it leave a trace?
FIRST_CELL_FINDS = """\
import json, linecache
from interpreter_kernel.warmup import WARM_UP_CELL
print(json.dumps({
    "warmed": any(e[2] == [WARM_UP_CELL + "\\n"] for e in linecache.cache.values()),
    "inputs": len(In),
    "outputs": len(Out),
    "last_value": repr(globals().get("_")),
}))
"""


async def test_a_new_kernel_is_warmed_up_before_its_first_cell_without_a_trace(
    tmp_path: Path,
) -> None:
    """The kernel does IPython's first-cell work while it starts (its silent cell is in
    IPython's cell cache), so a claimed warm kernel's first cell does not wait for it
    (issue 10; ``tests/unit/test_kernel_warmup.py``), and nothing of it is visible: the
    first cell is still number 1 and the first input, and no value came before it."""
    async with start_kernel(tmp_path, {}) as kernel:
        run = await kernel.run(FIRST_CELL_FINDS)
    assert run.reply["content"]["status"] == "ok", run.messages
    assert run.reply["content"]["execution_count"] == 1
    assert json.loads(run.stdout) == {
        "warmed": True,
        "inputs": 2,  # IPython's empty entry 0, then this cell
        "outputs": 0,
        "last_value": "''",
    }


async def test_the_kernel_starts_without_the_debugger_no_kernelspec_offers(
    kernel: Kernel,
) -> None:
    """ipykernel imports debugpy while it makes the kernel whenever it is installed (about
    120 ms of each start and 8 MB of memory); neither kernelspec offers a debugger."""
    for name in ("python3", "python3-docker"):
        spec = json.loads((REPO / "kernels" / name / "kernel.json").read_text())
        assert spec["metadata"]["debugger"] is False
    info = await kernel.client.kernel_info(reply=True, timeout=30)
    assert "debugger" not in info["content"]["supported_features"]
    loaded = await kernel.run(
        "import sys\n"
        "print(sorted(m for m in sys.modules if m.partition('.')[0] in"
        " ('debugpy', 'pydevd', '_pydevd_bundle', '_pydev_bundle')))"
    )
    assert loaded.stdout.strip() == "[]"
    # Hidden only while the kernel was made: a cell can still import it.
    imported = await kernel.run("import debugpy\nprint(debugpy.__name__)")
    assert imported.reply["content"]["status"] == "ok", imported.messages
    assert imported.stdout.strip() == "debugpy"


async def test_iopub_flood_arrives_complete_and_in_order(kernel: Kernel) -> None:
    run = await kernel.run("for i in range(10_000):\n    print(i, flush=True)", limit_s=120)
    assert run.reply["content"]["status"] == "ok"
    assert run.stdout.split() == [str(i) for i in range(10_000)]
    assert run.messages[-1]["content"]["execution_state"] == "idle"


#: A flood that a reader which stops reading must hold up: 200 blocks of 1 MiB of stdout.
FLOOD_BLOCKS = 200
BLOCK_CHARS = 1 << 20


def flood_code(how: str) -> str:
    """Code printing :data:`FLOOD_BLOCKS` numbered blocks, noting in the file ``progress``
    the block it is on (``done`` at the end). ``flushed``: each block is one write and a
    flush; ``unflushed``: each is 1,024 ``print`` calls of 1 KiB and no flush at all."""
    if how == "flushed":
        write = f"    sys.stdout.write(f'{{i:06d}}' + '.' * {BLOCK_CHARS - 7} + '\\n')\n"
        write += "    sys.stdout.flush()\n"
    else:
        write = "    for j in range(1024):\n"
        write += "        print(f'{i:06d}{j:04d}' + '.' * 1012)\n"
    return (
        "import pathlib, sys\n"
        "progress = pathlib.Path('progress')\n"
        f"for i in range({FLOOD_BLOCKS}):\n"
        "    progress.write_text(str(i))\n" + write + "progress.write_text('done')\n"
    )


def read_progress(progress: Path) -> str:
    return progress.read_text() if progress.exists() else ""


async def until_held(progress: Path) -> str:
    """The flood's progress once it has stopped moving for 3 s (or reached its end)."""
    last, still_since = "", time.monotonic()
    async with asyncio.timeout(120):
        while True:
            now = await asyncio.to_thread(read_progress, progress)
            if now == "done":
                return now
            if now != last:
                last, still_since = now, time.monotonic()
            elif now and time.monotonic() - still_since >= 3:
                return now
            await asyncio.sleep(0.1)


def flood_line(how: str, n: int) -> str:
    """Line ``n`` of :func:`flood_code`, without its newline."""
    if how == "flushed":
        return f"{n:06d}" + "." * (BLOCK_CHARS - 7)
    return f"{n // 1024:06d}{n % 1024:04d}" + "." * 1012


@pytest.mark.parametrize("how", ["flushed", "unflushed"])
@pytest.mark.parametrize("then", ["read", "interrupt"])
async def test_a_reader_that_stops_holds_the_flood_up_and_loses_nothing(
    tmp_path: Path, how: str, then: str
) -> None:
    """A subscriber that stops reading holds a flood up in the kernel, which then neither
    drops a message nor keeps what was not read in its memory; reading again lets the cell
    go on, and an interrupt ends it while held.

    Before the kernel waited for its reader, its send queue had no limit: here all 200 MiB
    were queued in the kernel (``progress`` read ``done``), and in a container with a memory
    limit the kernel was killed. With ipykernel's stock mark (1000 messages) part of the
    output, often the final ``idle``, was dropped instead.
    """
    # The kernel's only subscriber holds 10 messages (a reader with no limit would take
    # the whole flood into this process and hold nothing up).
    async with start_kernel(tmp_path, {}, receive_queue=10) as kernel:
        client = kernel.client
        progress = kernel.home / "progress"
        msg_id = client.execute(flood_code(how), stop_on_error=False)
        held = await until_held(progress)
        # Held well before its end: 16 messages wait in the kernel's queue, 10 in the
        # client's, a few more in the socket buffers between them.
        assert held != "done" and int(held) < FLOOD_BLOCKS // 2, held
        if then == "interrupt":
            assert await send_interrupt(client)
        text: list[str] = []
        async with asyncio.timeout(120):
            async for msg in until_idle(client, msg_id):
                if msg["msg_type"] == "stream":
                    assert msg["content"]["name"] == "stdout"
                    text.append(msg["content"]["text"])
            reply = await client.get_shell_msg()
            while reply["parent_header"].get("msg_id") != msg_id:
                reply = await client.get_shell_msg()
        *lines, tail = "".join(text).split("\n")
        # In order, none missing, none cut.
        assert lines == [flood_line(how, n) for n in range(len(lines))]
        if then == "read":
            assert reply["content"]["status"] == "ok"
            assert (len(lines), tail) == (FLOOD_BLOCKS * (1 if how == "flushed" else 1024), "")
            assert await asyncio.to_thread(read_progress, progress) == "done"
        else:
            assert reply["content"]["ename"] == "KeyboardInterrupt"
            assert flood_line(how, len(lines)).startswith(tail)
            assert await asyncio.to_thread(read_progress, progress) != "done"


DISPLAYS = 200
DISPLAY_FLOOD = """
import pathlib, threading
from IPython.display import display
progress = pathlib.Path('progress')
def flood():
    for i in range({count}):
        progress.write_text(str(i))
        display({{'text/plain': f'{{i:04d}}' + 'x' * 500_000}}, raw=True)
    progress.write_text('done')
{run}
"""


@contextlib.asynccontextmanager
async def held_flood(
    root: Path, template: str, count: int, where: str
) -> AsyncIterator[tuple[Kernel, str]]:
    """A kernel whose only reader holds 10 messages, running ``template``'s ``flood()`` of
    ``count`` items in the main thread or another one (``where``), once the flood is held
    well before half of it: the kernel and the request's id."""
    run = (
        "flood()" if where == "main" else "t = threading.Thread(target=flood); t.start(); t.join()"
    )
    async with start_kernel(root, {}, receive_queue=10) as kernel:
        msg_id = kernel.client.execute(template.format(count=count, run=run))
        held = await until_held(kernel.home / "progress")
        assert held != "done" and int(held) < count // 2, held
        yield kernel, msg_id


@pytest.mark.parametrize("where", ["main", "thread"])
async def test_a_reader_that_stops_holds_displays_up_too(tmp_path: Path, where: str) -> None:
    """Displays wait for a reader that stops as text does (each display flushes the
    streams first, and that flush waits for the IOPub thread), from the main thread and
    from another one; none is lost."""
    async with held_flood(tmp_path, DISPLAY_FLOOD, DISPLAYS, where) as (kernel, msg_id):
        client = kernel.client
        shown: list[str] = []
        async with asyncio.timeout(120):
            async for msg in until_idle(client, msg_id):
                if msg["msg_type"] == "display_data":
                    shown.append(msg["content"]["data"]["text/plain"])
        assert shown == [f"{i:04d}" + "x" * 500_000 for i in range(DISPLAYS)]


COMMS = 2_000
COMM_FLOOD = """
import pathlib, threading
from comm import create_comm
progress = pathlib.Path('progress')
channel = create_comm(target_name='flood')
def flood():
    for i in range({count}):
        if i % 20 == 0:
            progress.write_text(str(i))
        channel.send({{'n': i, 'pad': 'x' * 20_000}})
    progress.write_text('done')
{run}
"""


@pytest.mark.parametrize(
    ("where", "then"), [("main", "read"), ("thread", "read"), ("main", "interrupt")]
)
async def test_a_reader_that_stops_holds_comm_messages_up_too(
    tmp_path: Path, where: str, then: str
) -> None:
    """Comm messages (a widget's updates) wait for a reader that stops, as output does,
    from the main thread and from another one; none is lost, and an interrupt ends the
    cell while held. They used to be queued for the IOPub thread without a bound: here all
    2,000 (40 MB) were queued (``progress`` read ``done`` while nothing was read), and a
    loop setting a slider's value 300,000 times grew the kernel by 166 MB."""
    async with held_flood(tmp_path, COMM_FLOOD, COMMS, where) as (kernel, msg_id):
        client = kernel.client
        if then == "interrupt":
            assert await send_interrupt(client)
        sent: list[int] = []
        async with asyncio.timeout(120):
            async for msg in until_idle(client, msg_id):
                if msg["msg_type"] == "comm_msg":
                    sent.append(msg["content"]["data"]["n"])
            reply = await client.get_shell_msg()
            while reply["parent_header"].get("msg_id") != msg_id:
                reply = await client.get_shell_msg()
        if then == "read":
            assert reply["content"]["status"] == "ok"
            assert sent == list(range(COMMS))
        else:
            assert reply["content"]["ename"] == "KeyboardInterrupt"
            assert sent == list(range(len(sent))) and len(sent) < COMMS


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


async def test_the_kernel_keeps_no_copy_of_what_its_cells_printed(kernel: Kernel) -> None:
    """100 MiB printed leave the kernel no larger: IPython 9's history kept every string a
    cell wrote for the kernel's lifetime (``HistoryManager.outputs``), so the kernel grew by
    all it had printed (measured: 50 MB before, 150 MB after this cell), and a loop that
    printed without end had its container killed for memory however fast the output was read.
    """
    pid = kernel.manager.provisioner.pid
    await kernel.run("import sys\nfor i in range(3):\n    sys.stdout.write('w' * (1 << 20))")
    before = await asyncio.to_thread(rss_mb, pid)
    run = await kernel.run(
        "import sys\nfor i in range(100):\n    sys.stdout.write(str(i) + 'x' * (1 << 20))\n"
        "    sys.stdout.flush()",
        limit_s=120,
    )
    assert len(run.stdout) > 100 << 20
    after = await asyncio.to_thread(rss_mb, pid)
    assert after - before < 40, (before, after)
    await kernel.run("1 / 0")
    await kernel.run("'a result, whose text IPython kept as well'")
    run = await kernel.run(
        "history = get_ipython().history_manager\n"
        "print(len(history.outputs), len(history.exceptions), len(history.output_hist_reprs))"
    )
    assert run.stdout == "0 0 0\n"


async def test_safe_path_keeps_workspace_modules_importable_but_not_shadowing(
    tmp_path: Path,
) -> None:
    """Under ``python -P`` the workspace goes last on ``sys.path``.

    Its own modules import, while a planted ``pandas.py`` cannot replace the real pandas
    (nor, with ``-m``, the kernel's own packages).
    """
    home = tmp_path / "home"
    home.mkdir()
    (home / "helpers.py").write_text("ANSWER = 42\n")
    (home / "pandas.py").write_text("raise SystemExit('planted pandas imported')\n")
    async with start_kernel(tmp_path, {"PYTHONSAFEPATH": "1"}) as safe_kernel:
        run = await safe_kernel.run(
            "import sys, os, helpers, pandas\n"
            "print(helpers.ANSWER, hasattr(pandas, 'DataFrame'), sys.path[-1] == os.getcwd())"
        )
    assert run.stdout.split() == ["42", "True", "True"]


async def ipython_dir_and_pid(kernel: Kernel) -> tuple[Path, int]:
    run = await kernel.run("import os\nprint(os.environ['IPYTHONDIR'], os.getpid())")
    path, pid = run.stdout.split()
    return Path(path), int(pid)


async def wait_until_dead(kernel: Kernel) -> int:
    """Wait for the kernel process to end; return its Popen return code."""
    code: int = await asyncio.to_thread(kernel.manager.provisioner.process.wait, 20)
    return code


async def shut_down_gracefully(kernel: Kernel) -> int:
    """Ask the kernel to shut down, as a Jupyter client does (with the interrupt that
    jupyter_client sends first), and wait for it to end; its return code. With
    jupyter_client's default grace (5 s), a kernel that has not ended after half of it
    gets SIGTERM: its code is then ``-SIGTERM``. A kernel ends about 0.1 s after the
    request."""
    process = kernel.manager.provisioner.process
    kernel.manager.shutdown_wait_time = 5.0  # jupyter_client's default, as clients use it
    await kernel.manager.interrupt_kernel()
    await kernel.manager.request_shutdown()
    stacks = asyncio.create_task(stacks_if_alive(process, after_s=2.0))
    try:
        await kernel.manager.finish_shutdown()
    finally:
        stacks.cancel()
    code: int = await asyncio.to_thread(process.wait, 20)
    return code


async def stacks_if_alive(process: subprocess.Popen[bytes], after_s: float) -> None:
    """Have a kernel that has not ended ``after_s`` after its shutdown request (the client
    sends SIGTERM at 2.5 s) write its threads' stacks to its stderr: a failure's captured
    output then shows where it waited. Changes nothing else."""
    await asyncio.sleep(after_s)
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, STACKS_SIGNAL)


async def test_graceful_shutdowns_end_the_kernel_by_itself(tmp_path: Path) -> None:
    """Each of five kernels asked to shut down ends by itself (exit code 0). ipykernel 7
    stopped the IOPub thread while the control thread still flushed through it after
    answering: 4 shutdowns in 10 hung until the client's SIGTERM. Five at once make that
    race all but certain to show (interpreter_kernel/app.py, ``start``)."""
    async with contextlib.AsyncExitStack() as stack:
        kernels = await asyncio.gather(
            *(stack.enter_async_context(start_kernel(tmp_path / str(i), {})) for i in range(5))
        )
        for k in kernels:
            await k.run("print('ready')")
        codes = await asyncio.gather(*(shut_down_gracefully(k) for k in kernels))
    assert codes == [0] * 5


async def test_a_kernel_asked_for_its_stacks_writes_them_and_runs_on(tmp_path: Path) -> None:
    """SIGUSR1 has the kernel write every thread's stack to its stderr (the kernel log),
    for a kernel that hangs; it goes on running (the signal's default would end it)."""
    log = tmp_path / "kernel.log"
    with log.open("w") as stderr:
        async with start_kernel(tmp_path, {}, stderr=stderr) as kernel:
            pid = (await ipython_dir_and_pid(kernel))[1]
            os.kill(pid, STACKS_SIGNAL)
            deadline = time.monotonic() + 30
            while "interpreter_kernel/app.py" not in log.read_text():
                assert time.monotonic() < deadline, log.read_text()
                await asyncio.sleep(0.05)
            assert (await kernel.run("print(6 * 7)")).stdout == "42\n"
    text = log.read_text()
    assert text.count("Thread 0x") >= 3, text  # the main thread and ipykernel's
    assert "interpreter_kernel/app.py" in text, text


async def test_private_ipython_dir_removed_on_shutdown_and_sigterm(tmp_path: Path) -> None:
    async with start_kernel(tmp_path / "a", {}) as graceful:
        path, pid = await ipython_dir_and_pid(graceful)
        assert path.name.startswith(f"{PREFIX}{pid}-") and path.is_dir()
        assert await shut_down_gracefully(graceful) == 0  # by itself, not by SIGTERM
        assert not path.exists()

    async with start_kernel(tmp_path / "b", {}) as terminated:
        path, pid = await ipython_dir_and_pid(terminated)
        os.kill(pid, signal.SIGTERM)
        # Still reported as death by SIGTERM: the handler only cleans up first.
        assert await wait_until_dead(terminated) == -signal.SIGTERM
        assert not path.exists()


async def test_killed_kernels_directory_is_swept_later(tmp_path: Path) -> None:
    async with start_kernel(tmp_path, {}) as killed:
        path, pid = await ipython_dir_and_pid(killed)
        os.kill(pid, signal.SIGKILL)
        assert await wait_until_dead(killed) == -signal.SIGKILL
        assert path.is_dir()  # nobody could clean up
        # What the next kernel does when it starts.
        assert path in remove_stale(path.parent)
        assert not path.exists()
