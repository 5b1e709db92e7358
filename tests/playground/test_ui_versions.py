"""Versions of a turn (edit, regenerate) and a conversation kept with every number of its replies: the model of
playground/page/conversation.py's Fork and playground/page/turn_codec.py / export.py, without a server."""

from __future__ import annotations

import json

from engine.protocol.response import LogprobEntry, PromptTokensDetails, TopLogprob, Usage
from playground.client.reply import ChoiceView, ReplyView
from playground.page import export, persist
from playground.page.conversation import Conversation, Turn, display, strip_marks

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)


def reply(text: str, tokens: int = 3, logprobs: bool = False) -> ReplyView:
    times = [10.0 * (i + 1) for i in range(tokens)]
    c = ChoiceView(
        0,
        content=text,
        token_ids=list(range(tokens)),
        times_ms=times,
        batch_sizes=[1] * tokens,
        queue_waits_us=[5] * tokens,
        prepare_ms=1.5,
        finish_reason="stop",
        answer_at=0,
        engine_timeline=True,
    )
    if logprobs:
        c.logprobs = [
            LogprobEntry(
                token=f"t{i}",
                logprob=-0.1,
                bytes=[116],
                top_logprobs=[TopLogprob(token="x", logprob=-2.0, bytes=[120])],
            )
            for i in range(tokens)
        ]
    usage = Usage(prompt_tokens=7, completion_tokens=tokens, prompt_tokens_details=PromptTokensDetails(cached_tokens=4))
    view = ReplyView(choices={0: c}, usage=usage, done=True)
    view.raw.extend(['{"id": "c"}'] * 3)
    c.usage = usage
    return view


def answered(text: str, answer: str) -> list[Turn]:
    return [Turn("user", text), Turn("assistant", reply=reply(answer), request={"model": "m", "messages": []})]


def regenerate(conv: Conversation, answer: str) -> None:
    at = conv.regenerate_at()
    assert at is not None
    conv.branch(at, "regenerate")
    conv.adopt(Turn("assistant", reply=reply(answer)))


def edit(conv: Conversation, at: int, text: str, answer: str) -> None:
    conv.branch(at, "edit")
    conv.adopt(Turn("user", text))
    conv.adopt(Turn("assistant", reply=reply(answer)))


def texts(conv: Conversation) -> list[str]:
    return [t.content or (t.reply.first.content if t.reply else "") for t in conv.turns]


def test_regenerate_keeps_the_old_reply_one_step_back() -> None:
    conv = Conversation(answered("q", "first"))
    regenerate(conv, "second")
    assert texts(conv) == ["q", "second"]
    assert conv.switch(1, -1) and texts(conv) == ["q", "first"]
    assert not conv.switch(1, -1)  # no version before the first
    assert conv.switch(1, +1) and texts(conv) == ["q", "second"] and not conv.switch(1, +1)
    assert conv.turns[1].fork is not None and conv.turns[1].fork.kinds == ["original", "regenerate"]


def test_an_edit_keeps_the_turns_that_followed_the_old_message() -> None:
    conv = Conversation(answered("a", "ra") + answered("b", "rb"))
    edit(conv, 0, "a2", "ra2")
    assert texts(conv) == ["a2", "ra2"]
    regenerate(conv, "ra3")  # a version inside the new version
    assert conv.switch(0, -1) and texts(conv) == ["a", "ra", "b", "rb"]  # everything that followed comes back
    assert conv.switch(0, +1) and texts(conv) == ["a2", "ra3"]  # with its own versions, as it was left
    assert conv.switch(1, -1) and texts(conv) == ["a2", "ra2"]


def test_the_marks_show_the_version_and_an_edit_strips_them() -> None:
    conv = Conversation(answered("q", "first"))
    regenerate(conv, "second")
    shown = display(conv)[0]
    answer = shown[1]["content"]
    assert answer.startswith("second") and "2/2" in answer and 'href="#pg-ver-1-prev"' in answer
    assert "pg-ver-1-next" not in answer  # nothing after the last version
    assert strip_marks(answer) == "second"
    assert "pg-versions" not in display(Conversation(answered("q", "only")))[0][1]["content"]


def test_undo_of_one_version_shows_the_one_before() -> None:
    conv = Conversation(answered("a", "ra"))
    edit(conv, 0, "a2", "ra2")
    conv.selected = 1
    conv.forget_after(0)
    assert texts(conv) == ["a", "ra"] and conv.turns[0].fork is None  # one version left: no "‹ 1/1 ›"
    assert conv.selected is None
    conv.forget_after(0)
    assert conv.turns == []


def test_a_kept_reply_has_every_number_it_had() -> None:
    conv = Conversation(answered("q", "first"))
    conv.turns[1].reply = reply("first", 4, logprobs=True)
    back = export.load(json.loads(json.dumps(export.dump(export.Snapshot(conv))))).conv
    old, new = conv.turns[1].reply, back.turns[1].reply
    assert new.stats() == old.stats() and new.first.logprobs == old.first.logprobs
    assert list(new.raw) == list(old.raw) and new.first.token_ids == old.first.token_ids
    assert new.usage is not None and new.usage.model_fields_set == old.usage.model_fields_set
    assert back.turns[1].request == conv.turns[1].request and display(back)[0] == display(conv)[0]


def test_versions_survive_a_file_and_come_back_switchable() -> None:
    conv = Conversation(answered("a", "ra") + answered("b", "rb"))
    regenerate(conv, "rb2")
    edit(conv, 0, "a2", "ra2")
    doc = json.loads(json.dumps(export.dump(export.Snapshot(conv))))
    assert doc["format"] == "llm-playground/conversation@2"
    assert doc["messages"] == conv.messages(with_reasoning=True)  # the shown path, as a request's core
    back = export.load(doc).conv
    assert texts(back) == ["a2", "ra2"]
    assert back.switch(0, -1) and texts(back) == ["a", "ra", "b", "rb2"]
    assert back.switch(3, -1) and texts(back) == ["a", "ra", "b", "rb"]
    assert back.turns[0].fork is not None and back.turns[0].fork.kinds == ["original", "edit"]


def test_a_version_1_file_still_imports() -> None:
    doc = {
        "format": "llm-playground/conversation@1",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    }
    back = export.load(doc).conv
    assert texts(back) == ["hi", "hello"] and len(display(back)[0]) == 2  # no numbers to show: none invented


def test_media_is_stored_once_however_many_requests_carry_it() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 5000}}
    turns = [Turn("user", "look", parts=[image], attachments=["▣ a.png"])]
    body = {"model": "m", "messages": [{"role": "user", "content": [image, {"type": "text", "text": "look"}]}]}
    turns.append(Turn("assistant", reply=reply("an image"), request=body))
    conv = Conversation(turns)
    regenerate(conv, "still an image")
    conv.turns[1].request = body
    doc = export.dump(export.Snapshot(conv), media_budget=10**6)
    assert len(doc["blobs"]) == 1 and len(json.dumps(doc)) < 5000 + 6000  # three copies in, one stored
    back = export.load(json.loads(json.dumps(doc))).conv
    assert back.turns[0].parts == [image] and back.turns[1].request == body


def test_the_browser_copy_keeps_the_numbers_and_sheds_detail_first() -> None:
    conv = Conversation(answered("q", "a"))
    conv.turns[1].reply = reply("a" * 10, 2000, logprobs=True)
    snap = export.Snapshot(conv)
    full = export.dump(snap, persist.BROWSER_MEDIA_CHARS)
    lean = export.dump(snap, persist.BROWSER_MEDIA_CHARS, lean=True)
    assert "raw" in full["turns"][1]["reply"] and "raw" not in lean["turns"][1]["reply"]
    assert "top_logprobs" not in lean["turns"][1]["reply"]["choices"][0]["logprobs"][0]
    assert len(json.dumps(lean)) < len(json.dumps(full))
    kept = export.load(json.loads(json.dumps(lean))).conv.turns[1].reply
    assert kept.stats() == conv.turns[1].reply.stats()  # the statistics and the timeline always stay
    assert len(json.dumps(persist.browser_doc(snap))) <= persist.BROWSER_CHARS
