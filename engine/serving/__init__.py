"""The chat service: one request policy and one stream for every entry point (API, page, notebooks).

`ChatService.run(request, context)` admits, limits, moderates, times out, counts and logs; `stream()` renders the
prompt, starts the generation and yields chunks; `complete()` is the fold of that stream. Imports engine/protocol
and the engine below it, never engine/http, FastAPI or Gradio.
"""
