"""Prometheus metrics of one app (its own CollectorRegistry, never the process-global one).

Counters and histograms are fed by the HTTP layer and the request policy (policy.py) as requests end; engine gauges (queue depth, running sequences,
KV and prefix-cache usage) are read from the engine at scrape time, so they can never drift from it.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from engine.protocol.response import ChatCompletionChunk
from engine.serving.admission import Admission

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56)


class Metrics:
    def __init__(self, get_service: Callable[[], Any], admission: Admission) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "playground_http_requests", "HTTP requests by route and status.", ["route", "status"], registry=r
        )
        self.chat_requests = Counter(
            "playground_chat_requests",
            "Chat requests by route (API path, page:/endpoint, notebook), entry point and "
            "status (the API's status code; 499: the caller left).",
            ["route", "entry", "status"],
            registry=r,
        )
        self.prompt_tokens = Counter(
            "playground_prompt_tokens", "Prompt tokens of finished chat requests.", ["route"], registry=r
        )
        self.completion_tokens = Counter(
            "playground_completion_tokens", "Generated tokens of chat requests.", ["route"], registry=r
        )
        self.ttft = Histogram(
            "playground_time_to_first_token_seconds",
            "From acceptance to the first token.",
            ["route"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "playground_inter_token_latency_seconds",
            "Between consecutive tokens of a choice.",
            ["route"],
            buckets=ITL_BUCKETS,
            registry=r,
        )
        r.register(_EngineCollector(get_service, admission))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def observe(self, chunks: AsyncIterable[ChatCompletionChunk], route: str) -> AsyncIterator[Any]:
        """Pass chunks through, recording TTFT, inter-token latencies and token counts from their timelines.
        `route` is the route's path template, the same label the request counter uses."""
        last: dict[int, float] = {}
        first = True
        async for chunk in chunks:
            if chunk.timeline is not None and chunk.choices:
                i = chunk.choices[0].index
                for t in chunk.timeline.token_times_ms:
                    if first:
                        self.ttft.labels(route).observe(max(0.0, t) / 1000)
                        first = False
                    if i in last:
                        self.itl.labels(route).observe(max(0.0, t - last[i]) / 1000)
                    last[i] = t
            if not chunk.choices and chunk.usage is not None:
                self.prompt_tokens.labels(route).inc(chunk.usage.prompt_tokens)
                self.completion_tokens.labels(route).inc(chunk.usage.completion_tokens)
            yield chunk


class _EngineCollector:
    """Gauges read from the engine (and the admission state) on every scrape."""

    def __init__(self, get_service: Callable[[], Any], admission: Admission) -> None:
        self.get_service = get_service
        self.admission = admission

    def describe(self) -> list[Metric]:
        return []  # values come only at scrape time (and nothing here may touch a service still loading)

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "playground_in_flight_requests",
            "Chat requests admitted and not yet answered.",
            value=self.admission.in_flight,
        )
        yield GaugeMetricFamily(
            "playground_draining",
            "1 while the server refuses new work before shutting down.",
            value=1 if self.admission.draining else 0,
        )
        svc = self.get_service()
        yield GaugeMetricFamily("playground_model_loaded", "1 once the model is loaded.", value=0 if svc is None else 1)
        if svc is None:
            return
        engine = svc.engine
        state = engine.snapshot()
        requests, kv, prefix = state["requests"], state["kv_cache"], state["prefix_cache"]
        yield GaugeMetricFamily(
            "playground_queue_depth", "Requests waiting for an engine slot.", value=requests["waiting"]
        )
        yield GaugeMetricFamily(
            "playground_running_requests", "Requests in the running batch.", value=requests["running"]
        )
        yield GaugeMetricFamily(
            "playground_running_sequences",
            "Sequences decoded together (n, beams included).",
            value=requests["running_seqs"],
        )
        yield GaugeMetricFamily(
            "playground_kv_cache_used_tokens", "KV-cache tokens reserved by running requests.", value=kv["tokens_used"]
        )
        yield GaugeMetricFamily(
            "playground_kv_cache_capacity_tokens", "KV-cache budget in tokens.", value=kv["tokens_capacity"]
        )
        if kv["pages_total"] is not None:  # a runner with a page pool (not the HF fallback)
            yield GaugeMetricFamily(
                "playground_kv_cache_used_pages", "KV pages held by running sequences.", value=kv["pages_used"]
            )
            yield GaugeMetricFamily(
                "playground_kv_cache_total_pages",
                f"KV pages in the pool ({kv['page_tokens']} tokens each).",
                value=kv["pages_total"],
            )
        if "window_pages_total" in kv:  # sliding-window layers (Gemma 3): their own pool, a window per sequence
            yield GaugeMetricFamily(
                "playground_kv_cache_window_used_pages",
                "Sliding-window layers' KV pages held by running sequences.",
                value=kv["window_pages_used"],
            )
            yield GaugeMetricFamily(
                "playground_kv_cache_window_total_pages",
                "Sliding-window layers' KV pages in their pool.",
                value=kv["window_pages_total"],
            )
        if state["threads"]:
            yield GaugeMetricFamily(
                "playground_engine_threads",
                "Threads the engine's steps run on now (fewer while other processes keep cores busy).",
                value=state["threads"],
            )
        cache = engine.prefix_cache
        if cache is not None:
            yield GaugeMetricFamily(
                "playground_prefix_cache_used_tokens",
                "Prompt-prefix tokens held for reuse.",
                value=prefix["blocks"] * prefix["block_tokens"],
            )
            yield GaugeMetricFamily(
                "playground_prefix_cache_capacity_tokens",
                "Prefix-cache budget in tokens.",
                value=prefix["capacity_blocks"] * prefix["block_tokens"],
            )
            usage = prefix["blocks"] / prefix["capacity_blocks"] if prefix["capacity_blocks"] else 0.0
            yield GaugeMetricFamily("playground_prefix_cache_usage_ratio", "Prefix-cache used / capacity.", value=usage)
            yield GaugeMetricFamily(
                "playground_prefix_cache_blocks",
                f"Prefix-cache blocks held ({prefix['block_tokens']} tokens each).",
                value=prefix["blocks"],
            )
            yield GaugeMetricFamily(
                "playground_prefix_cache_capacity_blocks",
                "Prefix-cache budget in blocks.",
                value=prefix["capacity_blocks"],
            )
            yield CounterMetricFamily(
                "playground_prefix_cache_hit_tokens", "Prompt tokens served from the cache.", value=prefix["hit_tokens"]
            )
            yield CounterMetricFamily(
                "playground_prefix_cache_query_tokens",
                "Prompt tokens looked up in the cache (hit rate: hit tokens / these).",
                value=prefix["query_tokens"],
            )
            yield CounterMetricFamily(
                "playground_prefix_cache_lookups", "Prompts looked up in the cache.", value=prefix["lookups"]
            )
            yield CounterMetricFamily(
                "playground_prefix_cache_hit_lookups",
                "Prompts that found at least one cached block.",
                value=prefix["hit_lookups"],
            )
            yield CounterMetricFamily(
                "playground_prefix_cache_resets", "Times the prefix cache was emptied.", value=prefix["resets"]
            )
