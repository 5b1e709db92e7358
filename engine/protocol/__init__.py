"""The contract as pydantic models (spec §2-§6): requests, messages, tools, responses and errors.

The bottom of the serving stack: imports only pydantic and engine/parsers, never engine/serving, engine/http or
the engine core, so a client (the page, a notebook, a test) can build and read these without loading a model.
"""
