"""The Tools tab: tool definitions typed as JSON (with examples), checked as they are typed, and tool_choice."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground.client import tools_panel
from playground.page.capabilities import capabilities
from playground.page.i18n import labels, say, t
from playground.page.session import Session

# The labels this module shows, translated in the browser (playground/page/i18n.py `t`).
TEXTS = labels(
    __name__,
    {
        "tab_tools": ("⚒ Tools", "⚒ 工具"),
        "example": ("insert an example", "插入示例"),
        "tools_json": ("tools (JSON array)", "工具定义（JSON 数组）"),
    },
)


@dataclass(eq=False)
class ToolsTab:
    note: gr.Markdown
    example: gr.Dropdown
    code: gr.Code
    check: gr.Markdown
    choice: gr.Dropdown


def tools_tab(session: gr.State | None = None, get_service: Callable[[Session], Any] | None = None) -> ToolsTab:
    """The Tools tab; with the page's `session` and `get_service` (the service a session talks to), the JSON check
    speaks the session's language and says first when the model cannot call tools at all."""
    note = gr.Markdown("", elem_id="pg-tools-note")
    example = gr.Dropdown(list(tools_panel.EXAMPLES), label=t("example"), value=None, elem_id="pg-tool-example")
    code = gr.Code("", language="json", label=t("tools_json"), lines=12, elem_id="pg-tools")
    check = gr.Markdown("", elem_id="pg-tools-check")
    choice = gr.Dropdown(list(tools_panel.FIXED_CHOICES), value="auto", label="tool_choice", allow_custom_value=False)
    example.change(
        lambda name: tools_panel.dumps(tools_panel.EXAMPLES[name]) if name else gr.skip(),
        example,
        code,
        api_name=False,  # type: ignore[arg-type]
    )
    if session is None:
        code.change(tools_changed, [code, choice], [check, choice], api_name=False)  # type: ignore[arg-type]
    else:
        code.change(session_tools_check(get_service), [code, choice, session], [check, choice], api_name=False)  # type: ignore[arg-type]
    return ToolsTab(note, example, code, check, choice)


def session_tools_check(get_service: Callable[[Session], Any] | None) -> Callable[..., tuple[str, Any]]:
    """tools_changed in the session's language, naming the embedded model when it has no tool-call format (a
    remote backend's server decides for itself)."""

    def changed(text: str, current: str | None, session: Session) -> tuple[str, Any]:
        service = None if session.remote or get_service is None else get_service(session)
        cannot = service is not None and not capabilities(service)["tools"]
        unable = service.served_name if service is not None and cannot else None
        return tools_changed(text, current, session.lang, unable)

    return changed


def tools_changed(text: str, current: str | None, lang: str = "en", cannot: str | None = None) -> tuple[str, Any]:
    """The tools JSON checked as it is typed, and tool_choice's options: auto, none, required and each tool.
    `cannot`: the name of a model without a tool-call format, which the message then says first."""
    tools, problem = tools_panel.parse_tools(text, lang)
    options = tools_panel.choice_options(tools)
    value = current if current in options else "auto"
    if problem:
        message = f"⚠️ {problem}"
    elif not tools:
        message = say(("No tools.", "没有工具。"), lang)
    elif cannot:
        message = say(
            (
                "⚠️ {name} cannot call tools: a message sent with them is refused. The JSON itself is fine: "
                "{n} tool(s) valid.",
                "⚠️ {name} 不能调用工具：带这些工具发送的消息会被拒收。JSON 本身没有问题：{n} 个工具有效。",
            ),
            lang,
            name=cannot,
            n=len(tools),
        )
    else:
        message = say(("✓ {n} tool(s) valid", "✓ {n} 个工具有效"), lang, n=len(tools))
    return message, gr.update(choices=options, value=value)
