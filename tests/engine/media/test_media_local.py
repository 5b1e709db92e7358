"""Server-local media under `media_local_root` only (spec §3.4, cases 76-78). [SEC]"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from engine.config import Settings
from engine.media import LoadedMedia, MediaError, load_media
from engine.media.local import NOT_ALLOWED, read_local
from tests.media_samples import audio_bytes, image_bytes, video_bytes

PNG = image_bytes("PNG")


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    for path in (root / "a.png", root / "sub" / "b.png", outside / "secret.png"):
        path.write_bytes(PNG)
        path.chmod(0o644)
    (root / "clip.mp4").write_bytes(video_bytes("mp4", 1.0))
    (root / "speech.wav").write_bytes(audio_bytes("wav"))
    (root / "inside-link.png").symlink_to(root / "sub" / "b.png")
    (root / "escape.png").symlink_to(outside / "secret.png")
    (root / "dirlink").symlink_to(outside)
    (root / "dir.png").mkdir()
    return {"root": root, "outside": outside}


def settings_for(root: Path, allow: bool = True) -> Settings:
    return Settings(media_allow_local=allow, media_local_root=str(root)).serving


def load(source: str, root: Path, kind: str = "image_url", allow: bool = True) -> LoadedMedia:
    return asyncio.run(load_media({"type": kind, kind: {"url": source}}, settings_for(root, allow)))


def refused(source: str, root: Path, kind: str = "image_url", allow: bool = True) -> str:
    with pytest.raises(MediaError) as info:
        load(source, root, kind, allow)
    return info.value.message


def test_files_inside_the_root_load_in_every_form(tree: dict[str, Path]) -> None:
    root = tree["root"]
    for source in (
        "a.png",
        "sub/b.png",
        f"{root}/a.png",
        f"file://{root}/a.png",
        "file://sub/b.png",
        "inside-link.png",
        "./a.png",
    ):
        media = load(source, root)
        assert (media.kind, media.mime, media.origin, media.size) == ("image", "image/png", "local", len(PNG))
    assert load("clip.mp4", root, "video_url").frames_sampled == 2
    assert load(f"file://{root}/speech.wav", root, "audio_url").duration == pytest.approx(1.0)


@pytest.mark.parametrize(
    "source",
    [
        "../outside/secret.png",  # traversal
        "sub/../../outside/secret.png",
        "escape.png",  # symlink inside the root pointing outside
        "dirlink/secret.png",  # symlinked directory pointing outside
        "{outside}/secret.png",  # absolute path outside the root
        "file://{outside}/secret.png",
        "file:///etc/passwd",
        "/etc/passwd.png",
        "missing.png",
        "file://sub",  # a directory
        "dir.png",  # a directory with an image's name
        "a.png\x00.png",
        "a b.png",
        "a.png;x.png",
        "%2e%2e/outside/secret.png",
        "file://a.gif",
    ],
)
def test_refusals_are_generic(tree: dict[str, Path], source: str) -> None:
    source = source.format(outside=tree["outside"])
    message = refused(source, tree["root"])
    assert message == NOT_ALLOWED
    assert str(tree["root"]) not in message and "secret" not in message


def test_existing_and_missing_files_outside_the_root_give_the_same_error(tree: dict[str, Path]) -> None:
    exists = refused(f"{tree['outside']}/secret.png", tree["root"])
    missing = refused(f"{tree['outside']}/nothing-here.png", tree["root"])
    assert exists == missing == NOT_ALLOWED


def test_disabled_by_default_and_the_file_is_never_opened(tree: dict[str, Path]) -> None:
    opened: list[str] = []
    watching = threading.Event()

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if watching.is_set() and event == "open" and isinstance(args[0], str) and "passwd" in args[0]:
            opened.append(args[0])

    sys.addaudithook(hook)  # audit hooks cannot be removed; this one only records while `watching` is set
    watching.set()
    try:
        with pytest.raises(MediaError, match=NOT_ALLOWED):
            asyncio.run(load_media({"type": "image_url", "image_url": "file:///etc/passwd"}, Settings().serving))
        with pytest.raises(MediaError, match=NOT_ALLOWED):
            load("a.png", tree["root"], allow=False)
    finally:
        watching.clear()
    assert opened == []


def test_fifo_inside_the_root_is_refused_without_blocking(tree: dict[str, Path]) -> None:
    os.mkfifo(tree["root"] / "pipe.png")
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(refused("pipe.png", tree["root"])), daemon=True)
    thread.start()
    thread.join(10)
    assert result == [NOT_ALLOWED]


def test_group_or_world_writable_files_are_refused(tree: dict[str, Path]) -> None:
    (tree["root"] / "a.png").chmod(0o666)
    assert refused("a.png", tree["root"]) == NOT_ALLOWED
    (tree["root"] / "a.png").chmod(0o620)
    assert refused("a.png", tree["root"]) == NOT_ALLOWED


def test_oversize_file_is_refused_before_reading(tree: dict[str, Path]) -> None:
    big = tree["root"] / "big.png"
    with open(big, "wb") as f:
        f.truncate(20 * 1024 * 1024 + 1)  # sparse: nothing is written, and nothing may be read
    big.chmod(0o644)
    assert refused("big.png", tree["root"]) == NOT_ALLOWED


def test_extension_must_fit_the_part_type(tree: dict[str, Path]) -> None:
    assert refused("clip.mp4", tree["root"], "audio_url").startswith("unsupported audio source")
    assert refused("clip.mp4", tree["root"], "image_url") == "invalid base64 data"  # §3.2 rule 4 for images
    with pytest.raises(MediaError, match=NOT_ALLOWED):
        read_local("file://clip.mp4", "image", allow=True, root=str(tree["root"]))  # file:// does not bypass it


def test_root_given_through_a_symlink_still_works(tree: dict[str, Path], tmp_path: Path) -> None:
    link = tmp_path / "root-link"
    link.symlink_to(tree["root"])
    assert load("a.png", link).mime == "image/png"
    assert refused("escape.png", link) == NOT_ALLOWED


def test_content_must_match_an_allowed_container(tree: dict[str, Path]) -> None:
    (tree["root"] / "fake.png").write_bytes(b"GIF89a" + b"\0" * 40)
    (tree["root"] / "fake.png").chmod(0o644)
    assert refused("fake.png", tree["root"]) == NOT_ALLOWED  # §3.4: a wrong type gets the generic message too
