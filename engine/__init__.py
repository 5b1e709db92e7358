"""Embedded inference engine and its OpenAI/MindIE-compatible API.

The one place where importing the engine changes the process, and only for what must be settled before torch is
first imported (every entry point, app.py, the notebooks through `app`, the tests' conftest, imports `engine`
first; set later, these would do nothing). Each is a default: a value already in the environment wins.

- OpenMP: libgomp reads its wait policy when torch loads it. Its workers spin-wait by default, which on a 2-core
  machine running a server and a client makes everything ~4x slower; but a worker that sleeps the moment a
  parallel region ends takes ~120 us to wake for the next one, and a decode step runs hundreds of them. Spinning
  briefly first (about 20 us) makes that ~5 us, and an idle server still sleeps (bench/README.md, "OpenMP wake-up").
- Ascend's torch extension: installed on a host without Ascend drivers it makes `import torch` fail, so its
  autoload is switched off there (engine/device.py, `prepare_torch_import`).

Nothing else in the engine sets a process-wide switch (grad mode, default dtype, thread counts, environment
variables, logging): the composition root, app.py's `main()`, sets those on purpose, and tests/test_process_state.py
fails if loading a model or building the service changes them.
"""

import os as _os

from engine import device as _device

_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
_os.environ.setdefault("GOMP_SPINCOUNT", "20000")
_device.prepare_torch_import()
