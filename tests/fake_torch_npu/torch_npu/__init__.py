"""FAKE torch_npu for tests: stands in for the Ascend bridge installed on a host without Ascend drivers.

We have no NPU; this fake only lets the tests prove that such a host still starts on the next device.
"""

raise RuntimeError("libascendcl.so: cannot open shared object file (fake torch_npu)")
