"""A complete agent loop on the interpreter, with a scripted stand-in for the model.

The loop is the one you would write for a real model (Anthropic Messages format here):

1. send the conversation and the tool definitions to the model;
2. if the reply asks for tools, run each call with ``ToolExecutor`` and append the results;
3. repeat until the model answers without calling a tool.

``ScriptedModel`` replaces the network call so the example runs anywhere, with no keys and
no weights. It still *reads* the tool results: its first analysis uses a column name that
does not exist, the service returns the ``KeyError`` with its traceback, and the model
fixes the code from what the error says. That is the self-correction pattern the tool
descriptions ask for.

Run it against a service::

    interp serve &
    python examples/agent_loop.py --url http://127.0.0.1:8700

To use a real model, replace ``ScriptedModel.reply`` with a call to your model API, passing
``tool_definitions("anthropic")`` as its tools; nothing else changes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from typing import Any

from interpreter.client import Client
from interpreter.tools import ToolExecutor, tool_definitions

SALES_CSV = """month,region,amount
2024-01,north,120
2024-01,south,80
2024-02,north,135
2024-02,south,95
2024-03,north,150
2024-03,south,110
"""

TASK = "Here are monthly sales by region. Which region sold more in total, and by how much?"

Message = dict[str, Any]


def _tool_use(call_id: str, name: str, **arguments: Any) -> Message:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def _last_tool_result_text(messages: list[Message]) -> str:
    """The text of the most recent tool result in the conversation."""
    for message in reversed(messages):
        if message["role"] != "user" or isinstance(message["content"], str):
            continue
        for block in message["content"]:
            if block.get("type") == "tool_result":
                return "\n".join(
                    part["text"] for part in block["content"] if part.get("type") == "text"
                )
    return ""


class ScriptedModel:
    """Plays the model's part: a fixed plan, adapted to what the tools answered."""

    def __init__(self) -> None:
        self.turn = 0

    def reply(self, messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        """Return the next assistant message, given the conversation so far."""
        assert {t["name"] for t in tools} >= {"run_code", "upload_file"}
        self.turn += 1
        seen = _last_tool_result_text(messages)
        if self.turn == 1:
            return self._say(
                "I'll load the data and add up sales per region.",
                _tool_use("t1", "upload_file", path="sales.csv", content=SALES_CSV),
            )
        if self.turn == 2:
            # First attempt: assumes the column is called "revenue". It is not.
            return self._say(
                "Now the totals.",
                _tool_use(
                    "t2",
                    "run_code",
                    code="import pandas as pd\n"
                    "sales = pd.read_csv('sales.csv')\n"
                    "totals = sales.groupby('region')['revenue'].sum()\n"
                    "totals",
                ),
            )
        if self.turn == 3:
            if "KeyError" not in seen:
                raise RuntimeError(f"expected the first attempt to fail, got:\n{seen}")
            # Read the error, look at the real columns, and fix the code.
            return self._say(
                "The column 'revenue' does not exist (KeyError). Let me check the columns "
                "and use the right one.",
                _tool_use(
                    "t3",
                    "run_code",
                    code="print(list(sales.columns))\n"
                    "totals = sales.groupby('region')['amount'].sum()\n"
                    "import matplotlib.pyplot as plt\n"
                    "totals.plot(kind='bar', title='Sales by region')\n"
                    "plt.show()\n"
                    "totals",
                ),
            )
        if self.turn == 4:
            totals = dict(re.findall(r"^(north|south)\s+(\d+)$", seen, flags=re.MULTILINE))
            if len(totals) != 2:
                raise RuntimeError(f"could not read the totals from:\n{seen}")
            north, south = int(totals["north"]), int(totals["south"])
            leader, margin = (
                ("north", north - south) if north >= south else ("south", south - north)
            )
            return self._say(
                f"The {leader} region sold more: {north} (north) vs {south} "
                f"(south), a difference of {margin}."
            )
        raise RuntimeError("the script has no more turns")

    @staticmethod
    def _say(text: str, *tool_uses: Message) -> Message:
        return {"role": "assistant", "content": [{"type": "text", "text": text}, *tool_uses]}


class ShellFirstModel(ScriptedModel):
    """A model that first reaches for a shell command, as models often do.

    Against a service whose policy denies ``subprocess`` (README "Policies"), the run comes
    back ``status: denied`` with the rule's message; this model reads that message and
    rewrites the code with pandas instead. Without such a policy the first try just works.
    """

    TASK = "How many data rows does sales.csv have?"

    def reply(self, messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        self.turn += 1
        seen = _last_tool_result_text(messages)
        if self.turn == 1:
            return self._say(
                "I'll upload the file and count its lines.",
                _tool_use("s1", "upload_file", path="sales.csv", content=SALES_CSV),
            )
        if self.turn == 2:
            return self._say(
                "Counting with wc.",
                _tool_use(
                    "s2",
                    "run_code",
                    code="import subprocess\n"
                    "out = subprocess.run(['wc', '-l', 'sales.csv'], capture_output=True)\n"
                    "print('rows:', int(out.stdout.split()[0]) - 1)",
                ),
            )
        if self.turn == 3 and "status: denied" in seen:
            # The policy said what it allows instead: follow its message.
            hint = "pandas" if "pandas" in seen else "plain Python"
            return self._say(
                f"Subprocesses are not allowed here; the policy suggests {hint}. Rewriting.",
                _tool_use(
                    "s3",
                    "run_code",
                    code="import pandas as pd\nprint('rows:', len(pd.read_csv('sales.csv')))",
                ),
            )
        found = re.search(r"rows: (\d+)", seen)
        if found is None:
            raise RuntimeError(f"could not read the row count from:\n{seen}")
        return self._say(f"sales.csv has {found.group(1)} data rows.")


def run_agent(
    client: Client,
    task: str,
    model: ScriptedModel,
    *,
    max_turns: int = 10,
    log: Callable[[str], None] = print,
) -> tuple[str, list[Message]]:
    """Drive the model until it answers without tools; return the answer and the messages."""
    tools = tool_definitions("anthropic")
    executor = ToolExecutor(client)
    messages: list[Message] = [{"role": "user", "content": task}]
    try:
        for _ in range(max_turns):
            reply = model.reply(messages, tools)
            messages.append(reply)
            calls = [b for b in reply["content"] if b["type"] == "tool_use"]
            for block in reply["content"]:
                if block["type"] == "text":
                    log(f"assistant: {block['text']}")
            if not calls:
                answer = " ".join(b["text"] for b in reply["content"] if b["type"] == "text")
                return answer, messages
            results = []
            for call in calls:
                log(f"tool call: {call['name']} {json.dumps(call['input'])[:200]}")
                result = executor.execute(call)
                images = f" + {len(result.images)} image(s)" if result.images else ""
                log(
                    f"tool result{' (error)' if result.is_error else ''}{images}:\n"
                    + _indent(result.text)
                )
                results.append(result.to_anthropic())
            messages.append({"role": "user", "content": results})
        raise RuntimeError(f"no answer after {max_turns} turns")
    finally:
        executor.close()


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="Service URL (default $INTERP_URL or the local port).")
    parser.add_argument("--api-key", help="API key (default $INTERP_API_KEY).")
    parser.add_argument(
        "--shell-first",
        action="store_true",
        help="Play a model that tries a subprocess first (see ShellFirstModel).",
    )
    args = parser.parse_args(argv)
    model = ShellFirstModel() if args.shell_first else ScriptedModel()
    task = ShellFirstModel.TASK if args.shell_first else TASK
    with Client(args.url, api_key=args.api_key, timeout=60) as client:
        answer, _ = run_agent(client, task, model)
    print(f"\nfinal answer: {answer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
