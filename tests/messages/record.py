"""Record real kernel message sequences for the translator's unit tests.

Run from the repository root: ``python -m tests.messages.record [SCENARIO ...]`` (all
scenarios when none is named). Each scenario's code runs in a fresh kernel (the project's
kernelspec); the iopub messages and the execute_reply whose parent is that request are
written to ``tests/messages/<scenario>.json``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager

from interpreter.kernelspecs import kernel_spec_manager

HERE = Path(__file__).parent

SCENARIOS = {
    "stream_interleaved": "import sys\nprint('a')\nprint('b', file=sys.stderr)\nprint('c')",
    "execute_result": "40 + 2",
    "error": "def f():\n    raise ValueError('bad value')\nf()",
    "clear_output_wait": (
        "from IPython.display import clear_output\n"
        "for i in range(3):\n    clear_output(wait=True)\n    print('tick', i)"
    ),
    "clear_output_now": (
        "from IPython.display import clear_output\nprint('gone')\nclear_output()\nprint('kept')"
    ),
    "update_display": (
        "from IPython.display import display\n"
        "h = display('v1', display_id=True)\nh.update('v2')\ndisplay('other')"
    ),
    "plot": (
        "import matplotlib.pyplot as plt\n"
        "plt.bar(['a', 'b'], [3, 5])\nplt.title('Bars')\nplt.show()"
    ),
    "unknown_magic": "%undefined-line-magic",
    "plot_then_error": "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n1/0",
    "retina_plot": (
        "%config InlineBackend.figure_formats = ['retina']\n"
        "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()"
    ),
    # Issue 13: progress bars and the outputs a model used to read as object reprs.
    "progress_cr": (
        "import sys\nfor i in range(5):\n    print(f'\\rstep {i + 1}/5', end='', flush=True)\n"
        "print()\nprint('done')"
    ),
    "tqdm_loop": (
        "from tqdm.auto import tqdm\nfor _ in tqdm(range(5), mininterval=0, desc='work'):\n    pass"
    ),
    "markdown": "from IPython.display import Markdown, display\ndisplay(Markdown('**x**'))",
    "html": (
        "from IPython.display import HTML, display\n"
        "display(HTML('<h3>Result</h3><ul><li>alpha &amp; beta</li><li>gamma</li></ul>'"
        "'<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr></table>'))"
    ),
    "styler": (
        "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [0.5, 1.5]}).style.highlight_max()"
    ),
    "plotly_bar": (
        "import plotly.express as px\n"
        "px.bar(x=['north', 'south', 'east', 'west'], y=[120, 95, 143, 80],"
        " title='Revenue', labels={'x': 'region', 'y': 'revenue'})"
    ),
    "seaborn_box": (
        "import seaborn as sns, pandas as pd, matplotlib.pyplot as plt\n"
        "df = pd.DataFrame({'g': ['a'] * 5 + ['b'] * 5, 'v': [1, 2, 3, 4, 10, 2, 3, 4, 5, 6]})\n"
        "sns.boxplot(data=df, x='g', y='v')\nplt.title('Spread')\nplt.show()"
    ),
}


def _plain(msg: dict[str, Any]) -> dict[str, Any]:
    keep = {k: msg[k] for k in ("header", "parent_header", "metadata", "content")}
    return json.loads(
        json.dumps(keep, default=lambda o: o.isoformat() if isinstance(o, datetime) else str(o))
    )


async def record(name: str, code: str) -> None:
    km = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=kernel_spec_manager())
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=60)
        msg_id = kc.execute(code, allow_stdin=False)
        iopub = []
        while True:
            msg = await kc.get_iopub_msg(timeout=30)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            iopub.append(_plain(msg))
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        reply = await kc.get_shell_msg(timeout=30)
        data = {"code": code, "msg_id": msg_id, "iopub": iopub, "reply": _plain(reply)}
        (HERE / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


async def main(names: list[str]) -> None:
    for name, code in SCENARIOS.items():
        if names and name not in names:
            continue
        await record(name, code)
        print("recorded", name)


if __name__ == "__main__":
    import sys

    asyncio.run(main(sys.argv[1:]))  # only the scenarios named, if any
