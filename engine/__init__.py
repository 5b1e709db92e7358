"""Embedded inference engine and its OpenAI/MindIE-compatible API.

Process-wide settings that must precede `import torch` live here because every entry point imports `engine`
first: torch's OpenMP threads spin-wait by default, which on a 2-core machine running a server and a client
makes everything ~4x slower.
"""

import os as _os

_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
_os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may download weights from a hub at run time
_os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
