"""Multimodal models: detect and load them (`loading`), and turn decoded media into their inputs (`inputs`).

Imports nothing of engine/protocol, engine/serving, engine/http or engine/core: the service calls `build_inputs`, and the engine core only
carries the resulting tensors to the runner.
"""

from engine.multimodal.inputs import MediaInputError, MediaInputs, build_inputs
from engine.multimodal.loading import MediaProcessors, detect_modalities, load_multimodal

__all__ = ["MediaInputError", "MediaInputs", "MediaProcessors", "build_inputs", "detect_modalities", "load_multimodal"]
