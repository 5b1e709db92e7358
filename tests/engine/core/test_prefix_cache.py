"""Prefix-cache hits give identical outputs and report exactly the reused tokens."""

from __future__ import annotations

import pytest

from engine.core.engine import Engine, EngineLimits
from engine.core.prefix_cache import BLOCK, PrefixCache
from engine.core.types import EngineRequest, SamplingParams
from tests.engine.core.test_engine import Collector, pool_tokens

SYSTEM = "You are a careful assistant who answers in one sentence. " * 12
GREEDY = SamplingParams(temperature=0, max_tokens=12)


@pytest.fixture
def cached_engine(service):
    core = service.engine
    e = Engine(
        core.runner.sibling(pool_tokens(EngineLimits())),
        core.tokenizer,
        set(core.eos_ids),
        EngineLimits(max_model_len=8192),
        prefix_cache=PrefixCache(4096),
    )
    e.start()
    yield e
    e.shutdown()


def ids(service, user: str) -> list[int]:
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
    return service.tokenizer.apply_chat_template(msgs, add_generation_prompt=True)["input_ids"]


def run(engine: Engine, prompt: list[int], params=GREEDY, salt: bytes = b"") -> tuple[str, int]:
    c = Collector()
    stats = engine.submit(EngineRequest("r", prompt, params, cache_salt=salt), c)
    assert c.done.wait(120) and not c.errors
    return "".join(d.text for d in c.deltas), stats.cached_tokens


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_hit_reuses_whole_blocks_and_output_is_identical(service, cached_engine) -> None:
    first = ids(service, "Name a colour.")
    text_cold, cached_cold = run(cached_engine, first)
    text_warm, cached_warm = run(cached_engine, first)
    assert cached_cold == 0
    assert cached_warm == (len(first) - 1) // BLOCK * BLOCK  # everything but the last, in whole blocks
    assert text_warm == text_cold


def test_shared_system_prompt_is_reused_by_another_question(service, cached_engine) -> None:
    a, b = ids(service, "Name a colour."), ids(service, "Name a fruit.")
    run(cached_engine, a)
    text_hit, cached = run(cached_engine, b, SamplingParams(temperature=0.8, seed=3, max_tokens=12))
    assert cached == common_prefix(a, b) // BLOCK * BLOCK > 0
    service_alone = Engine(
        cached_engine.runner.sibling(pool_tokens(EngineLimits())),
        cached_engine.tokenizer,
        set(cached_engine.eos_ids),
        EngineLimits(max_model_len=8192),
    )
    service_alone.start()
    try:
        text_cold, cached_cold = run(service_alone, b, SamplingParams(temperature=0.8, seed=3, max_tokens=12))
    finally:
        service_alone.shutdown()
    assert cached_cold == 0 and text_hit == text_cold  # seeded sampling too: same tokens with or without the hit


def test_different_salt_never_shares(service, cached_engine) -> None:
    prompt = ids(service, "Describe the picture.")
    run(cached_engine, prompt, salt=b"image-1")
    assert run(cached_engine, prompt, salt=b"image-2")[1] == 0
    assert run(cached_engine, prompt, salt=b"image-1")[1] > 0


def test_store_is_bounded_and_evicts_least_recently_used(service) -> None:
    import torch

    class Pages:  # a sequence's pages, as the runner would hand them over
        def read_page(self, cache, i):
            return torch.zeros(1, BLOCK, 1, 2), torch.zeros(1, BLOCK, 1, 2)

    cache = PrefixCache(2 * BLOCK)
    a, b = list(range(3 * BLOCK)), list(range(100, 100 + 3 * BLOCK))
    cache.store(a, None, Pages())
    assert cache.tokens == 2 * BLOCK
    cache.store(b, None, Pages())
    assert cache.tokens == 2 * BLOCK and cache.match(a + [0]) == []  # a's blocks were evicted
    assert len(cache.match(b + [0])) == 2
