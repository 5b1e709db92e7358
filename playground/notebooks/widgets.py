"""ipywidgets front ends: a streaming chat panel and a parameter explorer.

Both run their requests as tasks on the kernel's event loop (Jupyter runs cells and widget callbacks on it), so
replies stream into the page while the notebook stays responsive. `send()` / `set()` return those tasks: a cell
can `await` them, which is also how the notebooks run them top to bottom in CI.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import ipywidgets as w

from engine.protocol.errors import ApiError
from playground.client.heatmap import heatmap_html
from playground.client.result import ChatResult, text_html
from playground.notebooks.backend import ChatBackend, Messages, as_messages

STREAM_PARAMS = {"temperature": 0.7, "max_tokens": 128}


def spawn(coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
    return asyncio.get_running_loop().create_task(coro)


class ReplyBox:
    """One assistant turn: reasoning apart (collapsed), the streaming reply, then its stats."""

    def __init__(self) -> None:
        self.reasoning = w.HTML()
        self.fold = w.Accordion(children=[self.reasoning], titles=("reasoning",), layout={"display": "none"})
        self.content = w.HTML()
        self.stats = w.HTML()
        self.widget = w.VBox([self.fold, self.content, self.stats])

    def render(self, result: ChatResult, final: bool = False) -> None:
        if result.reasoning is not None:
            self.fold.layout.display = None
            self.reasoning.value = text_html(result.reasoning)
        text = result.reply + ("" if final else " ▍")
        if result.view.error:
            text += f"\n\n⚠️ {result.view.error}"
        self.content.value = text_html(text)
        if final:
            self.stats.value = result.stats_html()


class ChatPanel:
    """A multi-turn chat: text box, Send, Stop, Clear. `params` are the request fields sent with every turn."""

    def __init__(self, backend: ChatBackend, system: str = "", **params: Any) -> None:
        self.backend = backend
        self.system = system
        self.params = {**STREAM_PARAMS, **params}
        self.history: list[dict[str, Any]] = []
        self.results: list[ChatResult] = []
        self.box = w.Textarea(placeholder="Type a message, then Send", layout={"width": "100%"})
        self.send_button = w.Button(description="Send", button_style="primary")
        self.stop_button = w.Button(description="Stop")
        self.clear_button = w.Button(description="Clear")
        self.turns = w.VBox()
        self.widget = w.VBox([self.turns, self.box, w.HBox([self.send_button, self.stop_button, self.clear_button])])
        self.task: asyncio.Task | None = None
        self.send_button.on_click(lambda _: self.send(self.box.value))
        self.stop_button.on_click(lambda _: self.stop())
        self.clear_button.on_click(lambda _: self.clear())

    def send(self, text: str) -> asyncio.Task:
        """Start one turn; the returned task resolves to its ChatResult."""
        self.stop()
        self.box.value = ""
        self.task = spawn(self._turn(text))
        return self.task

    def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()  # cancelling the stream aborts the request in the engine

    def clear(self) -> None:
        self.stop()
        self.history, self.results, self.turns.children = [], [], ()

    async def _turn(self, text: str) -> ChatResult:
        self.history.append({"role": "user", "content": text})
        reply = ReplyBox()
        self.turns.children = (*self.turns.children, w.HTML(f"<b>you</b>{text_html(text)}"), reply.widget)
        messages = ([{"role": "system", "content": self.system}] if self.system.strip() else []) + self.history
        result = ChatResult.of(self.backend)
        self.results.append(result)
        try:
            async for chunk in self.backend.stream(self.backend.request(messages, **self.params)):
                if result.add(chunk):
                    reply.render(result)
        except ApiError as exc:
            result.view.error = exc.message
        except asyncio.CancelledError:
            result.view.error = "stopped"
            raise
        finally:
            reply.render(result, final=True)
            if result.reply:
                self.history.append({"role": "assistant", "content": result.reply})
        return result


# Each control one fixed width, its label in a fixed column: beside a long reply a flex row would otherwise squeeze
# the sliders down to truncated labels with no track and no value (issue 30). continuous_update=False: a drag
# re-runs once, on release, not on every pixel.
CONTROL_LAYOUT = {"width": "440px"}
CONTROL_STYLE = {"description_width": "150px"}
CONTROLS: dict[str, Any] = {
    "temperature": lambda: w.FloatSlider(value=0.7, min=0.0, max=2.0, step=0.05),
    "top_p": lambda: w.FloatSlider(value=1.0, min=0.01, max=1.0, step=0.01),
    "top_k": lambda: w.IntSlider(value=0, min=0, max=200),
    "min_p": lambda: w.FloatSlider(value=0.0, min=0.0, max=1.0, step=0.01),
    "repetition_penalty": lambda: w.FloatSlider(value=1.0, min=0.1, max=2.0, step=0.05),
    "presence_penalty": lambda: w.FloatSlider(value=0.0, min=-2.0, max=2.0, step=0.1),
    "frequency_penalty": lambda: w.FloatSlider(value=0.0, min=-2.0, max=2.0, step=0.1),
    "max_tokens": lambda: w.IntSlider(value=64, min=1, max=512),
    "seed": lambda: w.IntText(value=0),
    "stop": lambda: w.Text(value="", placeholder="stop string (empty = none)"),
}


class ParameterExplorer:
    """Sliders for the sampling fields of the spec; every change re-runs the request with the fixed seed and shows
    the reply as a probability heatmap with its stats. `fixed` overrides a control's start value.

    A run starts only when the request would differ from the last one: a browser reports back a value the kernel
    set (a slider snapped to its step sends 0.9000000000000001 for 0.9), and that echo must not start a run that
    cancels the one a cell awaits (issue 30). `task` always resolves to the newest run's result: a run superseded
    by a newer setting stops its request, and whoever awaited it gets the newer one's result instead."""

    def __init__(self, backend: ChatBackend, messages: Messages, top_logprobs: int = 3, **fixed: Any) -> None:
        self.backend = backend
        self.messages = as_messages(messages)
        self.top_logprobs = top_logprobs
        self.controls = {name: make() for name, make in CONTROLS.items()}
        for name, control in self.controls.items():
            control.description = name
            control.layout = w.Layout(**CONTROL_LAYOUT)
            control.style = CONTROL_STYLE
            if isinstance(control, w.FloatSlider | w.IntSlider):
                control.continuous_update = False
            if name in fixed:
                control.value = fixed.pop(name)
            control.observe(self._changed, names="value")
        self.fixed = fixed
        self.status = w.HTML("run 0 · not run yet")
        self.status.add_class("pg-explorer-runs")
        self.heatmap = w.HTML()
        self.stats = w.HTML()
        column = w.VBox(list(self.controls.values()), layout={"flex": "0 0 auto"})
        output = w.VBox(
            [self.status, self.heatmap, self.stats],
            layout={"flex": "1 1 320px", "min_width": "0", "margin": "0 0 0 16px"},
        )
        self.widget = w.HBox([column, output], layout={"flex_flow": "row wrap", "align_items": "flex-start"})
        self.widget.add_class("pg-explorer")
        self.result: ChatResult | None = None
        self.task: asyncio.Task | None = None  # resolves to the newest run's result
        self.runs = 0  # runs started, shown in `status`
        self._run_task: asyncio.Task | None = None  # the newest run itself
        self._requested: dict[str, Any] | None = None  # what it asked for
        self._holding = False

    def values(self) -> dict[str, Any]:
        """The request fields the controls stand for (0 top_k and an empty stop mean "not set"; floats as the slider
        shows them, without the float noise of its steps)."""
        out = {name: round(c.value, 6) if isinstance(c.value, float) else c.value for name, c in self.controls.items()}
        out["top_k"] = out["top_k"] or None
        out["min_p"] = out["min_p"] or None
        out["stop"] = out["stop"] or None
        return out

    def set(self, **values: Any) -> asyncio.Task:
        """Move controls (one re-run for all of them); the returned task resolves to the new ChatResult."""
        self._holding = True
        try:
            for name, value in values.items():
                self.controls[name].value = value
        finally:
            self._holding = False
        return self.run()

    def run(self) -> asyncio.Task:
        """Re-run as the controls stand; the returned task resolves to the newest run's ChatResult."""
        if self._run_task is not None and not self._run_task.done():
            self._run_task.cancel()  # a newer setting supersedes the running request
        self.runs += 1
        self._requested = self.values()
        self._run_task = spawn(self._run(self.runs, self._requested))
        if self.task is None or self.task.done():
            self.task = spawn(self._newest())
            self.task.add_done_callback(self._stop_if_cancelled)
        return self.task

    def _stop_if_cancelled(self, task: asyncio.Task) -> None:
        if task.cancelled() and self._run_task is not None:
            self._run_task.cancel()  # also when it was cancelled before it began to await the run

    def _changed(self, _: Any) -> None:
        if not self._holding and self.values() != self._requested:
            self.run()

    async def _newest(self) -> ChatResult:
        while True:
            run = self._run_task
            assert run is not None
            try:
                return await run
            except asyncio.CancelledError:
                cancelling = getattr(asyncio.current_task(), "cancelling", None)  # Python 3.11+
                if run is self._run_task or (cancelling is not None and cancelling()):
                    raise  # cancelled itself (a Stop, a kernel interrupt), not superseded by a newer run
            # superseded: follow the newer run

    async def _run(self, number: int, values: dict[str, Any]) -> ChatResult:
        params = {**values, **self.fixed, "logprobs": True, "top_logprobs": self.top_logprobs}
        result = ChatResult.of(self.backend)
        self.status.value = f"run {number} · running"
        try:
            async for chunk in self.backend.stream(self.backend.request(self.messages, **params)):
                if result.add(chunk):
                    self.heatmap.value = heatmap_html(result.logprobs)
        except ApiError as exc:
            result.view.error = exc.message
        except asyncio.CancelledError:
            if self.runs == number:
                self.status.value = f"run {number} · stopped"
            raise
        self.heatmap.value = heatmap_html(result.logprobs)
        self.stats.value = result.stats_html() if not result.view.error else text_html(f"⚠️ {result.view.error}")
        self.status.value = f"run {number} · " + ("error" if result.view.error else "done")
        self.result = result
        return result
