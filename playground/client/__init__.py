"""What the page, the notebooks, MCP and bench/ share, without Gradio or ipywidgets: the ChatBackend seam (embedded or
remote), the reply's fold and its statistics, the result object, request building, branches, the grid runner, the
cross-backend check and code snippets."""
