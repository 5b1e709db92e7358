"""Media parts of a request -> what the prompt gets (spec §2.4.1, §3).

Parts of a modality the served model accepts (a Qwen2-VL takes image and video, a Qwen2-Audio audio) are loaded
through engine/media (sources, limits and security rules of §3) and kept for the model's processor; the chat
template gets them as parts and writes their placeholders. Other image and video parts are refused with the
spec's error. Other audio parts are refused too or, with `audio_transcription` on, transcribed by Whisper and
replaced by their transcript as text; the response reports each transcript in its `transcription` field.
Nothing is fetched or decoded for a request that will be refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from dataclasses import dataclass, field
from typing import Any

from engine.config import ServingSettings
from engine.protocol.errors import RequestValidationError
from engine.protocol.messages import MEDIA_MODALITY, TextPart
from engine.protocol.request import ChatCompletionRequest
from engine.serving import prompt as prompts


@dataclass
class Transcript:
    message: int  # index in messages
    part: int  # index in that message's content
    text: str

    def as_json(self) -> dict[str, Any]:
        return {"message": self.message, "part": self.part, "text": self.text}


@dataclass
class KeptMedia:
    """A part the model takes itself, decoded; in the order of the parts, so of the template's placeholders."""

    message: int
    part: int
    media: Any  # engine.media.LoadedMedia

    def as_json(self, tokens: int) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message, "part": self.part, "type": self.media.kind, "tokens": tokens}
        if self.media.frames_sampled is not None:
            out["frames_sampled"] = self.media.frames_sampled
        if self.media.duration is not None:
            out["duration"] = round(self.media.duration, 3)
        return out


@dataclass
class PreparedMedia:
    request: ChatCompletionRequest  # media replaced by what the prompt takes (transcripts)
    transcripts: list[Transcript] = field(default_factory=list)
    salt: bytes = b""  # digest of the media, for prefix-cache keys: never reuse KV across different media
    kept: list[KeptMedia] = field(default_factory=list)  # parts for the model's processor


class MediaPreparer:
    def __init__(self, settings: ServingSettings, device: str = "cpu") -> None:
        self.settings = settings
        self.device = device
        self._transcriber: Any = None
        self._lock = threading.Lock()

    @property
    def transcriber_loaded(self) -> bool:
        """Whether Whisper is in memory (the first audio request loads it: seconds, once; the page says so)."""
        return self._transcriber is not None

    def transcriber(self) -> Any:
        """Whisper, loaded (and converted on first use) once; blocking, so called off the event loop."""
        with self._lock:
            if self._transcriber is None:
                from engine.media import Transcriber
                from engine.models import cache_root

                self._transcriber = Transcriber.load(cache_root(self.settings.cache_dir), self.device)
            return self._transcriber

    async def prepare(self, req: ChatCompletionRequest, accepts: frozenset[str] = frozenset()) -> PreparedMedia:
        """`accepts`: the modalities the served model takes itself."""
        parts = [
            (i, j, part)
            for i, message in enumerate(req.messages)
            for j, part in enumerate(message.content if isinstance(message.content, list) else [])
            if not isinstance(part, TextPart)
        ]
        if not parts:
            return PreparedMedia(req)
        for i, j, part in parts:  # refuse before fetching anything
            modality = MEDIA_MODALITY[part.type]
            if modality not in accepts and (modality != "audio" or not self.settings.audio_transcription):
                raise RequestValidationError(f"messages[{i}].content[{j}]: model does not accept {modality} input.")
        from engine.media import MediaError, load_all

        try:
            loaded = await load_all([part for _, _, part in parts], self.settings)
        except MediaError as exc:
            where = f"messages[{parts[exc.index][0]}].content[{parts[exc.index][1]}]: " if exc.index is not None else ""
            raise RequestValidationError(where + str(exc)) from None
        transcripts, kept, digest = [], [], hashlib.sha256()
        for (i, j, part), media in zip(parts, loaded):
            digest.update(media.digest.encode())
            if MEDIA_MODALITY[part.type] in accepts:
                kept.append(KeptMedia(i, j, media))
                continue
            model = await asyncio.to_thread(self.transcriber)
            text = (await asyncio.to_thread(model.transcribe, media.audio)).strip()
            transcripts.append(Transcript(i, j, text))
        request = _replace_parts(req, transcripts) if transcripts else req
        return PreparedMedia(request, transcripts, digest.digest(), kept)

    def model_inputs(
        self, ids: list[int], prepared: PreparedMedia, processors: Any, context_length: int
    ) -> tuple[list[int], dict[str, Any], list[dict[str, Any]]]:
        """The kept parts into the model's inputs: placeholders expanded to the media's tokens (then the length
        limit again), the prefill tensors, and what each part cost. Blocking (image processor, patchify, Whisper
        features): run off the event loop."""
        from engine.multimodal import MediaInputError, build_inputs

        try:
            inputs = build_inputs(ids, [k.media for k in prepared.kept], processors)
        except MediaInputError as exc:
            raise RequestValidationError(f"Parameter chat_template: {exc}.") from None
        prompts.check_length(len(inputs.ids), self.settings, context_length)
        report = [k.as_json(n) for k, n in zip(prepared.kept, inputs.tokens)]
        return inputs.ids, inputs.tensors, report


def _replace_parts(req: ChatCompletionRequest, transcripts: list[Transcript]) -> ChatCompletionRequest:
    by_place = {(t.message, t.part): t.text for t in transcripts}
    messages = []
    for i, message in enumerate(req.messages):
        if not isinstance(message.content, list) or not any((i, j) in by_place for j in range(len(message.content))):
            messages.append(message)
            continue
        last = len(message.content) - 1
        content = [  # parts join with no separator (§2.4.1): space a transcript off its neighbours
            TextPart(type="text", text=(" " if j else "") + (by_place[(i, j)] or "…") + (" " if j < last else ""))
            if (i, j) in by_place
            else part
            for j, part in enumerate(message.content)
        ]
        messages.append(message.model_copy(update={"content": content}))
    return req.model_copy(update={"messages": messages})
