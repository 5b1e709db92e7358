"""The Stats tab: the selected reply's statistics, its engine timeline, and its tokens by probability with the
n>1 candidates; playground/page/ui.py wires what fills them."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from playground.page.i18n import labels, t

# The labels this module shows, translated in the browser (playground/page/i18n.py `t`).
TEXTS = labels(
    __name__,
    {
        "tab_stats": ("▥ Stats", "▥ 统计"),
        "tokens": ("◈ Tokens by probability · candidates", "◈ 按概率着色的 token · 候选"),
        "quality_go": ("⚖ Quality vs fp32", "⚖ 与 fp32 比较质量"),
        "no_reply_html": ('<div class="pg-empty">No reply yet.</div>', '<div class="pg-empty">还没有回复。</div>'),
    },
)


@dataclass(eq=False)
class StatsTab:
    stats: gr.HTML
    timeline: gr.HTML
    heat: gr.HTML
    cands: gr.HTML
    quality: gr.Button  # the quality meter of the selected reply (playground/page/quality_panel.py)
    quality_note: gr.HTML


def stats_tab() -> StatsTab:
    stats = gr.HTML(t("no_reply_html"), elem_id="pg-stats")
    plot = gr.HTML("", elem_id="pg-timeline")
    with gr.Row():
        quality = gr.Button(t("quality_go"), size="sm", elem_id="pg-quality-go", scale=0)
        quality_note = gr.HTML("", elem_id="pg-quality-note")
    with gr.Accordion(t("tokens"), open=True):
        heat = gr.HTML("", elem_id="pg-heat")
        cands = gr.HTML("", elem_id="pg-cands")
    return StatsTab(stats, plot, heat, cands, quality, quality_note)
