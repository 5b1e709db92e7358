"""Embedded inference engine and its OpenAI/MindIE-compatible API.

Process-wide settings that must precede `import torch` live here because every entry point imports `engine`
first: torch's OpenMP threads spin-wait by default, which on a 2-core machine running a server and a client
makes everything ~4x slower.
"""

import os as _os

_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# ...but a worker that sleeps the moment a parallel region ends takes ~120 us to wake for the next one, and a
# decode step runs hundreds of them: spinning briefly first (about 20 us) makes that ~5 us, and an idle server
# still sleeps (bench/README.md, "OpenMP wake-up").
_os.environ.setdefault("GOMP_SPINCOUNT", "20000")
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
_os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may download weights from a hub at run time
_os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
