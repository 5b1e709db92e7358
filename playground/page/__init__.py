"""The Gradio page: the Blocks app (ui.py), its layout, the chat and its conversation (with the codec and persistence),
i18n and the HTML renderers; tabs/ holds one module per side tab and static/ the page's CSS and JavaScript."""
